import test from 'ava';
import { camelized } from '../../tasks/inventory/camel.ts';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { defragRuleHolds } from '../../tasks/etcd/maintenance.ts';

/**
 * The member agent's defragmentation decision (agent/etcd-kvm-agent.py `decide`), facts in and
 * action out, and its drift check of the managed files: run with the machine's python3.
 */

function agent<T>(command: string, argument: unknown): T {
  const done = spawnSync('python3', ['test/helpers/agent-harness.py', command, JSON.stringify(argument)], { encoding: 'utf8' });
  if (done.status !== 0) throw new Error(`agent-harness ${command}: ${done.stderr}`);
  return JSON.parse(done.stdout) as T;
}

const MiB = 1024 * 1024;
const QUOTA = 512 * MiB;
const RULE = { free_bytes: 1 * MiB, free_fraction: 0.25, quota_fraction: 0.8 };
const members = [
  { id: 1, name: 'etcd-1', learner: false },
  { id: 2, name: 'etcd-2', learner: false },
  { id: 3, name: 'etcd-3', learner: false },
];
/** Each member's database: [size, in use] in MiB; the leader is etcd-1 unless said. */
function view(
  me: number,
  sizes: Record<number, [number, number] | undefined>,
  extra: { leader?: number; alarms?: string[]; lockHolder?: string } = {},
) {
  const statuses = Object.fromEntries(
    Object.entries(sizes)
      .filter(([, size]) => size !== undefined)
      .map(([id, size]) => [id, { size: size![0] * MiB, in_use: size![1] * MiB, leader: extra.leader ?? 1 }]),
  );
  const alarms = (extra.alarms ?? []).map((alarm) => ({ member: 2, alarm }));
  return { me, members, statuses, alarms, ...(extra.lockHolder ? { lock_holder: extra.lockHolder } : {}) };
}
const decide = (v: ReturnType<typeof view>) => agent<[string, string]>('decide', { view: v, rule: RULE, quota: QUOTA, disarm_below: 0.9 });

const fragmented: [number, number] = [8, 2];
const compact: [number, number] = [2, 2];

