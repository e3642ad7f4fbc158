import type { Readable } from 'node:stream';
import { ETCD_MAX_QUOTA_BYTES, MiB, S3_KEY_OBJECT_CAP, type Cap } from '../core/limits.ts';
import type { RestoreSettings } from '../inventory/model.ts';
import { chooseDump, keyObjectName, masterKeyFromHex, openDataKey, openStream, sealedSize } from './format.ts';
import { SnapshotBucket } from './s3.ts';
import { SnapshotFile } from './snapshot-file.ts';

/**
 * The most a snapshot downloaded for a restore may hold. A snapshot is etcd's database plus a 32-byte
 * digest, and the database is at most its quota: etcd raises NOSPACE once it has passed it, so it can
 * be a little larger. A quarter more (at least 16 MiB) is allowed for that, then the encryption's 40
 * bytes a MiB. The default quota is etcd's largest: the cap then holds any snapshot etcd can make.
 */
export function snapshotCap(quotaBytes: number = ETCD_MAX_QUOTA_BYTES): Cap {
  const database = quotaBytes + Math.max(Math.ceil(quotaBytes / 4), 16 * MiB);
  return { name: 's3-snapshot', bytes: sealedSize(database + 32) };
}

/**
 * The one snapshot every member restores from: chosen once per run (latest, or backup_timestamp),
 * downloaded and decrypted once on the control node — streamed into a private file, never whole in
 * memory —, its trailing SHA-256 checked, then pushed to each member from that file. The guests
 * never see S3 credentials or the master key.
 */
export class SnapshotSource {
  readonly bucket: SnapshotBucket;
  #chosen?: Promise<string>;
  #file?: Promise<SnapshotFile>;

  readonly #cap: Cap;

  /** `quotaBytes`: etcd.space_quota, which bounds the snapshot's size (etcd's largest when not given). */
  constructor(
    readonly restore: RestoreSettings,
    quotaBytes: number = ETCD_MAX_QUOTA_BYTES,
  ) {
    this.bucket = new SnapshotBucket(restore.s3);
    this.#cap = snapshotCap(quotaBytes);
  }

  choose(): Promise<string> {
    this.#chosen ??= this.bucket.list(this.restore.s3.object_prefix).then((names) => {
      const chosen = chooseDump(names, this.restore.s3.object_prefix, this.restore.backup_timestamp);
      if (chosen) return chosen;
      const which = this.restore.backup_timestamp
        ? `${this.restore.s3.object_prefix}-${this.restore.backup_timestamp}.dump`
        : `${this.restore.s3.object_prefix}-<timestamp>.dump`;
      throw new Error(`no snapshot ${which} in ${this.bucket.where} (restore.s3.object_prefix, restore.backup_timestamp)`);
    });
    return this.#chosen;
  }

  /** The verified snapshot on the control node's disk: a new stream of it for each member. */
  async open(): Promise<Readable> {
    return (await this.#fetch()).read();
  }

  #fetch(): Promise<SnapshotFile> {
    this.#file ??= this.choose().then(async (name) => {
      const key = this.restore.encryption_key;
      const file = new SnapshotFile('restore');
      try {
        const dump = await this.bucket.getStream(name, this.#cap);
        await file.write(
          key.isEmpty
            ? dump
            : openStream(dump, openDataKey(await this.bucket.get(keyObjectName(name), S3_KEY_OBJECT_CAP), masterKeyFromHex(key.reveal()))),
        );
        await file.verify(`${name}${key.isEmpty ? ' (restore.encryption_key is empty: read as unencrypted)' : ''}`);
        return file;
      } catch (error) {
        file.remove();
        throw error;
      }
    });
    return this.#file;
  }

  /** Closes the S3 client and removes the snapshot's file. */
  async close(): Promise<void> {
    this.bucket.close();
    const file = await this.#file?.catch(() => undefined);
    file?.remove();
  }
}
