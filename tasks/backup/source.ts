import type { Readable } from 'node:stream';
import { ETCD_MAX_QUOTA_BYTES, MiB, S3_KEY_OBJECT_CAP, type Cap } from '../core/limits.ts';
import type { RestoreSettings } from '../inventory/model.ts';
import { createHash } from 'node:crypto';
import {
  BackupFormatError,
  dumpObjectName,
  hashedAlong,
  keyObjectName,
  masterKeyFromHex,
  openDataKey,
  openStream,
  sealedSize,
} from './format.ts';
import type { BackupManifest } from './manifest.ts';
import { judgeBucket } from './prune.ts';
import type { IgnoredSnapshot } from './trust.ts';
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

/** A chosen snapshot that is not what its manifest recorded, or not an intact etcd snapshot. */
export class SnapshotDamaged extends Error {}

/** The snapshot a restore reads, and what is known of where it came from. */
export interface ChosenSnapshot {
  name: string;
  /** Its verified manifest: this cluster's own, or (named explicitly) another cluster's made with the same key. */
  manifest?: BackupManifest;
  /** Why it is not this cluster's own, when restore.backup_timestamp named it anyway. */
  unauthenticated?: string;
  /** For the plan: whose it is, and what else the bucket held that was passed over. */
  provenance: string;
}

/** A few ignored objects by name, with why: what a bucket writer planted is said, not silently skipped. */
function ignoredNote(ignored: readonly IgnoredSnapshot[]): string {
  if (ignored.length === 0) return '';
  const named = ignored.slice(0, 3).map((snapshot) => `${snapshot.name} (${snapshot.why})`);
  return (
    `; ignored ${ignored.length} other snapshot(s) that are not this ` +
    `cluster's own: ${named.join(', ')}${ignored.length > 3 ? ', …' : ''}`
  );
}

const takenBy = (manifest: BackupManifest) => `taken by ${manifest.by} at revision ${manifest.revision}`;

/**
 * The one snapshot every member restores from: chosen once per run among the bucket's snapshots whose
 * manifest proves them this cluster's own (backup/trust.ts; the latest, or backup_timestamp's, which
 * may then be any snapshot, said to be unauthenticated), downloaded and decrypted once on the control
 * node — streamed into a private file, never whole in memory —, its sealed objects checked against
 * the manifest and its trailing SHA-256 against the data, then pushed to each member from that file.
 * The guests never see S3 credentials or the master key.
 */
export class SnapshotSource {
  readonly bucket: SnapshotBucket;
  #chosen?: Promise<ChosenSnapshot>;
  #file?: Promise<SnapshotFile>;

  readonly #cap: Cap;

  /**
   * `quotaBytes`: etcd.space_quota, which bounds the snapshot's size (etcd's largest when not given).
   * `clusterId`: the state directory's cluster ID when the snapshot is chosen (undefined before one was made).
   */
  constructor(
    readonly restore: RestoreSettings,
    quotaBytes: number = ETCD_MAX_QUOTA_BYTES,
    readonly clusterId: () => string | undefined = () => undefined,
  ) {
    this.bucket = new SnapshotBucket(restore.s3);
    this.#cap = snapshotCap(quotaBytes);
  }

  get #masterKey(): Uint8Array {
    if (this.restore.encryptionKey.isEmpty) throw new Error('restore.encryption_key is empty: a backup cannot be authenticated without it');
    return masterKeyFromHex(this.restore.encryptionKey.reveal());
  }

  choose(): Promise<ChosenSnapshot> {
    this.#chosen ??= this.#choose();
    return this.#chosen;
  }

  async #choose(): Promise<ChosenSnapshot> {
    const prefix = this.restore.s3.objectPrefix;
    const verdict = await judgeBucket(this.bucket, { prefix, clusterId: this.clusterId(), masterKey: this.#masterKey, now: new Date() });
    const timestamp = this.restore.backupTimestamp;
    if (timestamp) {
      const name = dumpObjectName(prefix, timestamp);
      const own = verdict.trusted.find((snapshot) => snapshot.name === name);
      if (own) return { name, manifest: own.manifest, provenance: `this cluster's, ${takenBy(own.manifest)}` };
      const other = verdict.ignored.find((snapshot) => snapshot.name === name);
      if (other)
        return {
          name,
          ...(other.manifest ? { manifest: other.manifest } : {}),
          unauthenticated: other.why,
          provenance: `UNAUTHENTICATED: ${other.why}; restored only because restore.backup_timestamp names it`,
        };
      throw new Error(`no snapshot ${name} in ${this.bucket.where} (restore.s3.object_prefix, restore.backup_timestamp)`);
    }
    const latest = verdict.trusted.at(-1);
    if (latest)
      return {
        name: latest.name,
        manifest: latest.manifest,
        provenance: `this cluster's latest, ${takenBy(latest.manifest)}${ignoredNote(verdict.ignored)}`,
      };
    throw new Error(
      `no backup of this cluster under ${prefix}- in ${this.bucket.where}${ignoredNote(verdict.ignored)}. ` +
        'To restore one of those anyway, name it with restore.backup_timestamp (the plan then says it is unauthenticated).',
    );
  }

  /** The verified snapshot on the control node's disk: a new stream of it for each member. */
  async open(): Promise<Readable> {
    return (await this.verifiedFile()).read();
  }

  /** The chosen snapshot downloaded (once), decrypted and checked against its manifest and its own SHA-256. */
  verifiedFile(): Promise<SnapshotFile> {
    this.#file ??= this.choose().then(async (chosen) => {
      const file = new SnapshotFile('restore');
      try {
        const sealedKey = await this.bucket.get(keyObjectName(chosen.name), S3_KEY_OBJECT_CAP);
        const dumpHash = createHash('sha256');
        const dump = (await this.bucket.getStream(chosen.name, this.#cap)) as AsyncIterable<Buffer>;
        await file.write(openStream(hashedAlong(dump, dumpHash), openDataKey(sealedKey, this.#masterKey)));
        const manifest = chosen.manifest;
        if (manifest) {
          const keyHash = createHash('sha256').update(sealedKey).digest('hex');
          if (keyHash !== manifest.keySha256 || dumpHash.digest('hex') !== manifest.dumpSha256)
            throw new SnapshotDamaged(`${chosen.name} or its .key is not what its manifest recorded: replaced in the bucket, or damaged`);
        }
        await file.verify(chosen.name).catch((error: Error) => {
          throw new SnapshotDamaged(error.message);
        });
        return file;
      } catch (error) {
        file.remove();
        // A seal that does not open is a damaged object (or another key's), not a failure to reach the bucket.
        throw error instanceof BackupFormatError ? new SnapshotDamaged(`${chosen.name}: ${error.message}`) : error;
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