const rows: [what: string, v: ReturnType<typeof view>, action: string, why: RegExp][] = [
  ['a follower the rule holds for, healthy cluster', view(2, { 1: compact, 2: fragmented, 3: compact }), 'defrag', /rule holds/],
  ['the rule does not hold: nothing', view(2, { 1: fragmented, 2: compact, 3: compact }), 'skip', /does not hold/],
  ['too little free in bytes', view(2, { 1: compact, 2: [2, 1.5], 3: compact }), 'skip', /does not hold/],
  [
    'the leader waits while a follower qualifies',
    view(1, { 1: fragmented, 2: fragmented, 3: compact }),
    'skip',
    /leader goes last: etcd-2/,
  ],
  ['the leader goes once no follower qualifies', view(1, { 1: fragmented, 2: compact, 3: compact }), 'defrag', /rule holds/],
  ['a member silent: nothing, unhealthy', view(2, { 1: compact, 2: fragmented, 3: undefined }), 'skip', /etcd-3 does not answer/],
  [
    'the one member silent holds the lock (it is defragmenting): wait for the lock, then look again',
    view(3, { 1: compact, 2: undefined, 3: fragmented }, { lockHolder: 'etcd-2' }),
    'await-lock',
    /etcd-2 is defragmenting/,
  ],
  [
    'a member silent while another holds the lock: nothing, unhealthy',
    view(3, { 1: compact, 2: undefined, 3: fragmented }, { lockHolder: 'etcd-1' }),
    'skip',
    /etcd-2 does not answer/,
  ],
  [
    'two members silent, one of them holding the lock: nothing, unhealthy',
    view(3, { 1: undefined, 2: undefined, 3: fragmented }, { leader: 3, lockHolder: 'etcd-2' }),
    'skip',
    /etcd-1, etcd-2 does not answer/,
  ],
  ['no leader: nothing', view(2, { 1: compact, 2: fragmented, 3: compact }, { leader: 0 }), 'skip', /no single leader/],
  ['near the quota with free pages', view(3, { 1: compact, 2: compact, 3: [420, 418] }), 'defrag', /rule holds/],
  ['near the quota, nothing free: nothing', view(3, { 1: compact, 2: compact, 3: [420, 420] }), 'skip', /does not hold/],
  [
    'NOSPACE, every database under 90 % of the quota: disarm',
    view(3, { 1: compact, 2: compact, 3: compact }, { alarms: ['NOSPACE'] }),
    'disarm',
    /under 90 %/,
  ],
  [
    'NOSPACE, over the quota: the first follower by name goes without a lock',
    view(2, { 1: [500, 100], 2: [500, 100], 3: [500, 100] }, { alarms: ['NOSPACE'] }),
    'defrag-turn',
    /turn/,
  ],
  [
    'NOSPACE, over the quota: the others wait their turn',
    view(3, { 1: [500, 100], 2: [500, 100], 3: [500, 100] }, { alarms: ['NOSPACE'] }),
    'skip',
    /etcd-2 goes first/,
  ],
  [
    'NOSPACE, the member whose turn it was silent (defragmenting): the next in line does not start beside it',
    view(3, { 1: [500, 100], 2: undefined, 3: [500, 100] }, { alarms: ['NOSPACE'] }),
    'skip',
    /NOSPACE alarm, and etcd-2 does not answer \(it may be defragmenting\): no turn until every member answers/,
  ],
  [
    'NOSPACE, each of two members missing the other: neither takes a turn',
    view(2, { 1: [500, 100], 2: [500, 100], 3: undefined }, { alarms: ['NOSPACE'] }),
    'skip',
    /etcd-3 does not answer/,
  ],
  [
    'NOSPACE, every database under 90 % but a member silent: no disarm yet',
    view(3, { 1: compact, 2: undefined, 3: compact }, { alarms: ['NOSPACE'] }),
    'skip',
    /etcd-2 does not answer/,
  ],
  [
    'NOSPACE with nothing to free',
    view(2, { 1: [500, 500], 2: [500, 500], 3: [500, 500] }, { alarms: ['NOSPACE'] }),
    'skip',
    /delete keys and compact/,
  ],
  ['CORRUPT: nothing at all', view(2, { 1: compact, 2: fragmented, 3: compact }, { alarms: ['CORRUPT'] }), 'skip', /CORRUPT/],
  ["this member's etcd silent", view(2, { 1: compact, 2: undefined, 3: compact }), 'skip', /does not answer/],
];

/**
 * maintenance.defrag.rule, one table for both runtimes that read it: the agents (rule_holds) on their schedule and
 * `maintain --defrag` (defragRuleHolds) on the control node. [size, in use] in MiB, the rule, and whether it holds.
 */
const ruleRows: [what: string, size: number, inUse: number, rule: typeof RULE, holds: boolean][] = [
  ['fragmented: bytes and share free', 8, 2, RULE, true],
  ['enough bytes free, too small a share', 40, 32, RULE, false],
  ['a large share free, too few bytes', 1.5, 0.75, RULE, false],
  ['exactly at free_bytes and free_fraction', 4, 3, RULE, true],
  ['near the quota with anything to free', 420, 419.5, RULE, true],
  ['near the quota with nothing to free', 420, 420, RULE, false],
  ['near the quota, quota_fraction 0: never on size alone', 420, 419.5, { ...RULE, quota_fraction: 0 }, false],
  ['free_fraction 0: bytes alone decide', 400, 398, { ...RULE, free_fraction: 0 }, true],
  ['an empty file', 0, 0, { ...RULE, free_bytes: 0, free_fraction: 0 }, false],
];
for (const [what, size, inUse, rule, holds] of ruleRows)
  test(`maintenance.defrag.rule, agent and maintain alike: ${what}`, (t) => {
    const facts = { dbSize: size * MiB, dbSizeInUse: inUse * MiB };
    t.is(agent<boolean>('rule-holds', { size: facts.dbSize, in_use: facts.dbSizeInUse, rule, quota: QUOTA }), holds, 'the agent');
    t.is(defragRuleHolds(facts, camelized(rule), QUOTA) !== undefined, holds, 'maintain --defrag');
  });

