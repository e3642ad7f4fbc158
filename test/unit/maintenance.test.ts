import test from 'ava';
import { camelized } from '../../tasks/inventory/camel.ts';
import { alarmsIn, alarmsListed, wholeCluster, type MemberAnswer } from '../../tasks/etcd/health.ts';
import { MaintenanceRefusal, planCompact, planDefrag, planDisarm, type AlarmFacts } from '../../tasks/etcd/maintenance.ts';

/** maintain.ts's decisions as tables: facts in, changes (or a refusal) out. */

const MiB = 1024 * 1024;

const RULE = { free_bytes: 32 * MiB, free_fraction: 0, quota_fraction: 0 };
const QUOTA_8G = 8192 * MiB;
const defragCases: { name: string; dbSize: number; inUse: number; rule?: Partial<typeof RULE>; quota?: number; because?: RegExp }[] = [
  { name: 'free space above free_bytes: defragment', dbSize: 40 * MiB, inUse: 4 * MiB, because: /at least 32\.0 MiB free\)$/ },
  { name: 'free space exactly at free_bytes: defragment', dbSize: 36 * MiB, inUse: 4 * MiB, because: /at least 32\.0 MiB free\)$/ },
  { name: 'free space below free_bytes: skipped', dbSize: 40 * MiB, inUse: 10 * MiB },
  { name: 'a freshly defragmented database: nothing', dbSize: 20 * 1024, inUse: 16 * 1024, rule: { free_bytes: MiB } },
  { name: 'enough bytes free, but below free_fraction: skipped', dbSize: 400 * MiB, inUse: 360 * MiB, rule: { free_fraction: 0.25 } },
  {
    name: 'enough bytes free and free_fraction: defragment',
    dbSize: 400 * MiB,
    inUse: 200 * MiB,
    rule: { free_fraction: 0.25 },
    because: /at least 32\.0 MiB and 25 % free\)$/,
  },
  {
    name: 'near the quota with anything to free: defragment',
    dbSize: 90 * MiB,
    inUse: 89 * MiB,
    rule: { quota_fraction: 0.8 },
    quota: 100 * MiB,
    because: /at least 80 % of the quota \(100\.0 MiB\) with space to free\)$/,
  },
  { name: 'near the quota, nothing to free: skipped', dbSize: 90 * MiB, inUse: 90 * MiB, rule: { quota_fraction: 0.8 }, quota: 100 * MiB },
];

for (const row of defragCases) {
  test(`defrag by maintenance.defrag.rule: ${row.name}`, (t) => {
    const changes = planDefrag({ dbSize: row.dbSize, dbSizeInUse: row.inUse }, camelized({ ...RULE, ...row.rule }), row.quota ?? QUOTA_8G);
    t.is(changes.length, row.because ? 1 : 0);
    if (row.because) {
      t.deepEqual(changes[0]!.action, { kind: 'defragment', before: { dbSize: row.dbSize, dbSizeInUse: row.inUse } });
      t.regex(changes[0]!.summary, /^defragment: database [\d.]+ MiB, [\d.]+ MiB of it free \(maintenance\.defrag\.rule: /);
      t.regex(changes[0]!.summary, row.because);
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

/** Three members that answer, all naming a1 (etcd-1's ID) as the leader, with etcd-3's answer as given. */
const answersWith = (third: MemberAnswer['status']): MemberAnswer[] => [
  { name: 'etcd-1', status: { id: 'a1', leader: 'a1', isLearner: false, alarms: [] } },
  { name: 'etcd-2', status: { id: 'a2', leader: 'a1', isLearner: false, alarms: [] } },
  { name: 'etcd-3', status: third },
];
const wholeTable: { name: string; third: MemberAnswer['status']; unwhole: string[]; leaderId?: string }[] = [
  { name: 'whole', third: { id: 'a3', leader: 'a1', isLearner: false, alarms: [] }, unwhole: [], leaderId: 'a1' },
  { name: 'silent', third: { error: 'timed out' }, unwhole: ['etcd-3 does not answer (timed out)'], leaderId: 'a1' },
  { name: 'a learner', third: { id: 'a3', leader: 'a1', isLearner: true, alarms: [] }, unwhole: ['etcd-3 is a learner'], leaderId: 'a1' },
  {
    name: 'an alarm',
    third: { id: 'a3', leader: 'a1', isLearner: false, alarms: ['NOSPACE'] },
    unwhole: ['etcd-3 reports NOSPACE'],
    leaderId: 'a1',
  },
  {
    name: 'another leader',
    third: { id: 'a3', leader: 'a3', isLearner: false, alarms: [] },
    unwhole: ['the members do not name one leader'],
  },
];
for (const row of wholeTable)
  test(`a whole cluster (the drills' bar): ${row.name}`, (t) => {
    const { unwhole, leaderId } = wholeCluster(answersWith(row.third));
    t.deepEqual(unwhole, row.unwhole);
    t.is(leaderId, row.leaderId);
  });

test('a whole cluster: members that all name no leader (0) are not one', (t) => {
  const none = answersWith({ id: 'a3', leader: '0', isLearner: false, alarms: [] }).map((answer) =>
    'id' in answer.status ? { ...answer, status: { ...answer.status, leader: '0' } } : answer,
  );
  t.deepEqual(wholeCluster(none), { unwhole: ['the members do not name one leader'] });
});
