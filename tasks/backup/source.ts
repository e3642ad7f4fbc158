import type { Readable } from 'node:stream';
import type { RestoreSettings } from '../inventory/model.ts';
import { chooseDump, keyObjectName, masterKeyFromHex, openDataKey, openStream } from './format.ts';
import { SnapshotBucket } from './s3.ts';
import { SnapshotFile } from './snapshot-file.ts';

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

  /** The verified snapshot on the control node's disk: a new stream of it for each member. */
  async open(): Promise<Readable> {
    return (await this.#fetch()).read();
  }

  #fetch(): Promise<SnapshotFile> {
    this.#file ??= this.choose().then(async (name) => {
      const key = this.restore.encryption_key;
      const file = new SnapshotFile('restore');
      try {
        const dump = await this.bucket.getStream(name);
        await file.write(key.isEmpty ? dump : openStream(dump, openDataKey(await this.bucket.get(keyObjectName(name)), masterKeyFromHex(key.reveal()))));
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
