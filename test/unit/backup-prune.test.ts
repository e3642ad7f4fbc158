import test from 'ava';
import { pruneSnapshots, type PrunableBucket } from '../../tasks/backup/prune.ts';

/** Pruning against a bucket in memory: what it deletes, and that a failure deletes nothing more. */

class MemoryBucket implements PrunableBucket {
  readonly deletes: string[] = [];
  constructor(
    public objects: string[],
    readonly failList = false,
    readonly failDeleteOf?: string,
  ) {}
  async list(prefix: string): Promise<string[]> {
    if (this.failList) throw new Error('503 Slow Down');
    return this.objects.filter((name) => name.startsWith(prefix));
  }
  async delete(name: string): Promise<void> {
    if (name === this.failDeleteOf) throw new Error('403 AccessDenied');
    this.deletes.push(name);
    this.objects = this.objects.filter((object) => object !== name);
  }
}

const SNAPSHOTS = ['01', '02', '03', '04'].flatMap((day) => [`lab-2026-11-${day}T00:00:00Z.dump`, `lab-2026-11-${day}T00:00:00Z.key`]);

test('prune: keeps the newest N with their keys, deletes the rest oldest first, dump before key', async (t) => {
  const bucket = new MemoryBucket([...SNAPSHOTS, 'labrador.txt']);
  const result = await pruneSnapshots(bucket, 'lab', 2);
  t.deepEqual(bucket.deletes, [
    'lab-2026-11-01T00:00:00Z.dump',
    'lab-2026-11-01T00:00:00Z.key',
    'lab-2026-11-02T00:00:00Z.dump',
    'lab-2026-11-02T00:00:00Z.key',
  ]);
  t.deepEqual(result.kept, ['lab-2026-11-03T00:00:00Z.dump', 'lab-2026-11-04T00:00:00Z.dump']);
  t.true(bucket.objects.includes('labrador.txt'));
  // Run again: nothing more to delete.
  t.deepEqual((await pruneSnapshots(bucket, 'lab', 2)).deleted, []);
});

test('prune: a listing error deletes nothing', async (t) => {
  const bucket = new MemoryBucket(SNAPSHOTS, true);
  await t.throwsAsync(pruneSnapshots(bucket, 'lab', 1), { message: /503 Slow Down/ });
  t.deepEqual(bucket.deletes, []);
});

test('prune: a failed delete stops there and names what was already deleted', async (t) => {
  const bucket = new MemoryBucket(SNAPSHOTS, false, 'lab-2026-11-02T00:00:00Z.dump');
  const error = await t.throwsAsync(pruneSnapshots(bucket, 'lab', 1));
  t.regex(
    error!.message,
    /^deleting lab-2026-11-02T00:00:00Z.dump failed after deleting 2 object\(s\) \(lab-2026-11-01T00:00:00Z.dump, lab-2026-11-01T00:00:00Z.key\): 403 AccessDenied$/,
  );
  t.deepEqual(bucket.deletes, ['lab-2026-11-01T00:00:00Z.dump', 'lab-2026-11-01T00:00:00Z.key']);
});
