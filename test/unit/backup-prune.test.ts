import test from 'ava';
import type { Cap } from '../../tasks/core/limits.ts';
import { masterKeyFromHex } from '../../tasks/backup/format.ts';
import { renderManifest } from '../../tasks/backup/manifest.ts';
import { pruneSnapshots, type PrunableBucket } from '../../tasks/backup/prune.ts';

/** Pruning against a bucket in memory: what it reads, what it deletes, and that a failure deletes nothing more. */

const MASTER = masterKeyFromHex('a1'.repeat(32));
const CLUSTER = '6f1c1f4e-3a7b-4c1e-9d55-0b5a0c3f9e21';
const CONTEXT = { prefix: 'lab', clusterId: CLUSTER, masterKey: MASTER, now: new Date('2026-11-28T00:00:00Z') };
const POLICY = { keep: 2, maxAgeSeconds: 0 };

class MemoryBucket implements PrunableBucket {
  readonly deletes: string[] = [];
  constructor(
    public objects: Map<string, string>,
    readonly fail: { list?: boolean; get?: string; delete?: string } = {},
  ) {}
  async list(prefix: string): Promise<string[]> {
    if (this.fail.list) throw new Error('503 Slow Down');
    return [...this.objects.keys()].filter((name) => name.startsWith(prefix));
  }
  async get(name: string, _cap: Cap): Promise<Buffer> {
    if (name === this.fail.get) throw new Error('500 InternalError');
    return Buffer.from(this.objects.get(name) ?? '');
  }
  async delete(name: string): Promise<void> {
    if (name === this.fail.delete) throw new Error('403 AccessDenied');
    this.deletes.push(name);
    this.objects.delete(name);
  }
}

const DAYS = ['01', '02', '03', '04'];
const snapshots = () =>
  new Map(
    DAYS.flatMap((day) => {
      const stem = `lab-2026-11-${day}T00:00:00Z`;
      const manifest = renderManifest(
        {
          cluster: CLUSTER,
          object: `${stem}.dump`,
          revision: Number(day),
          dumpSha256: 'd'.repeat(64),
          keySha256: 'e'.repeat(64),
          taken: `2026-11-${day}T00:00:00Z`,
          by: 'etcd-1',
        },
        MASTER,
      );
      return [
        [`${stem}.dump`, 'sealed'],
        [`${stem}.key`, 'key'],
        [`${stem}.manifest`, manifest],
      ] as [string, string][];
    }),
  );
const objectsOf = (day: string) => ['dump', 'key', 'manifest'].map((kind) => `lab-2026-11-${day}T00:00:00Z.${kind}`);

test('prune: keeps the newest N with their keys and manifests, deletes the rest oldest first; names what it ignored', async (t) => {
  const bucket = new MemoryBucket(new Map([...snapshots(), ['labrador.txt', ''], ['lab-2026-11-05T00:00:00Z.dump', 'planted']]));
  const result = await pruneSnapshots(bucket, CONTEXT, POLICY);
  t.deepEqual(bucket.deletes, [...objectsOf('01'), ...objectsOf('02')]);
  t.deepEqual(result.kept, ['lab-2026-11-03T00:00:00Z.dump', 'lab-2026-11-04T00:00:00Z.dump']);
  t.deepEqual(
    result.ignored.map((object) => object.name),
    ['lab-2026-11-05T00:00:00Z.dump'],
  );
  t.true(bucket.objects.has('labrador.txt') && bucket.objects.has('lab-2026-11-05T00:00:00Z.dump'));
  // Run again: nothing more to delete.
  t.deepEqual((await pruneSnapshots(bucket, CONTEXT, POLICY)).deleted, []);
});

test('prune: a listing error, or a manifest that cannot be read, deletes nothing', async (t) => {
  const unlisted = new MemoryBucket(snapshots(), { list: true });
  await t.throwsAsync(pruneSnapshots(unlisted, CONTEXT, POLICY), { message: /503 Slow Down/ });
  t.deepEqual(unlisted.deletes, []);
  const unread = new MemoryBucket(snapshots(), { get: 'lab-2026-11-03T00:00:00Z.manifest' });
  await t.throwsAsync(pruneSnapshots(unread, CONTEXT, POLICY), { message: /500 InternalError/ });
  t.deepEqual(unread.deletes, []);
});

test('prune: a failed delete stops there and names what was already deleted', async (t) => {
  const bucket = new MemoryBucket(snapshots(), { delete: 'lab-2026-11-02T00:00:00Z.dump' });
  const error = await t.throwsAsync(pruneSnapshots(bucket, CONTEXT, { keep: 1, maxAgeSeconds: 0 }));
  t.regex(
    error!.message,
    /^deleting lab-2026-11-02T00:00:00Z.dump failed after deleting 3 object\(s\) \(lab-2026-11-01T00:00:00Z.dump, lab-2026-11-01T00:00:00Z.key, lab-2026-11-01T00:00:00Z.manifest\): 403 AccessDenied$/,
  );
  t.deepEqual(bucket.deletes, objectsOf('01'));
});
