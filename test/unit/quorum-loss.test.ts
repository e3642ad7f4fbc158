import test from 'ava';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { withOptionalValues } from '../../tasks/cli/optional-value.ts';
import { snapshotRefusal, withRestoreForced } from '../../tasks/recover/from-snapshot.ts';
import { readRecovery, writeRecovery } from '../../tasks/recover/force-new-cluster.ts';
import {
  chooseSurvivor,
  judgeQuorum,
  recordRefusal,
  resumePlan,
  type MemberQuorumFacts,
  type QuorumVerdict,
} from '../../tasks/recover/verdict.ts';
import { scratchDir } from '../helpers/scratch.ts';

const answering = (name: string, raftIndex: number, revision: number, leader = '0', isLearner = false): MemberQuorumFacts => ({
  name,
  etcd: { id: `id-${name}`, leader, raftIndex: BigInt(raftIndex), revision: BigInt(revision), isLearner },
});
const gone = (name: string): MemberQuorumFacts => ({ name, silent: 'connection refused', dataGone: 'its OS volume is gone' });
const silent = (name: string): MemberQuorumFacts => ({ name, silent: 'connection refused' });

const table: [string, MemberQuorumFacts[], number, QuorumVerdict['kind'], string[]?][] = [
  ['a leader is known: quorum', [answering('a', 10, 5, 'id-b'), gone('b'), gone('c')], 3, 'quorum'],
  ['all up, an election under way', [answering('a', 10, 5), answering('b', 10, 5), answering('c', 10, 5)], 3, 'may-return'],
  ['a power cut: every etcd silent, every disk there', [silent('a'), silent('b'), silent('c')], 3, 'may-return'],
  [
    'one survivor, one silent with its disks: a deploy may bring the quorum back',
    [answering('a', 10, 5), silent('b'), gone('c')],
    3,
    'may-return',
  ],
  ['one survivor, two gone: lost', [answering('a', 10, 5), gone('b'), gone('c')], 3, 'lost', ['a']],
  ['none survived: lost, no survivor', [gone('a'), gone('b'), gone('c')], 3, 'lost', []],
  ['two of five: lost', [answering('a', 10, 5), answering('b', 12, 6), gone('c'), gone('d'), gone('e')], 5, 'lost', ['a', 'b']],
  ['three of five: may return', [answering('a', 10, 5), answering('b', 12, 6), silent('c'), gone('d'), gone('e')], 5, 'may-return'],
  ['a learner is no survivor', [answering('a', 10, 5, '0', true), gone('b'), gone('c')], 3, 'lost', []],
];

for (const [title, members, voting, kind, survivors] of table) {
  test(`quorum verdict: ${title}`, (t) => {
    const verdict = judgeQuorum(members, voting);
    t.is(verdict.kind, kind, verdict.why);
    if (verdict.kind === 'lost')
      t.deepEqual(
        verdict.survivors.map((survivor) => [survivor.name, survivor.id]),
        (survivors ?? []).map((name) => [name, `id-${name}`]),
      );
  });
}

test('the lost verdict names what is gone and the quorum needed', (t) => {
  const verdict = judgeQuorum([answering('a', 10, 5), gone('b'), gone('c')], 3);
  t.is(verdict.why, 'only 1 of 3 voting members hold their data (b: its OS volume is gone; c: its OS volume is gone); a quorum is 2');
});

const survivors = [
  { name: 'b', id: 'id-b', raftIndex: 12n, revision: 6n },
  { name: 'a', id: 'id-a', raftIndex: 12n, revision: 7n },
  { name: 'c', id: 'id-c', raftIndex: 9n, revision: 9n },
];

test('the most advanced survivor: the highest raft index, then revision, then name', (t) => {
  t.like(chooseSurvivor(survivors), { name: 'a' });
  t.like(chooseSurvivor([survivors[0]!, { ...survivors[1]!, revision: 6n }]), { name: 'a' });
  t.like(chooseSurvivor([survivors[2]!]), { name: 'c' });
});

test('a named survivor is taken even if another is more advanced; a member that is none is refused', (t) => {
  t.like(chooseSurvivor(survivors, 'c'), { name: 'c' });
  t.regex((chooseSurvivor(survivors, 'd') as { refused: string }).refused, /^d is not a survivor/);
  t.regex((chooseSurvivor([]) as { refused: string }).refused, /only a snapshot can bring the cluster back/);
});

test('--from-snapshot takes an optional timestamp', (t) => {
  t.deepEqual(withOptionalValues(['-i', 'x', '--from-snapshot'], ['--from-snapshot']), ['-i', 'x', '--from-snapshot', '']);
  t.deepEqual(withOptionalValues(['--from-snapshot', '--dry-run'], ['--from-snapshot']), ['--from-snapshot', '', '--dry-run']);
  t.deepEqual(withOptionalValues(['--from-snapshot', '2026-11-25T02:48:00Z'], ['--from-snapshot']), [
    '--from-snapshot',
    '2026-11-25T02:48:00Z',
  ]);
});

test('a backup is restored only when no member holds data, or may', (t) => {
  t.is(snapshotRefusal([gone('a'), gone('b'), gone('c')]), undefined);
  t.regex(snapshotRefusal([answering('a', 10, 5), gone('b'), gone('c')])!, /^a still holds data \(or may\): a backup holds less/);
  t.regex(snapshotRefusal([silent('a'), silent('b'), gone('c')])!, /^a, b still hold data/);
});