for (const [what, v, action, why] of rows)
  test(`defrag decision: ${what}`, (t) => {
    const [got, reason] = decide(v);
    t.is(got, action, reason);
    t.regex(reason, why);
  });

test('drift: a file whose mode, owner or content differs from the manifest counts; a missing one too; a right one not', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-drift-'));
  const owner = `${userInfo().username}:${spawnSync('id', ['-gn'], { encoding: 'utf8' }).stdout.trim()}`;
  const file = (name: string, content: string, mode: number) => {
    writeFileSync(join(dir, name), content);
    chmodSync(join(dir, name), mode);
    return join(dir, name);
  };
  const sha = (content: string) => createHash('sha256').update(content).digest('hex');
  const manifest = [
    { path: file('right', 'a\n', 0o644), mode: '0644', owner, sha256: sha('a\n') },
    { path: file('edited', 'b edited\n', 0o644), mode: '0644', owner, sha256: sha('b\n') },
    { path: file('mode', 'c\n', 0o644), mode: '0600', owner },
    { path: file('owner', 'd\n', 0o644), mode: '0644', owner: 'nobody:nogroup', sha256: sha('d\n') },
    { path: join(dir, 'gone'), mode: '0644', owner },
    { path: file('secret', 'e\n', 0o400), mode: '0400', owner },
  ];
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify(manifest));
  t.deepEqual(agent('drift', { manifest: join(dir, 'manifest.json') }), [6, 4]);
  t.is(agent('drift', { manifest: join(dir, 'absent.json') }), null);
});

/** The JSON of `etcdctl endpoint status` for one member: etcd lists the cluster's alarms among each member's errors. */
const statusOf = (id: number, url: string, size: number, errors: string[] = []) => ({
  Endpoint: url,
  Status: { header: { member_id: id }, dbSize: size * MiB, dbSizeInUse: size * MiB, leader: 1, errors },
});
/** As etcd 3.4 words it (seen on the lab): "memberID:<id, decimal> alarm:<kind> ". */
const CORRUPT_ON_2 = ['memberID:2 alarm:CORRUPT '];

