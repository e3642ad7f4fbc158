import { createHash } from 'node:crypto';
import type { RestoreSettings } from '../inventory/model.ts';
import { chooseDump, decryptSnapshot, keyObjectName, masterKeyFromHex } from './format.ts';
import { SnapshotBucket } from './s3.ts';

/** etcd appends the SHA-256 of the database to every snapshot it streams; etcdctl restore checks it too. */
export function verifySnapshotHash(snapshot: Buffer, where: string): void {
  const body = snapshot.subarray(0, snapshot.length - 32);
  if (snapshot.length <= 32 || !createHash('sha256').update(body).digest().equals(snapshot.subarray(snapshot.length - 32))) {
    throw new Error(`${where} is not an intact etcd snapshot (its trailing SHA-256 does not match)`);
  }
}

/**
 * The one snapshot every member restores from: chosen once per run (latest, or backup_timestamp),
 * downloaded and decrypted once on the control node, then pushed to each member. The guests never
 * see S3 credentials or the master key.
 */
export class SnapshotSource {
  readonly bucket: SnapshotBucket;
  #chosen?: Promise<string>;
  #bytes?: Promise<Buffer>;

  constructor(readonly restore: RestoreSettings) {
    this.bucket = new SnapshotBucket(restore.s3);
  }

  choose(): Promise<string> {
    this.#chosen ??= this.bucket.list(this.restore.s3.object_prefix).then((names) => {
      const chosen = chooseDump(names, this.restore.s3.object_prefix, this.restore.backup_timestamp);
      if (chosen) return chosen;
      const which = this.restore.backup_timestamp ? `${this.restore.s3.object_prefix}-${this.restore.backup_timestamp}.dump` : `${this.restore.s3.object_prefix}-<timestamp>.dump`;
      throw new Error(`no snapshot ${which} in ${this.bucket.where} (restore.s3.object_prefix, restore.backup_timestamp)`);
    });
    return this.#chosen;
  }

  fetch(): Promise<Buffer> {
    this.#bytes ??= this.choose().then(async (name) => {
      const dump = await this.bucket.get(name);
      const key = this.restore.encryption_key;
      const snapshot = key.isEmpty ? dump : decryptSnapshot(dump, await this.bucket.get(keyObjectName(name)), masterKeyFromHex(key.reveal()));
      verifySnapshotHash(snapshot, `${name}${key.isEmpty ? ' (restore.encryption_key is empty: read as unencrypted)' : ''}`);
      return snapshot;
    });
    return this.#bytes;
  }

  close(): void {
    this.bucket.close();
  }
}
