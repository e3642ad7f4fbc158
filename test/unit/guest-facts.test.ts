import test from 'ava';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  agentProbeCommand,
  CLOUD_INIT_RESULT,
  guestProbeScript,
  MARK,
  parseAgentProbe,
  processesOf,
  parseCloudInit,
  parseGuestProbe,
  parseStat,
  parseUnitState,
  ProbeOutputError,
  unitsFromFiles,
  unitStateScript,
  waitForCloudInit,
  type GuestQuestions,
} from '../../tasks/guest/facts.ts';

/** The guest probe's parser, on an answer recorded from a lab member, and the script run by the real sh. */

const recorded = readFileSync('test/fixtures/guest-probe-lab-etcd-1.txt', 'utf8');
const questions = JSON.parse(readFileSync('test/fixtures/guest-probe-lab-etcd-1.questions.json', 'utf8')) as GuestQuestions;

test('a recorded lab answer: every file with digest, mode, owner and time; units; etcd environment; data; cloud-init done', (t) => {
  const { facts, units } = parseGuestProbe(recorded, questions);
  t.deepEqual([...facts.files.keys()].sort(), [...questions.paths].sort());
  const key = facts.files.get('/etc/etcd/tls/server.key')!;
  t.is(key.mode, 0o400);
  t.is(key.owner, 'etcd:etcd');
  t.regex(key.digest, /^[0-9a-f]{64}$/);
  t.true(key.mtime > 1_700_000_000);
  t.is(facts.files.get('/etc/etcd/etcd.env')!.mode, 0o644);
  // Every unit runs, is enabled, and no unit file changed since systemd's last reload: the files settle it.
  t.deepEqual(units?.get('etcd.service'), {
    loaded: true,
    enabled: 'enabled',
    active: 'active',
    sub: 'running',
    startedAt: 1795525978,
    needsDaemonReload: false,
  });
  t.deepEqual([...units!.keys()].sort(), [...questions.units].sort());
  const environment = facts.environments.get('etcd.service')!;
  t.is(environment.get('ETCD_NAME'), 'etcd-1');
  t.is(environment.get('ETCD_QUOTA_BACKEND_BYTES'), '536870912');
  t.is(
    environment.get('ETCD_INITIAL_CLUSTER'),
    'etcd-1=https://192.168.150.11:2380,etcd-2=https://192.168.150.12:2380,etcd-3=https://192.168.150.13:2380',
  );
  t.true(facts.dataDirInitialized);
  t.deepEqual(facts.cloudInit, { state: 'done' });
});

test('an answer cut short is an error, never facts about a member with nothing', (t) => {
  t.throws(() => parseGuestProbe(recorded.slice(0, recorded.indexOf('@@etcd-kvm@@ end')), questions), { instanceOf: ProbeOutputError });
  t.throws(() => parseUnitState('@@etcd-kvm@@ systemd\nId=etcd.service\n'), { instanceOf: ProbeOutputError });
});

test("systemd's own answer, recorded from a lab member, when the files do not settle the units", (t) => {
  const units = parseUnitState(readFileSync('test/fixtures/guest-units-lab-etcd-2.txt', 'utf8'));
  t.deepEqual(units.get('etcd.service'), {
    loaded: true,
    enabled: 'enabled',
    active: 'active',
    sub: 'running',
    startedAt: 1795431333,
    needsDaemonReload: false,
  });
  t.deepEqual([...units.keys()], ['etcd.service', 'prometheus-node-exporter.service', 'chrony.service']);
  t.regex(unitStateScript(['etcd.service']), /^systemctl show .* -- etcd\.service 2>\/dev\/null$/m);
});

