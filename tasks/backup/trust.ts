import { backupTimestamp, keyObjectName, snapshotsIn, type NamedSnapshot } from './format.ts';
import { manifestObjectName, verifyManifest, type BackupManifest } from './manifest.ts';

/**
 * Which of a bucket's snapshots are this cluster's own, decided from its listing and the manifests
 * read for it (manifest.ts), and what retention keeps of those. Pure: the restore, `recover
 * --from-snapshot` and `etcd-kvm backup` ask the bucket, then decide here; the members' agent decides
 * alike in Python (`judge` and `retention` in agent/etcd-kvm-agent.py, held to the same tables by
 * test/unit/backup-trust.test.ts).
 */

/** A name may be dated this far past the control node's clock (members' clocks drift): beyond it, it is planted. */
export const FUTURE_SKEW_SECONDS = 300;

export interface TrustedSnapshot extends NamedSnapshot {
  manifest: BackupManifest;
}

export interface IgnoredSnapshot extends NamedSnapshot {
  why: string;
  /** Present when the manifest verifies but binds another cluster: restorable when named (restore.backup_timestamp). */
  manifest?: BackupManifest;
}

export interface BucketVerdict {
  /** This cluster's snapshots, oldest first. */
  trusted: TrustedSnapshot[];
  ignored: IgnoredSnapshot[];
}

export interface TrustContext {
  prefix: string;
  /** The state directory's cluster ID; undefined before it was made (a new state directory). */
  clusterId: string | undefined;
  masterKey: Uint8Array;
  now: Date;
}

/** The manifests to read for a listing: one per snapshot that has one. */
export function manifestsToRead(names: readonly string[], prefix: string): string[] {
  const present = new Set(names);
  return snapshotsIn(names, prefix)
    .map((snapshot) => manifestObjectName(snapshot.name))
    .filter((name) => present.has(name));
}

/** Why a snapshot is not this cluster's own, or its manifest when it is. */
function judge(snapshot: NamedSnapshot, text: string | undefined, context: TrustContext): { why: string; manifest?: BackupManifest } {
  if (Date.parse(snapshot.time) > context.now.getTime() + FUTURE_SKEW_SECONDS * 1000)
    return { why: `dated ${snapshot.time}, after this machine's clock (${backupTimestamp(context.now)})` };
  if (text === undefined) return { why: 'no manifest: not made by etcd-kvm with a manifest (an older version, or another tool)' };
  const manifest = verifyManifest(text, context.masterKey);
  if (!manifest) return { why: 'its manifest does not verify with restore.encryption_key' };
  if (manifest.object !== snapshot.name) return { why: `its manifest is ${manifest.object}'s: renamed or copied` };
  if (manifest.cluster !== context.clusterId)
    return {
      why: `taken of another cluster (${manifest.cluster}), not this state directory's (${context.clusterId ?? 'none made yet'})`,
      manifest,
    };
  return { why: '', manifest };
}

/** `manifests`: each manifest object's text, by its name; absent when there was none. */
export function judgeSnapshots(names: readonly string[], manifests: ReadonlyMap<string, string>, context: TrustContext): BucketVerdict {
  const verdict: BucketVerdict = { trusted: [], ignored: [] };
  for (const snapshot of snapshotsIn(names, context.prefix)) {
    const { why, manifest } = judge(snapshot, manifests.get(manifestObjectName(snapshot.name)), context);
    if (!why && manifest) verdict.trusted.push({ ...snapshot, manifest });
    else verdict.ignored.push({ ...snapshot, why, ...(manifest ? { manifest } : {}) });
  }
  return verdict;
}

export interface RetentionPolicy {
  /** The newest `keep` stay (at least 1). */
  keep: number;
  /** And none older than this but the newest (0: no limit). */
  maxAgeSeconds: number;
  now: Date;
}

/**
 * Retention over this cluster's snapshots only: the `keep` newest stay, and none older than the age
 * limit but the newest; each other one goes with its .key and .manifest (the .dump first: a key
 * without its dump is harmless). `uploaded`, the snapshot a run has just made, never goes. Ignored
 * objects are never touched: whoever planted them cannot push a real backup out.
 */
export function retainTrusted(
  trusted: readonly TrustedSnapshot[],
  present: ReadonlySet<string>,
  policy: RetentionPolicy,
  uploaded?: string,
): { kept: string[]; deleted: string[] } {
  const { keep, maxAgeSeconds, now } = policy;
  if (!Number.isInteger(keep) || keep < 1) throw new RangeError(`keep must be a whole number of at least 1, not ${keep}`);
  const byCount = Math.max(trusted.length - keep, 0);
  const limit = now.getTime() - maxAgeSeconds * 1000;
  const byAge = maxAgeSeconds > 0 ? trusted.slice(0, -1).filter((snapshot) => Date.parse(snapshot.time) < limit).length : 0;
  const old = trusted.slice(0, Math.max(byCount, byAge)).filter((snapshot) => snapshot.name !== uploaded);
  const going = new Set(old.map((snapshot) => snapshot.name));
  return {
    kept: trusted.filter((snapshot) => !going.has(snapshot.name)).map((snapshot) => snapshot.name),
    deleted: old.flatMap(({ name }) => [name, keyObjectName(name), manifestObjectName(name)].filter((object) => present.has(object))),
  };
}
