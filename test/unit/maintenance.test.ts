import test from 'ava';
import { alarmsIn, alarmsListed } from '../../tasks/etcd/health.ts';
import { MaintenanceRefusal, planCompact, planDefrag, planDisarm, type AlarmFacts } from '../../tasks/etcd/maintenance.ts';

/** maintain.ts's decisions as tables: facts in, changes (or a refusal) out. */

const MiB = 1024 * 1024;

const defragCases: { name: string; dbSize: number; inUse: number; minFree: number; planned: boolean }[] = [
  { name: 'free space above the threshold: defragment', dbSize: 40 * MiB, inUse: 4 * MiB, minFree: 32 * MiB, planned: true },
  { name: 'free space exactly at the threshold: defragment', dbSize: 36 * MiB, inUse: 4 * MiB, minFree: 32 * MiB, planned: true },
  { name: 'free space below the threshold: skipped', dbSize: 40 * MiB, inUse: 10 * MiB, minFree: 32 * MiB, planned: false },
  { name: 'a freshly defragmented database: nothing', dbSize: 20 * 1024, inUse: 16 * 1024, minFree: MiB, planned: false },
];

for (const row of defragCases) {
  test(`defrag: ${row.name}`, (t) => {
    const changes = planDefrag({ dbSize: row.dbSize, dbSizeInUse: row.inUse }, row.minFree);
    t.is(changes.length, row.planned ? 1 : 0);
    if (row.planned) {
      t.deepEqual(changes[0]!.action, { kind: 'defragment', before: { dbSize: row.dbSize, dbSizeInUse: row.inUse } });
      t.regex(
        changes[0]!.summary,
        /^defragment: database [\d.]+ MiB, [\d.]+ MiB of it free \(threshold etcd.defrag_min_free [\d.]+ MiB\)$/,
      );
    }
  });
}

test('compact: history before the revision seen at the start is compacted once; a store with no history is left alone', (t) => {
  t.deepEqual(
    planCompact({ target: 165, compacted: false }).map((c) => c.action),
    [{ kind: 'compact', revision: 165 }],
  );
  t.deepEqual(planCompact({ target: 165, compacted: true }), []);
  t.deepEqual(planCompact({ target: 1, compacted: false }), []);
});

const QUOTA = 100 * MiB;
const facts = (alarms: AlarmFacts['alarms'], sizes: (number | undefined)[]): AlarmFacts => ({
  alarms,
  dbSizes: new Map(sizes.map((size, index) => [`etcd-${index + 1}`, size])),
  quota: QUOTA,
});
const NOSPACE = [{ member: 'etcd-2', alarm: 'NOSPACE' }];

test('disarm: no alarm: nothing to do, whatever the sizes', (t) => {
  t.deepEqual(planDisarm(facts([], [99 * MiB, 99 * MiB, 99 * MiB])), []);
});

test('disarm: NOSPACE with every database under 90 % of the quota: disarmed', (t) => {
  const changes = planDisarm(facts(NOSPACE, [10 * MiB, 89 * MiB, 5 * MiB]));
  t.deepEqual(
    changes.map((c) => c.action),
    [{ kind: 'disarm' }],
  );
  t.regex(changes[0]!.summary, /^disarm NOSPACE \(raised by etcd-2\)/);
});

test('disarm: NOSPACE with a database still near the quota is refused, naming it and the way out', (t) => {
  const error = t.throws(() => planDisarm(facts(NOSPACE, [10 * MiB, 95 * MiB, 5 * MiB])), { instanceOf: MaintenanceRefusal });
  t.regex(error!.message, /refusing to disarm NOSPACE: etcd-2's database is 95.0 MiB, .*under 90.0 MiB .*maintain.ts --compact --defrag/);
});

test('disarm: NOSPACE while a member does not answer is refused', (t) => {
  t.throws(() => planDisarm(facts(NOSPACE, [10 * MiB, undefined, 5 * MiB])), {
    instanceOf: MaintenanceRefusal,
    message: /etcd-2 does not answer/,
  });
});

test('disarm: a CORRUPT alarm alone is never cleared here', (t) => {
  t.deepEqual(planDisarm(facts([{ member: 'etcd-1', alarm: 'CORRUPT' }], [1, 1, 1])), []);
});

test("health: the alarms etcd lists among a member's status errors, each once", (t) => {
  t.deepEqual(alarmsIn(['memberID:16072858736840003364 alarm:NOSPACE ', 'memberID:1 alarm:NOSPACE ', 'memberID:2 alarm:CORRUPT ']), [
    'NOSPACE',
    'CORRUPT',
  ]);
  t.deepEqual(alarmsIn(['some other error']), []);
});

test("alarms: the cluster's, from every answering member's status errors, each alarm once with its member's decimal ID", (t) => {
  const everyMember = ['memberID:16072858736840003364 alarm:NOSPACE '];
  t.deepEqual(alarmsListed([everyMember, everyMember, ['etcdserver: no leader', 'memberID:7 alarm:CORRUPT ']]), [
    { memberId: '16072858736840003364', alarm: 'NOSPACE' },
    { memberId: '7', alarm: 'CORRUPT' },
  ]);
  t.deepEqual(alarmsListed([['etcdserver: no leader'], []]), []);
});