/** What the files say, as stat and the units' processes tell it; each row changes one thing from a member where all is well. */
const RELOADED = '/run/systemd/generator';
const UNIT_FILE = '/etc/systemd/system/etcd.service';
const LINK = 0o120777;
const FILE = 0o100644;
const wants = (unit: string) => `/etc/systemd/system/multi-user.target.wants/${unit}`;
const settled: { processes: Record<string, string>; stats: Record<string, [mode: number, mtime: number]> } = {
  processes: { 'etcd.service': '543', 'chrony.service': '540' },
  stats: {
    [RELOADED]: [0o40755, 1000.5],
    [UNIT_FILE]: [FILE, 900.25],
    [wants('etcd.service')]: [LINK, 800],
    [wants('chrony.service')]: [LINK, 800],
    '/run/systemd/units/invocation:etcd.service': [LINK, 1001.9],
    '/run/systemd/units/invocation:chrony.service': [LINK, 999.1],
  },
};
const unitQuestions: GuestQuestions = {
  paths: [UNIT_FILE, '/etc/etcd/etcd.env'],
  units: ['etcd.service', 'chrony.service'],
  environmentUnits: [],
  dataDir: '/var/lib/etcd',
};
type Change = { processes?: Record<string, string>; stats?: Record<string, [number, number] | undefined> };
const rows: [string, Change, 'settled' | 'ask systemd'][] = [
  ['all run, enabled, no unit file newer than the reload', {}, 'settled'],
  ['a unit has no process (stopped, failed, waiting to restart)', { processes: { 'chrony.service': '540' } }, 'ask systemd'],
  ['a unit is not enabled (no link in multi-user.target.wants)', { stats: { [wants('etcd.service')]: undefined } }, 'ask systemd'],
  ['a unit is masked (a link in its place under /etc)', { stats: { '/etc/systemd/system/chrony.service': [LINK, 700] } }, 'ask systemd'],
  [
    'a unit file written after the last reload (a run killed before its daemon-reload)',
    { stats: { [UNIT_FILE]: [FILE, 1000.7] } },
    'ask systemd',
  ],
  ['a unit file written in the very nanosecond of the reload', { stats: { [UNIT_FILE]: [FILE, 1000.5] } }, 'ask systemd'],
  ['no record of the last reload', { stats: { [RELOADED]: undefined } }, 'ask systemd'],
  ['no invocation time', { stats: { '/run/systemd/units/invocation:chrony.service': undefined } }, 'ask systemd'],
  ['a file that is not a unit file changed after the reload', { stats: { '/etc/etcd/etcd.env': [FILE, 2000] } }, 'settled'],
];
for (const [name, change, expected] of rows) {
  test(`units from files: ${name} → ${expected}`, (t) => {
    const stats = new Map(
      Object.entries({ ...settled.stats, ...change.stats }).flatMap(([path, entry]) =>
        entry === undefined
          ? []
          : [[path, { mode: entry[0], owner: 'root:root', mtime: entry[1], identity: '', changedAtNs: 0n }] as const],
      ),
    );
    const units = unitsFromFiles(new Map(Object.entries(change.processes ?? settled.processes)), stats, unitQuestions);
    t.is(units === undefined ? 'ask systemd' : 'settled', expected);
    if (expected === 'settled')
      t.deepEqual(units?.get('etcd.service'), {
        loaded: true,
        enabled: 'enabled',
        active: 'active',
        sub: 'running',
        startedAt: 1001,
        needsDaemonReload: false,
      });
  });
}

test('stat as the probe asks it: type and permissions from the raw mode, owner, times to the nanosecond, and the identity that tells a content unchanged', (t) => {
  const stats = parseStat(
    '8100 etcd:etcd 1795525956.463460122 1795525956.467460122 18876 1679 /etc/etcd/tls/server.key\n' +
      'a1ff root:root 1795525981.527379966 1795525981.527379966 961 36 /run/a link with spaces\n',
  );
  t.deepEqual(stats.get('/etc/etcd/tls/server.key'), {
    mode: 0o100400,
    owner: 'etcd:etcd',
    mtime: Number('1795525956.463460122'),
    identity: '18876 1679 1795525956.463460122 1795525956.467460122',
    changedAtNs: 1795525956467460122n,
  });
  t.is(stats.get('/run/a link with spaces')!.mode & 0o170000, 0o120000);
});