test('a defrag tick with nothing to do asks etcd once for each fact, and its metrics reuse them', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-tick-'));
  const endpoint = 'https://192.168.150.12:2379';
  const answers = {
    'member list': { members: members.map((m) => ({ ID: m.id, name: m.name })) },
    'endpoint status -w': [statusOf(2, endpoint, 2, CORRUPT_ON_2)],
    'endpoint status --cluster': [
      statusOf(1, 'https://192.168.150.11:2379', 2, CORRUPT_ON_2),
      statusOf(2, endpoint, 2, CORRUPT_ON_2),
      statusOf(3, 'https://192.168.150.13:2379', 2, CORRUPT_ON_2),
    ],
  };
  const config = {
    member: 'etcd-2',
    backup_enabled: false,
    work_dir: dir,
    etcd: { endpoint },
    defrag: { enabled: true, rule: RULE, quota_bytes: QUOTA, disarm_below_fraction: 0.9 },
    metrics: { staging: join(dir, 'agent.prom'), manifest: join(dir, 'absent.json') },
  };
  const tick = agent<{ code: number; calls: string[][]; metrics: string; said: string }>('defrag-tick', { config, answers });
  t.is(tick.code, 0);
  // An alarm raised: the cluster's view decides. The alarms come from the statuses' errors, never `alarm list`,
  // which etcd puts through raft (an entry in every member's log).
  t.deepEqual(
    tick.calls.map((args) => args.slice(0, 3).join(' ')),
    ['endpoint status -w', 'member list -w', 'endpoint status --cluster'],
  );
  t.is(tick.said, 'nothing done: alarm CORRUPT active: no maintenance until an operator has looked\n');
  t.regex(tick.metrics, /^etcd_kvm_alarm_active\{alarm="CORRUPT"\} 1$/m);
  t.regex(tick.metrics, /^etcd_kvm_alarm_active\{alarm="NOSPACE"\} 0$/m);

  // No alarm, and the rule does not hold here: this member's own status alone, whatever the others' say.
  const quiet = agent<{ code: number; calls: string[][]; metrics: string; said: string }>('defrag-tick', {
    config,
    answers: { 'endpoint status -w': [statusOf(2, endpoint, 2)] },
  });
  t.is(quiet.code, 0);
  t.deepEqual(
    quiet.calls.map((args) => args.join(' ')),
    ['endpoint status -w json'],
  );
  t.is(quiet.said, `nothing done: the rule does not hold here (size ${2 * MiB}, in use ${2 * MiB})\n`);
  t.regex(quiet.metrics, /^etcd_kvm_alarm_active\{alarm="CORRUPT"\} 0$/m);
});

test("the metrics task reads this member's alarms from its own status, in one call: another member's alarm is not its own", (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-metrics-'));
  const endpoint = 'https://192.168.150.11:2379';
  const config = {
    member: 'etcd-1',
    backup_enabled: false,
    work_dir: dir,
    etcd: { endpoint },
    metrics: { staging: join(dir, 'agent.prom'), manifest: join(dir, 'absent.json') },
  };
  const ran = (errors: string[]) =>
    agent<{ code: number; calls: string[][]; metrics: string }>('metrics-tick', {
      config,
      answers: { 'endpoint status': [statusOf(1, endpoint, 2, errors)] },
    });
  const elsewhere = ran(['memberID:2 alarm:NOSPACE ']);
  t.is(elsewhere.code, 0);
  t.deepEqual(
    elsewhere.calls.map((args) => args.slice(0, 2).join(' ')),
    ['endpoint status'],
  );
  t.regex(elsewhere.metrics, /^etcd_kvm_alarm_active\{alarm="NOSPACE"\} 0$/m);
  const here = ran(['memberID:2 alarm:NOSPACE ', 'memberID:1 alarm:NOSPACE ']);
  t.regex(here.metrics, /^etcd_kvm_alarm_active\{alarm="NOSPACE"\} 1$/m);
  t.regex(here.metrics, /^etcd_kvm_alarm_active\{alarm="CORRUPT"\} 0$/m);
});

