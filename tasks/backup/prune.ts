import { S3_MANIFEST_OBJECT_CAP, type Cap } from '../core/limits.ts';
import { judgeSnapshots, manifestsToRead, retainTrusted, type BucketVerdict, type RetentionPolicy, type TrustContext } from './trust.ts';

/** What judging and pruning need of a bucket (SnapshotBucket, or one in memory in tests). */
export interface PrunableBucket {
  list(prefix: string): Promise<string[]>;
  get(name: string, cap: Cap): Promise<Buffer>;
  delete(name: string): Promise<void>;
}

/** The bucket's listing under the prefix, judged: which snapshots are this cluster's own (trust.ts). */
export async function judgeBucket(
  bucket: Omit<PrunableBucket, 'delete'>,
  context: TrustContext,
): Promise<BucketVerdict & { names: string[] }> {
  const names = await bucket.list(`${context.prefix}-`);
  const manifests = new Map<string, string>();
  for (const name of manifestsToRead(names, context.prefix))
    manifests.set(name, (await bucket.get(name, S3_MANIFEST_OBJECT_CAP)).toString('utf8'));
  return { ...judgeSnapshots(names, manifests, context), names };
}

export interface PruneResult {
  kept: string[];
  deleted: string[];
  /** Objects that are not this cluster's snapshots, left alone, each with why. */
  ignored: { name: string; why: string }[];
}

/**
 * Retention (trust.ts) applied to this cluster's snapshots under the prefix; `uploaded` never goes.
 * The decision needs the whole listing and every manifest: if reading fails, nothing is deleted. A
 * failed delete stops there (what was deleted so far is named in the error); the next run deletes the rest.
 */
export async function pruneSnapshots(
  bucket: PrunableBucket,
  context: TrustContext,
  policy: Omit<RetentionPolicy, 'now'>,
  uploaded?: string,
): Promise<PruneResult> {
  const verdict = await judgeBucket(bucket, context);
  const plan = retainTrusted(verdict.trusted, new Set(verdict.names), { ...policy, now: context.now }, uploaded);
  const deleted: string[] = [];
  for (const name of plan.deleted) {
    try {
      await bucket.delete(name);
    } catch (error) {
      throw new Error(
        `deleting ${name} failed after deleting ${deleted.length} object(s)` +
          `${deleted.length ? ` (${deleted.join(', ')})` : ''}: ${(error as Error).message}`,
      );
    }
    deleted.push(name);
  }
  return { kept: plan.kept, deleted, ignored: verdict.ignored.map(({ name, why }) => ({ name, why })) };
}
