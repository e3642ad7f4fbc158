import test from 'ava';
import { formatChecks, pinRevision, verifyChecks, type MemberVerifyFacts, type VerifyFacts } from '../../tasks/verify/verdict.ts';

/** What verify reads of a healthy three-member cluster: each case below changes one thing. */
const AT = new Date('2026-11-28T12:00:00Z');
const CANARY = 'operator 4242 2026-11-28T12:00:00Z 0123456789abcdef';
const LIST = ['a1', 'b2', 'c3'];
function member(name: string, id: string, change: Partial<MemberVerifyFacts> = {}): MemberVerifyFacts {
  return {
    name,
    status: { id, isLearner: false, revision: 120, appliedIndex: 400, version: '3.5.30', alarms: [] },
    memberList: LIST,
    hash: { hash: 2_836_149_187, compactRevision: 80 },
    canary: { read: CANARY },
    certificate: { notAfter: new Date('2027-11-28T12:00:00Z') },
    ...change,
  };
}
function cluster(changes: Record<string, Partial<MemberVerifyFacts>> = {}, extra: Partial<VerifyFacts> = {}): VerifyFacts {
  return {
    members: [
      member('etcd-1', 'a1', changes['etcd-1']),
      member('etcd-2', 'b2', changes['etcd-2']),
      member('etcd-3', 'c3', changes['etcd-3']),
    ],
    pinnedRevision: 120,
    canaryValue: CANARY,
    clusterVersion: { version: '3.5.0' },
    at: AT,
    ...extra,
  };
}
const failures = (facts: VerifyFacts) =>
  verifyChecks(facts)
    .filter((check) => !check.ok)
    .map(({ check, member, detail }) => `${check}${member ? ` ${member}` : ''}: ${detail}`);

test('a consistent cluster: every check passes, and each says what it compared', (t) => {
  const checks = verifyChecks(cluster());
  t.deepEqual(failures(cluster()), []);
  t.deepEqual(
    [...new Set(checks.map(({ check }) => check))],
    ['member list', 'alarms', 'raft log', 'hashkv', 'canary', 'certificate', 'versions'],
  );
  t.regex(
    formatChecks(checks),
    /^ok {3}hashkv: equal on 3 voting members at revision 120: etcd-1 2836149187 \(compacted at 80\), etcd-2 .*$/m,
  );
  t.regex(formatChecks(checks), /^ok {3}canary: written once, read back linearizably through etcd-1, etcd-2, etcd-3$/m);
  t.regex(formatChecks(checks), /^ok {3}certificate etcd-2: chains to the CA, ends in 365 days$/m);
});

const rows: [what: string, facts: VerifyFacts, expected: RegExp[]][] = [
  [
    "a member's data changed behind etcd's back: its hash differs",
    cluster({ 'etcd-3': { hash: { hash: 17, compactRevision: 80 } } }),
    [
      /^hashkv: the members' data differ at revision 120: etcd-1 2836149187 \(compacted at 80\), etcd-2 2836149187 \(compacted at 80\), etcd-3 17 \(compacted at 80\)$/,
    ],
  ],
  [
    'a compaction between the hashes: not a verdict on the data, run again',
    cluster({ 'etcd-2': { hash: { hash: 99, compactRevision: 110 } } }),
    [/^hashkv: a compaction ran while the hashes were asked at revision 120, run verify again/],
  ],
  [
    'the pinned revision below the compaction on a member: its HashKV refused, named',
    cluster({ 'etcd-2': { hash: { error: 'mvcc: required revision has been compacted' } } }),
    [/^hashkv etcd-2: no HashKV at revision 120: mvcc: required revision has been compacted$/],
  ],
  [
    'a member silent: named, and nothing of it compared',
    cluster({
      'etcd-2': {
        status: { error: 'connect ECONNREFUSED' },
        memberList: { error: 'connect ECONNREFUSED' },
        hash: undefined,
        canary: undefined,
      },
    }),
    [/^answers etcd-2: its etcd does not answer: connect ECONNREFUSED$/],
  ],
  [
    'a member whose member list differs',
    cluster({ 'etcd-3': { memberList: ['a1', 'c3'] } }),
    [/^member list etcd-3: lists a1, c3; etcd-1 lists a1, b2, c3$/],
  ],
  [
    'an alarm raised',
    cluster({
      'etcd-2': { status: { id: 'b2', isLearner: false, revision: 120, appliedIndex: 400, version: '3.5.30', alarms: ['NOSPACE'] } },
    }),
    [/^alarms: raised: NOSPACE$/],
  ],
  [
    'a member 301 entries behind in the raft log, within the bound: no failure',
    cluster({ 'etcd-3': { status: { id: 'c3', isLearner: false, revision: 120, appliedIndex: 99, version: '3.5.30', alarms: [] } } }, {}),
    [],
  ],
  [
    'a member more than the bound behind in the raft log',
    cluster({ 'etcd-1': { status: { id: 'a1', isLearner: false, revision: 120, appliedIndex: 5_000, version: '3.5.30', alarms: [] } } }),
    [
      /^raft log etcd-2: applied index 400, 4600 behind the most advanced member \(5000; bound 1000\)$/,
      /^raft log etcd-3: applied index 400, 4600 behind/,
    ],
  ],
  [
    'the canary read back stale through a member',
    cluster({ 'etcd-2': { canary: { read: undefined } } }),
    [/^canary etcd-2: read nothing where the canary was written$/],
  ],
  [
    'the canary not written',
    cluster({}, { canaryError: 'through etcd-1: etcdserver: no leader' }),
    [/^canary: could not write the canary: through etcd-1: etcdserver: no leader$/],
  ],
  [
    "a certificate that does not chain to the state directory's CA",
    cluster({ 'etcd-1': { certificate: { error: 'unable to verify the first certificate' } } }),
    [/^certificate etcd-1: does not verify against the state directory's CA: unable to verify the first certificate$/],
  ],
  [
    'an expired certificate',
    cluster({ 'etcd-3': { certificate: { notAfter: new Date('2026-11-01T00:00:00Z') } } }),
    [/^certificate etcd-3: expired 2026-11-01T00:00:00\.000Z$/],
  ],
];

for (const [what, facts, expected] of rows)
  test(`verify: ${what}`, (t) => {
    const seen = failures(facts);
    t.is(seen.length, expected.length, seen.join('\n'));
    for (const [i, pattern] of expected.entries()) t.regex(seen[i] ?? '', pattern);
  });

test('the revision pinned is the lowest any voting member has applied; learners are not counted', (t) => {
  t.is(
    pinRevision([
      { isLearner: false, revision: 130 },
      { isLearner: false, revision: 120 },
      { isLearner: true, revision: 7 },
    ]),
    120,
  );
  t.is(pinRevision([{ isLearner: true, revision: 7 }]), undefined);
});

test('a store never compacted (etcd answers -1) is said so, not as a revision', (t) => {
  const never = { hash: { hash: 5, compactRevision: -1 } };
  const hashkv = verifyChecks(cluster({ 'etcd-1': never, 'etcd-2': never, 'etcd-3': never })).find(({ check }) => check === 'hashkv');
  t.is(
    hashkv?.detail,
    'equal on 3 voting members at revision 120: etcd-1 5 (never compacted), etcd-2 5 (never compacted), etcd-3 5 (never compacted)',
  );
});