test('cloud-init: running without result.json, done, or error naming the failed modules', (t) => {
  t.deepEqual(parseCloudInit('', '{"v1": {"stage": "modules-final"}}'), { state: 'running' });
  t.deepEqual(parseCloudInit('{"v1": {"errors": []}}', '{"v1": {"init": {"errors": []}}}'), { state: 'done' });
  const failed = parseCloudInit(
    '{"v1": {"datasource": "x", "errors": ["(\'locale\', ProcessExecutionError(\'Unexpected error while running command.\'))"]}}',
    '{"v1": {"modules-config": {"errors": ["(\'locale\', ProcessExecutionError(\'...\'))"]}, "modules-final": {"errors": ["(\'scripts_user\', RuntimeError(\'runparts\'))"]}}}',
  );
  t.deepEqual(failed, { state: 'error', modules: ['locale', 'scripts_user'] });
});

test('the probe script, run by the real sh on this machine, reports absent files and directories as absent', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-probe-'));
  writeFileSync(join(dir, 'a file'), 'hello\n', { mode: 0o640 });
  const local: GuestQuestions = {
    paths: [join(dir, 'a file'), join(dir, 'missing'), join(dir, "it's")],
    units: ['etcd-kvm-no-such.service'],
    environmentUnits: [],
    dataDir: dir,
  };
  const result = spawnSync('sh', ['-s'], { input: guestProbeScript(local), encoding: 'utf8' });
  t.is(result.status, 0, result.stderr);
  const { facts, units } = parseGuestProbe(result.stdout, local);
  t.deepEqual([...facts.files.keys()], [join(dir, 'a file')]);
  // A unit this machine does not run is left for systemd to tell.
  t.is(units, undefined);
  t.like(facts.files.get(join(dir, 'a file')), { mode: 0o640, digest: '5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03' });
  t.false(facts.dataDirInitialized);
  t.deepEqual(facts.cloudInit, { state: 'running' });
});

test("packages' files, stat'ed by the probe run by the real sh: those absent name the packages not installed", (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-probe-packages-'));
  writeFileSync(join(dir, 'auth.py'), '# botocore\n');
  mkdirSync(join(dir, 'nacl'));
  const asked: GuestQuestions = {
    paths: [],
    units: [],
    environmentUnits: [],
    dataDir: dir,
    // A directory where a package's file should be is no installed package either.
    packageFiles: [join(dir, 'auth.py'), join(dir, 'missing.py'), join(dir, 'nacl')],
  };
  const result = spawnSync('sh', ['-s'], { input: guestProbeScript(asked), encoding: 'utf8' });
  t.is(result.status, 0, result.stderr);
  t.deepEqual([...parseGuestProbe(result.stdout, asked).facts.packageFilesMissing], [join(dir, 'missing.py'), join(dir, 'nacl')]);
  rmSync(dir, { recursive: true });
});