test("the restoring inventory is the operator's with the restore on, founding the cluster anew", (t) => {
  const text = [
    '# the lab',
    'cluster:',
    '  name: lab',
    '  is_initializing: false',
    'defaults:',
    '  restore:',
    '    s3: { endpoint: "http://s3", bucket: b }',
    'members:',
    '  - name: etcd-1',
    '  - name: etcd-2',
    '    restore: { enabled: false, s3: { endpoint: "http://s3", bucket: b } }',
  ].join('\n');
  const forced = parse(withRestoreForced(text, '2026-11-25T02:48:00Z'));
  t.true(forced.cluster.is_initializing);
  t.deepEqual(forced.defaults.restore, {
    s3: { endpoint: 'http://s3', bucket: 'b' },
    enabled: true,
    backup_timestamp: '2026-11-25T02:48:00Z',
  });
  t.like(forced.members[1].restore, { enabled: true, backup_timestamp: '2026-11-25T02:48:00Z' });
  t.is(forced.members[0].restore, undefined);
  t.true(withRestoreForced(text, '').startsWith('# the lab'));
});

// A recovery under way (recovery.json) is resumed from live facts: its record alone never forces a cluster.
const resumeTable: [string, MemberQuorumFacts[], boolean, RegExp][] = [
  [
    'killed after the forced start: the survivor leads a cluster of itself',
    [answering('a', 10, 5, 'id-a'), gone('b'), gone('c')],
    false,
    /^the cluster has a quorum \(a knows a leader \(id-a\): the cluster has a quorum\): nothing is forced again; the deploy finishes the recovery$/,
  ],
  [
    'killed in the deploy, after a rejoined member took the lead: nothing is stopped or moved aside',
    [answering('a', 30, 9, 'id-b'), answering('b', 30, 9, 'id-b'), gone('c')],
    false,
    /^the cluster has a quorum \(a knows a leader \(id-b\)/,
  ],
  [
    'a record left behind on a healthy cluster, naming a member that does not lead',
    [answering('a', 50, 20, 'id-c'), answering('b', 50, 20, 'id-c'), answering('c', 50, 20, 'id-c')],
    false,
    /nothing is forced again/,
  ],
  [
    'killed after etcd stopped on the others, before the force: the quorum is still lost',
    [answering('a', 10, 5), gone('b'), gone('c')],
    true,
    /^the quorum is still lost \(only 1 of 3 voting members hold their data .*\): etcd stops on the other members that answer, their data is moved aside, a starts forcing a new cluster, then the deploy$/,
  ],
  [
    'killed while the survivor was stopped: its disks are there, so it may return, and the force goes on',
    [silent('a'), gone('b'), gone('c')],
    true,
    /^the quorum is still lost/,
  ],
];

for (const [name, members, force, say] of resumeTable)
  test(`resume: ${name}`, (t) => {
    const plan = resumePlan('a', judgeQuorum(members, 3));
    t.deepEqual(plan, { force, say: (plan as { say: string }).say });
    t.regex((plan as { say: string }).say, say);
  });

test('resume: a record left behind, then a power cut (every etcd silent, every disk there): refused, nothing forced', (t) => {
  const plan = resumePlan('a', judgeQuorum([silent('a'), silent('b'), silent('c')], 3));
  t.regex(
    (plan as { refused: string }).refused,
    /^the members that hold their data could form a quorum again \(3 of 3 voting members still hold their data.*the record is stale\. Run the deploy; once the cluster is healthy, delete recovery\.json$/,
  );
});

/** recovery.json bound to its recovery: this state directory's cluster ID, and the survivor's member ID as it answers now. */
const bindingTable: [string, Parameters<typeof recordRefusal>[0], RegExp | undefined][] = [
  [
    'the same cluster, the survivor answering as the member it was',
    { record: { from: 'a', clusterId: 'c-1', memberId: 'id-a' }, clusterId: 'c-1', survivor: answering('a', 10, 5) },
    undefined,
  ],
  [
    'the same cluster, the survivor silent (stopped by the recovery): nothing says otherwise',
    { record: { from: 'a', clusterId: 'c-1', memberId: 'id-a' }, clusterId: 'c-1', survivor: silent('a') },
    undefined,
  ],
  [
    'a state directory copied from another cluster',
    { record: { from: 'a', clusterId: 'c-2', memberId: 'id-a' }, clusterId: 'c-1', survivor: answering('a', 10, 5) },
    /^the record is cluster c-2's, and this state directory is cluster c-1's: delete recovery\.json and run recover again/,
  ],
  [
    'the survivor built again since (another member ID)',
    { record: { from: 'a', clusterId: 'c-1', memberId: 'id-old' }, clusterId: 'c-1', survivor: answering('a', 10, 5) },
    /^a answers as member id-a, and the recovery began from member id-old: it was built again since; delete recovery\.json/,
  ],
  [
    'a record an earlier version wrote, bound to nothing',
    { record: { from: 'a' }, clusterId: 'c-1', survivor: answering('a', 10, 5) },
    /^the record names no cluster or member ID \(an earlier etcd-kvm wrote it\)/,
  ],
];

for (const [name, binding, refused] of bindingTable)
  test(`resume, the record's binding: ${name}`, (t) => {
    const got = recordRefusal(binding);
    if (refused === undefined) t.is(got, undefined);
    else t.regex(got ?? '(accepted)', refused);
  });

test('recovery.json is written for its owner alone', (t) => {
  const dir = scratchDir('recovery');
  writeRecovery(dir, { from: 'a', raftIndex: '10', revision: '5', started: '2026-11-29T04:00:00Z' });
  t.is(statSync(join(dir, 'recovery.json')).mode & 0o777, 0o600);
  t.like(readRecovery(dir), { from: 'a' });
});
