import test from 'ava';
import { hexId, type EtcdMemberFacts, type MemberFacts, type StatusFacts } from '../../tasks/status/facts.ts';
import { formatStatusTable, summarizeStatus } from '../../tasks/status/report.ts';

/** The status verdict as a table: facts in (member answers, member list, alarms), report out. */

const AT = new Date('2026-11-22T10:00:00Z');
const NAMES = ['etcd-1', 'etcd-2', 'etcd-3'];
const IDS = ['a1', 'b2', 'c3'];
const LEADER = 'c3';

function etcdOf(index: number): EtcdMemberFacts {
  return {
    id: IDS[index]!,
    leader: LEADER,
    isLearner: false,
    raftTerm: '6',
    revision: '12',
    raftIndex: '40',
    appliedIndex: '40',
    dbSize: 32768,
    dbSizeInUse: 16384,
    version: '3.4.23',
    errors: [],
  };
}

function healthy(): StatusFacts {
  const members: MemberFacts[] = NAMES.map((name, index) => ({
    name,
    hypervisor: 'lab',
    vm: 'running',
    image: { kind: 'built-from', image: 'debian-12.qcow2' },
    wantedImage: 'debian-12.qcow2',
    forceNewClusterLeft: false,
    etcd: etcdOf(index),
    servedCertificate: { notAfter: new Date('2027-11-22T00:00:00Z') },
  }));
  return {
    members,
    memberList: NAMES.map((name, index) => ({ id: IDS[index]!, name, isLearner: false, peerURLs: [`https://10.0.0.${index + 1}:2380`] })),
    alarms: [],
    clusterVersion: '3.4.0',
    caNotAfter: new Date('2036-01-01T00:00:00Z'),
    at: AT,
  };
}

interface Case {
  name: string;
  facts: (facts: StatusFacts) => void;
  healthy: boolean;
  roles?: string[];
  problems?: RegExp[];
  warnings?: RegExp[];
  problemCount?: number;
}