test("a defrag tick that qualifies while a run of the tool holds the cluster's run lock: nothing defragmented, the holder named", (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-tick-'));
  const endpoint = 'https://192.168.150.12:2379';
  const fragmented = (id: number, url: string) => ({
    Endpoint: url,
    Status: { header: { member_id: id }, dbSize: 8 * MiB, dbSizeInUse: 2 * MiB, leader: 1, errors: [] },
  });
  const holder = '{"host":"operator-a","pid":4242,"since":"2026-11-28T09:00:00Z","command":"deploy"}';
  const answers = {
    'member list': { members: members.map((m) => ({ ID: m.id, name: m.name })) },
    'endpoint status -w': [fragmented(2, endpoint)],
    'endpoint status --cluster': [
      statusOf(1, 'https://192.168.150.11:2379', 2),
      fragmented(2, endpoint),
      statusOf(3, 'https://192.168.150.13:2379', 2),
    ],
    'lease grant': { ID: 7 },
    // The lock's transaction failed, and read the run lock's key (etcdctl's JSON, as etcd 3.4 and 3.5 print it).
    'txn -w': { responses: [{ Response: { ResponseRange: { kvs: [{ key: 'eA==', value: Buffer.from(holder).toString('base64') }] } } }] },
    'lease revoke': {},
  };
  const config = {
    member: 'etcd-2',
    backup_enabled: false,
    work_dir: dir,
    etcd: { endpoint },
    run_lock_key: 'etcd-kvm/run-lock/lab',
    defrag: { enabled: true, rule: RULE, quota_bytes: QUOTA, disarm_below_fraction: 0.9, lock_key: 'etcd-kvm/defrag/lock' },
    metrics: { staging: join(dir, 'agent.prom'), manifest: join(dir, 'absent.json') },
  };
  const tick = agent<{ code: number; calls: string[][]; said: string }>('defrag-tick', { config, answers });
  t.is(tick.code, 0);
  t.deepEqual(
    tick.calls.map((args) => args.slice(0, 2).join(' ')),
    ['endpoint status', 'member list', 'endpoint status', 'lease grant', 'txn -w', 'lease revoke', 'endpoint status'],
    'no defrag, no move-leader; the lease given back',
  );
  t.is(
    tick.said,
    `nothing done: a run of etcd-kvm holds the cluster's run lock (etcd-kvm/run-lock/lab: ${holder}); the next tick looks again\n`,
  );
});

test('a defrag tick that finds the one member not answering holding the lock waits for the lock, looks again under it, defragments, and records it though the first put times out', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-tick-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const endpoint = 'https://192.168.150.13:2379';
  const fragmented3 = {
    Endpoint: endpoint,
    Status: { header: { member_id: 3 }, dbSize: 8 * MiB, dbSizeInUse: 2 * MiB, leader: 1, errors: [] },
  };
  const etcd1 = statusOf(1, 'https://192.168.150.11:2379', 2);
  const answers = {
    'member list': { members: members.map((m) => ({ ID: m.id, name: m.name })) },
    // First etcd-2 is silent (defragmenting); under the lock it answers again, its database compact.
    'endpoint status --cluster': {
      in_turn: [
        [etcd1, fragmented3],
        [etcd1, statusOf(2, 'https://192.168.150.12:2379', 2), fragmented3],
      ],
    },
    // Its own: fragmented at the tick, compact after its defragmentation.
    'endpoint status -w': { in_turn: [[fragmented3], [statusOf(3, endpoint, 2)]] },
    'get --consistency=s': 'etcd-2\n',
    'lease grant': { ID: 7 },
    'txn -w': { succeeded: true },
    defrag: {},
    // The record's first put times out (etcd catching up after its defragmentation): it is tried again.
    put: { in_turn: [null, {}] },
    'lease revoke': {},
  };
  const config = {
    member: 'etcd-3',
    backup_enabled: false,
    work_dir: dir,
    // The lock's keep-alive is a process of its own: one that exits at once stands in for it.
    etcd: { endpoint, etcdctl: '/bin/true', ca_file: 'ca.pem', cert_file: 'agent.pem', key_file: 'agent-key.pem' },
    run_lock_key: 'etcd-kvm/run-lock/lab',
    defrag: { enabled: true, rule: RULE, quota_bytes: QUOTA, disarm_below_fraction: 0.9, lock_key: 'etcd-kvm/defrag/lock' },
    metrics: { staging: join(dir, 'agent.prom'), manifest: join(dir, 'absent.json') },
  };
  const tick = agent<{ code: number; calls: string[][]; said: string }>('defrag-tick', { config, answers });
  t.is(tick.code, 0, tick.said);
  t.deepEqual(
    tick.calls.map((args) => args.slice(0, 2).join(' ')),
    [
      'endpoint status',
      'member list',
      'endpoint status',
      'get --consistency=s',
      'lease grant',
      'txn -w',
      'member list',
      'endpoint status',
      'defrag',
      'endpoint status',
      'put etcd-kvm/defrag/last/etcd-3',
      'put etcd-kvm/defrag/last/etcd-3',
      'lease revoke',
      'endpoint status',
    ],
  );
  t.regex(
    tick.said,
    /^etcd-2 is defragmenting \(it holds the lock\): this member waits for it and looks again\nthe rule holds .*\ndefragmented: /,
  );
});

