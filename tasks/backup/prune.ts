import { retention } from './format.ts';

/** What pruning needs of a bucket (SnapshotBucket, or a fake in tests). */
export interface PrunableBucket {
  list(prefix: string): Promise<string[]>;
  delete(name: string): Promise<void>;
}

export interface PruneResult {
  kept: string[];
  deleted: string[];
}

/**
 * Keeps the `keep` newest snapshots under `prefix` and deletes the older ones with their keys. The
 * decision needs the whole listing: if listing fails, nothing is deleted. A failed delete stops
 * there (what was deleted so far is named in the error); the next run deletes the rest.
 */
export async function pruneSnapshots(bucket: PrunableBucket, prefix: string, keep: number): Promise<PruneResult> {
  const names = await bucket.list(`${prefix}-`);
  const plan = retention(names, prefix, keep);
  const deleted: string[] = [];
  for (const name of plan.deleted) {
    try {
      await bucket.delete(name);
    } catch (error) {
      throw new Error(
        `deleting ${name} failed after deleting ${deleted.length} object(s)${deleted.length ? ` (${deleted.join(', ')})` : ''}: ${(error as Error).message}`,
      );
    }
    deleted.push(name);
  }
  return { kept: plan.kept, deleted };
}