const cases: Case[] = [
  { name: 'all answer, one leader: healthy', facts: () => {}, healthy: true, roles: ['follower', 'follower', 'leader'] },
  {
    name: 'a member whose etcd does not answer, its VM shut off: degraded, role unknown',
    facts: (f) => Object.assign(f.members[0]!, { vm: 'shut off', etcd: { error: 'UNAVAILABLE' } }),
    healthy: false,
    roles: ['unknown', 'follower', 'leader'],
    problems: [/etcd-1: VM shut off/, /etcd-1: etcd does not answer \(UNAVAILABLE\)/],
  },
  {
    name: "a recovery's --force-new-cluster drop-in left in a running member: degraded, the way out named, its etcd still a follower",
    facts: (f) => Object.assign(f.members[1]!, { forceNewClusterLeft: true }),
    healthy: false,
    roles: ['follower', 'follower', 'leader'],
    problems: [
      /^etcd-2: a recovery's --force-new-cluster drop-in is left in it: .*`etcd-kvm recover` finishes the recovery, or a deploy removes the drop-in$/,
    ],
    problemCount: 1,
  },
  {
    name: 'a VM that libvirt does not have: degraded',
    facts: (f) => Object.assign(f.members[1]!, { vm: 'absent', etcd: { error: 'UNAVAILABLE' } }),
    healthy: false,
    problems: [/etcd-2: VM absent/],
  },
  {
    name: 'a learner not yet promoted: degraded, role learner',
    facts: (f) => {
      (f.members[0]!.etcd as EtcdMemberFacts).isLearner = true;
      (f.memberList as { isLearner: boolean }[])[0]!.isLearner = true;
    },
    healthy: false,
    roles: ['learner', 'follower', 'leader'],
    problems: [/etcd-1: still a learner/],
  },
  {
    name: 'a NOSPACE alarm: degraded, shown on its member with the way out',
    facts: (f) => {
      f.alarms.push({ memberId: 'b2', alarm: 'NOSPACE' });
      for (const m of f.members) (m.etcd as EtcdMemberFacts).errors.push('memberID:178 alarm:NOSPACE ');
    },
    healthy: false,
    problems: [/^etcd-2: alarm NOSPACE \(writes refused: etcd-kvm maintain --compact --defrag, then --disarm\)$/],
    problemCount: 1,
  },
  {
    name: 'a member etcd lists that the inventory does not have (a half-added learner): degraded',
    facts: (f) => (f.memberList as object[]).push({ id: 'd4', name: '', isLearner: true, peerURLs: ['https://10.0.0.4:2380'] }),
    healthy: false,
    problems: [/etcd lists member \(unstarted, https:\/\/10.0.0.4:2380\) \(d4\), which the inventory does not have/],
  },
  {
    name: 'members that disagree on the leader: degraded',
    facts: (f) => ((f.members[0]!.etcd as EtcdMemberFacts).leader = 'a1'),
    healthy: false,
    problems: [/members disagree on the leader/],
  },
  {
    name: 'no leader: degraded',
    facts: (f) => {
      for (const m of f.members) (m.etcd as EtcdMemberFacts).leader = '0';
    },
    healthy: false,
    roles: ['follower', 'follower', 'follower'],
    problems: [/^no leader$/],
  },
  {
    name: 'a certificate expiring in 10 days: healthy, with a warning',
    facts: (f) => (f.members[2]!.servedCertificate = { notAfter: new Date(AT.getTime() + 10 * 86_400_000) }),
    healthy: true,
    warnings: [/etcd-3: its certificate expires in 10 days .*deploy --renew-certs/],
  },
  {
    name: 'an expired certificate: degraded',
    facts: (f) => (f.members[2]!.servedCertificate = { notAfter: new Date(AT.getTime() - 1000) }),
    healthy: false,
    problems: [/etcd-3: its certificate expired/],
  },
  {
    name: 'members on two versions (a roll under way): healthy, with a warning naming each version and its members',
    facts: (f) => {
      (f.members[1]!.etcd as EtcdMemberFacts).version = '3.5.16';
      (f.members[2]!.etcd as EtcdMemberFacts).version = '3.5.16';
    },
    healthy: true,
    warnings: [/^members run 2 versions of etcd \(3\.4\.23: etcd-1; 3\.5\.16: etcd-2, etcd-3\): a roll is under way/],
  },
  {
    name: 'the cluster version unreadable: healthy, with a warning',
    facts: (f) => (f.clusterVersion = { error: 'etcd-1: /version: no answer in 5 s' }),
    healthy: true,
    warnings: [/the cluster version could not be read \(etcd-1: \/version: no answer in 5 s\)/],
  },
  {
    name: 'a member built from another image than base_image: healthy, with a warning that a deploy rebuilds it',
    facts: (f) => (f.members[1]!.image = { kind: 'built-from', image: 'debian-11.qcow2' }),
    healthy: true,
    warnings: [/^etcd-2: built from debian-11\.qcow2, not base_image's debian-12\.qcow2: a deploy rebuilds it/],
  },
  {
    name: "a member on the operator's own disk (volume_id): no image to compare",
    facts: (f) => {
      f.members[1]!.image = { kind: 'own-disk' };
      delete f.members[1]!.wantedImage;
    },
    healthy: true,
  },
  {
    name: 'the image unknown (the hypervisor did not answer): healthy, with a warning',
    facts: (f) => (f.members[0]!.image = { kind: 'unknown', why: 'hypervisor lab: connection refused' }),
    healthy: true,
    warnings: [/^etcd-1: the image its OS disk was built from is unknown \(hypervisor lab: connection refused\)/],
  },
  {
    name: "a deploy's recorded finding that the members' data differ: degraded, with when and what",
    facts: (f) =>
      (f.mismatch = JSON.stringify({ at: '2026-11-28T16:00:00.000Z', detail: "the members' data differ at revision 40: etcd-3 9" })),
    healthy: false,
    problems: [
      /^the members' data differed after a run at 2026-11-28T16:00:00\.000Z \(the members' data differ at revision 40: etcd-3 9\): deploys change nothing until one with --accept-mismatch/,
    ],
  },
  {
    name: 'the consistency record unreadable: healthy, with a warning',
    facts: (f) => (f.mismatch = { error: 'etcd-1: permission denied' }),
    healthy: true,
    warnings: [/^the record of the members' consistency could not be read \(etcd-1: permission denied\)/],
  },
  {
    name: 'no member list at all: degraded',
    facts: (f) => (f.memberList = { error: 'no member answered' }),
    healthy: false,
    problems: [/no member list: no member answered/],
  },
];

for (const row of cases) {
  test(`status: ${row.name}`, (t) => {
    const facts = healthy();
    row.facts(facts);
    const report = summarizeStatus(facts, NAMES);
    t.is(report.healthy, row.healthy, report.problems.join('; '));
    if (row.roles)
      t.deepEqual(
        report.members.map((m) => m.role),
        row.roles,
      );
    for (const pattern of row.problems ?? [])
      t.true(
        report.problems.some((p) => pattern.test(p)),
        `${pattern} in ${report.problems.join(' | ')}`,
      );
    if (!row.problems) t.deepEqual(report.problems, []);
    if (!row.warnings) t.deepEqual(report.warnings, []);
    if (row.problemCount !== undefined) t.is(report.problems.length, row.problemCount, report.problems.join(' | '));
    for (const pattern of row.warnings ?? [])
      t.true(
        report.warnings.some((w) => pattern.test(w)),
        `${pattern} in ${report.warnings.join(' | ')}`,
      );
    // The table's last line says the same verdict; a degraded one points to verify before it.
    const lines = formatStatusTable(report).split('\n');
    t.regex(lines.at(-1)!, row.healthy ? /^cluster: healthy/ : /^cluster: DEGRADED/);
    t.is(
      lines.some((line) => line.startsWith('hint: etcd-kvm verify -i INVENTORY')),
      !row.healthy,
    );
  });
}

test('status: the leader is named, and the table has a row per member with its ID and role', (t) => {
  const report = summarizeStatus(healthy(), NAMES);
  t.is(report.leader, 'etcd-3');
  const lines = formatStatusTable(report).split('\n');
  t.regex(lines[0]!, /^MEMBER\s+HYPERVISOR\s+VM\s+IMAGE\s+ID\s+ROLE/);
  t.regex(
    lines[3]!,
    /^etcd-3\s+lab\s+running\s+debian-12\.qcow2\s+c3\s+leader\s+6\s+12\s+40\s+32 KiB\s+16 KiB\s+3\.4\.23\s+-\s+2027-11-22$/,
  );
  t.is(lines[4], 'etcd: cluster version 3.4, every member that answered runs 3.4.23');
  t.is(lines.at(-1), 'cluster: healthy, 3 of 3 members voting, leader etcd-3');
});

test('status: members on two versions are listed by version, oldest first, with the cluster version', (t) => {
  const facts = healthy();
  (facts.members[0]!.etcd as EtcdMemberFacts).version = '3.5.9';
  (facts.members[2]!.etcd as EtcdMemberFacts).version = '3.5.10';
  facts.clusterVersion = '3.5.0';
  const report = summarizeStatus(facts, NAMES);
  t.is(report.clusterVersion, '3.5.0');
  t.deepEqual(report.versions, [
    { version: '3.4.23', members: ['etcd-2'] },
    { version: '3.5.9', members: ['etcd-1'] },
    { version: '3.5.10', members: ['etcd-3'] },
  ]);
  t.true(
    formatStatusTable(report).includes(
      '\netcd: cluster version 3.5, members on 3 versions: 3.4.23 (etcd-2), 3.5.9 (etcd-1), 3.5.10 (etcd-3)\n',
    ),
  );
});

test("status: etcd's decimal uint64 IDs become hex without losing precision", (t) => {
  // Number() would round this one (above 2^53) to ...8000.
  t.is(hexId('17362538116226385298'), 'f0f4206d10da8592');
  t.is(hexId('18446744073709551615'), 'ffffffffffffffff');
  t.is(hexId('1'), '1');
});

const backupRun = (finished: string, outcome: 'ok' | 'failed' = 'ok') =>
  JSON.stringify({
    member: 'etcd-2',
    tick: finished.replace(/:\d\dZ$/, ':00Z'),
    started: finished,
    finished,
    object: `lab-${finished}.dump`,
    outcome,
    revision: 99,
    period_seconds: 3600,
    ...(outcome === 'failed' ? { error: 'S3 PUT: HTTP 403' } : {}),
  });

test('status with scheduled backups: the last success and its age; degraded after two periods without one; a failed last run warned', (t) => {
  const fresh = healthy();
  fresh.backupRecords = { lastSuccess: backupRun('2026-11-22T09:30:00Z'), lastRun: backupRun('2026-11-22T09:30:00Z') };
  const report = summarizeStatus(fresh, NAMES);
  t.true(report.healthy);
  t.like(report.backup?.lastSuccess, { member: 'etcd-2', revision: 99, ageSeconds: 1800 });
  t.true(
    formatStatusTable(report)
      .split('\n')
      .includes('backup: last success 30 min ago (2026-11-22T09:30:00Z) by etcd-2, revision 99, lab-2026-11-22T09:30:00Z.dump'),
  );

  const stale = healthy();
  stale.backupRecords = { lastSuccess: backupRun('2026-11-22T07:30:00Z'), lastRun: backupRun('2026-11-22T09:00:00Z', 'failed') };
  const degraded = summarizeStatus(stale, NAMES);
  t.false(degraded.healthy);
  t.regex(degraded.problems.join('\n'), /the last successful backup is 2\.5 h old .*more than two schedule periods/);
  t.regex(degraded.warnings.join('\n'), /the last scheduled backup \(tick 2026-11-22T09:00:00Z, on etcd-2\) failed: S3 PUT: HTTP 403/);

  const never = healthy();
  never.backupRecords = {};
  t.regex(summarizeStatus(never, NAMES).problems.join('\n'), /no scheduled backup has succeeded yet/);

  const unreadable = healthy();
  unreadable.backupRecords = { error: 'permission denied' };
  const unread = summarizeStatus(unreadable, NAMES);
  t.true(unread.healthy);
  t.regex(unread.warnings.join('\n'), /the backup records could not be read \(permission denied\)/);
  t.is(summarizeStatus(healthy(), NAMES).backup, undefined);
});

test('status and restore drills: the last verified backup shown once a drill ran (or backups are scheduled), a failed last drill warned, a record no drill wrote named', (t) => {
  const drill = (finished: string, outcome: 'ok' | 'failed') =>
    JSON.stringify({
      object: 'lab-2026-11-22T09:30:00Z.dump',
      member: 'etcd-2',
      finished,
      outcome,
      revision: 99,
      keys: 7,
      findings: outcome === 'ok' ? ['restored: revision 99, 7 keys'] : ['restored: revision 99, 7 keys', 'HashKV differs'],
      by: 'the control node',
    });
  const verified = healthy();
  verified.drillRecords = { lastDrill: drill('2026-11-22T09:50:00Z', 'ok'), lastVerified: drill('2026-11-22T09:50:00Z', 'ok') };
  const report = summarizeStatus(verified, NAMES);
  t.true(report.healthy);
  t.true(
    formatStatusTable(report)
      .split('\n')
      .includes(
        'backup drill: lab-2026-11-22T09:30:00Z.dump restored and verified 10 min ago on etcd-2 by the control node (revision 99, 7 keys)',
      ),
  );

  const failed = healthy();
  failed.drillRecords = { lastDrill: drill('2026-11-22T09:55:00Z', 'failed'), lastVerified: drill('2026-11-22T09:00:00Z', 'ok') };
  t.deepEqual(summarizeStatus(failed, NAMES).warnings, [
    'the last restore drill (lab-2026-11-22T09:30:00Z.dump, on etcd-2, 5 min ago) failed: restored: revision 99, 7 keys; HashKV differs',
  ]);

  const scheduledNoDrill = healthy();
  scheduledNoDrill.backupRecords = { lastSuccess: backupRun('2026-11-22T09:30:00Z'), lastRun: backupRun('2026-11-22T09:30:00Z') };
  scheduledNoDrill.drillRecords = {};
  t.is(
    summarizeStatus(scheduledNoDrill, NAMES).drill,
    'backup drill: no backup verified by a restore drill yet (etcd-kvm backup --verify, or backup.verify on a schedule)',
  );

  const noneAtAll = healthy();
  noneAtAll.drillRecords = {};
  t.is(summarizeStatus(noneAtAll, NAMES).drill, undefined);

  const foreign = healthy();
  foreign.drillRecords = { lastDrill: '{"outcome":"ok"}' };
  t.deepEqual(summarizeStatus(foreign, NAMES).warnings, ['etcd-kvm/backup/last-drill is not a record a restore drill writes']);
});

test('status: no leader, fewer members answering than a quorum and the others without a VM: the quorum is lost, recover named', (t) => {
  const facts = healthy();
  for (const index of [1, 2]) {
    facts.members[index]!.vm = 'absent';
    facts.members[index]!.etcd = { error: 'connect ECONNREFUSED' };
  }
  (facts.members[0]!.etcd as EtcdMemberFacts).leader = '0';
  const report = summarizeStatus(facts, NAMES);
  t.false(report.healthy);
  t.regex(
    report.problems.join('\n'),
    /^no leader: the quorum is lost \(1 of 3 members answer; no VM for etcd-2, etcd-3\): .*etcd-kvm recover --dry-run/m,
  );
  // Their VMs still there (a power cut, etcd stopped): only "no leader", a deploy's to start.
  facts.members[1]!.vm = 'shut off';
  facts.members[2]!.vm = 'running';
  t.true(summarizeStatus(facts, NAMES).problems.includes('no leader'));
});