test("the agent's probe, run by the real sh and stat on this machine: cloud-init's result whole, each unit's first process, stat's entries; a missing path still answers", (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-agent-probe-'));
  const local = (name: string) => join(dir, name);
  const resultJson = '{\n  "v1": {\n    "errors": [],\n    "datasource": "a \\\\ b"\n  }\n}';
  writeFileSync(local('result.json'), resultJson);
  writeFileSync(local('etcd.procs'), '543\n601\n');
  mkdirSync(local('member'), { mode: 0o700 });
  writeFileSync(local("it's a file"), 'hello\n', { mode: 0o640 });
  // Keys as the probe prints them: byte for byte, with or without a last newline, a backslash, a blank line.
  const keys = { ended: '-----BEGIN KEY-----\nab\\cd\n\n  x \n-----END KEY-----\n', unended: 'line one\nno newline at the end' };
  writeFileSync(local('ended.key'), keys.ended, { mode: 0o600 });
  writeFileSync(local('unended.key'), keys.unended, { mode: 0o600 });
  writeFileSync(local('empty.key'), '', { mode: 0o600 });
  const asked: GuestQuestions = {
    paths: [local("it's a file"), local('missing'), local('ended.key'), local('unended.key'), local('empty.key')],
    secrets: [local('ended.key'), local('unended.key'), local('empty.key'), local('missing')],
    units: ['etcd.service', 'chrony.service'],
    environmentUnits: ['etcd.service'],
    dataDir: dir,
  };
  // The guest's own paths, here on this machine: cloud-init's result, and etcd's processes (chrony's are not there).
  const here = new Map([
    [CLOUD_INIT_RESULT, local('result.json')],
    [processesOf('etcd.service'), local('etcd.procs')],
    [processesOf('chrony.service'), local('chrony.procs')],
  ]);
  const { path, args } = agentProbeCommand(asked);
  const result = spawnSync(
    path,
    args.map((arg) => here.get(arg) ?? arg),
    { encoding: 'utf8' },
  );
  t.is(result.status, 1, 'stat exits 1 for the missing path');
  const look = parseAgentProbe(result.stdout);
  t.is(look.cloudInitResult, resultJson);
  t.deepEqual([...look.processes], [['etcd.service', '543']]);
  t.like(look.stats.get(local("it's a file")), { mode: 0o100640 });
  t.false(look.stats.has(local('missing')));
  t.like(look.stats.get(local('member')), { mode: 0o40700 });
  t.is(look.texts.get(local('ended.key')), keys.ended);
  t.is(look.texts.get(local('unended.key')), keys.unended);
  t.is(look.texts.get(local('empty.key')), '');
  t.is(look.texts.get(local('missing')), '', 'a missing secret prints nothing (stat says it is not there)');
  rmSync(dir, { recursive: true });
});

test("the agent's probe, run by the real sh: a secret there that its shell cannot open is an error, not an empty file", (t) => {
  // Run as nobody, a root-only key is there (stat sees it) but cannot be opened: as a file gone between the two would be.
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-agent-probe-'));
  chmodSync(dir, 0o755);
  const key = join(dir, 'server.key');
  writeFileSync(key, 'PRIVATE KEY\n', { mode: 0o600 });
  const asked: GuestQuestions = { paths: [key], secrets: [key], units: [], environmentUnits: [], dataDir: dir };
  const { path, args } = agentProbeCommand(asked);
  const result = spawnSync(path, args, { encoding: 'utf8', uid: 65534, gid: 65534 });
  t.throws(() => parseAgentProbe(result.stdout), { message: `the guest probe could not read ${key}` });
  rmSync(dir, { recursive: true });
});

test("the agent's probe without its stat's section, or with a file its shell could not open, is an error, never facts about nothing", (t) => {
  t.throws(() => parseAgentProbe(`${MARK} cloud-init-result\n${MARK} units\n`), { instanceOf: ProbeOutputError });
  const unreadable = (section: string) => `${MARK} ${section}\n${MARK}-unreadable\n${MARK} units\n${MARK} stat\n`;
  t.throws(() => parseAgentProbe(unreadable('cloud-init-result')), { message: /could not read \/run\/cloud-init\/result\.json/ });
  t.throws(() => parseAgentProbe(unreadable('text /etc/etcd/tls/server.key')), { message: /could not read \/etc\/etcd\/tls\/server\.key/ });
});

test("the first boot's wait, run by the real sh: returns at once when cloud-init has finished or never ran, waits while it runs", (t) => {
  const script = waitForCloudInit();
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-wait-'));
  // The same script with the paths moved into a directory of this test.
  const local = script.replaceAll('/run/cloud-init/', `${dir}/`);
  t.is(spawnSync('sh', ['-c', local], { timeout: 5_000 }).status, 0, 'never ran: no status file');
  writeFileSync(join(dir, 'status.json'), '{}');
  writeFileSync(join(dir, 'result.json'), '{}');
  t.is(spawnSync('sh', ['-c', local], { timeout: 5_000 }).status, 0, 'finished');
  rmSync(join(dir, 'result.json'));
  const running = spawnSync('sh', ['-c', local], { timeout: 1_000 });
  t.is(running.signal, 'SIGTERM', 'still waiting after 1 s while cloud-init runs');
});