test("the metrics task reports the cluster's restore drills from their records in etcd: the last one failed, when one last verified, and the scheduled drills' period and start", (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-metrics-'));
  const endpoint = 'https://192.168.150.11:2379';
  // The drills' timer, written when they were scheduled: the unverified alert counts from it until a drill verifies.
  const timer = join(dir, 'etcd-kvm-verify.timer');
  writeFileSync(timer, '[Timer]\n');
  const scheduled = Date.parse('2026-11-28T12:00:00Z') / 1000;
  utimesSync(timer, scheduled, scheduled);
  const config = {
    member: 'etcd-1',
    backup_enabled: true,
    schedule: 'hourly',
    work_dir: dir,
    etcd: { endpoint },
    metrics: { staging: join(dir, 'agent.prom'), manifest: join(dir, 'absent.json') },
    verify: { enabled: true, schedule: 'daily', timer },
  };
  const kv = (key: string, value: unknown) => ({
    key: Buffer.from(`etcd-kvm/backup/${key}`).toString('base64'),
    value: Buffer.from(JSON.stringify(value)).toString('base64'),
  });
  const ran = (records: ReturnType<typeof kv>[]) =>
    agent<{ code: number; metrics: string }>('metrics-tick', {
      config,
      answers: { 'endpoint status': [statusOf(1, endpoint, 2)], 'get etcd-kvm/backup/last-': { kvs: records } },
    }).metrics;
  const success = kv('last-success', { finished: '2026-11-29T04:00:00+00:00', outcome: 'ok', period_seconds: 3600 });
  const verified = { finished: '2026-11-29T04:30:00+00:00', outcome: 'ok' };
  const failing = ran([
    success,
    kv('last-verified', verified),
    kv('last-drill', { finished: '2026-11-29T05:00:00+00:00', outcome: 'failed', period_seconds: 7200 }),
  ]);
  t.regex(failing, /^etcd_kvm_backup_last_drill_failed 1$/m);
  // The period the last scheduled drill recorded; without one (a drill of the control node's, or none), systemd's calendar says.
  t.regex(failing, /^etcd_kvm_backup_verify_period_seconds 7200$/m);
  t.regex(failing, new RegExp(`^etcd_kvm_backup_verify_scheduled_since_timestamp_seconds ${scheduled}$`, 'm'));
  t.regex(failing, new RegExp(`^etcd_kvm_backup_last_verified_timestamp_seconds ${Date.parse('2026-11-29T04:30:00Z') / 1000}$`, 'm'));
  const passing = ran([success, kv('last-verified', verified), kv('last-drill', verified)]);
  t.regex(passing, /^etcd_kvm_backup_last_drill_failed 0$/m);
  const never = ran([success]);
  t.regex(never, /^etcd_kvm_backup_last_drill_failed 0$/m);
  t.regex(never, /^etcd_kvm_backup_last_verified_timestamp_seconds 0$/m);
  t.regex(never, /^etcd_kvm_backup_verify_period_seconds 86400$/m);
  const off = agent<{ code: number; metrics: string }>('metrics-tick', {
    config: { ...config, verify: { ...config.verify, enabled: false } },
    answers: { 'endpoint status': [statusOf(1, endpoint, 2)], 'get etcd-kvm/backup/last-': { kvs: [success] } },
  }).metrics;
  t.regex(off, /^etcd_kvm_backup_verify_period_seconds 0$/m);
  t.regex(off, /^etcd_kvm_backup_verify_scheduled_since_timestamp_seconds 0$/m);
});
