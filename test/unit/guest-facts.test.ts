import test from 'ava';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { guestProbeScript, parseCloudInit, parseGuestProbe, ProbeOutputError, type GuestQuestions } from '../../tasks/guest/facts.ts';

/** The guest probe's parser, on an answer recorded from a lab member, and the script run by the real sh. */

const recorded = readFileSync('test/fixtures/guest-probe-lab-etcd-1.txt', 'utf8');
const questions = JSON.parse(readFileSync('test/fixtures/guest-probe-lab-etcd-1.questions.json', 'utf8')) as GuestQuestions;

test('a recorded lab answer: every file with digest, mode, owner and time; units; etcd environment; data; cloud-init done', (t) => {
  const facts = parseGuestProbe(recorded, questions);
  t.deepEqual([...facts.files.keys()].sort(), [...questions.paths].sort());
  const key = facts.files.get('/etc/etcd/tls/server.key')!;
  t.is(key.mode, 0o400);
  t.is(key.owner, 'etcd:etcd');
  t.regex(key.digest, /^[0-9a-f]{64}$/);
  t.true(key.mtime > 1_700_000_000);
  t.is(facts.files.get('/etc/etcd/etcd.env')!.mode, 0o644);
  const etcd = facts.units.get('etcd.service')!;
  t.like(etcd, { loaded: true, enabled: 'enabled', active: 'active', sub: 'running', needsDaemonReload: false });
  t.true(etcd.startedAt! > 1_700_000_000);
  t.deepEqual([...facts.units.keys()].sort(), [...questions.units].sort());
  const environment = facts.environments.get('etcd.service')!;
  t.is(environment.get('ETCD_NAME'), 'etcd-1');
  t.is(environment.get('ETCD_QUOTA_BACKEND_BYTES'), '536870912');
  t.is(environment.get('ETCD_INITIAL_CLUSTER'), 'etcd-1=https://192.168.150.11:2380,etcd-2=https://192.168.150.12:2380,etcd-3=https://192.168.150.13:2380');
  t.true(facts.dataDirInitialized);
  t.deepEqual(facts.cloudInit, { state: 'done' });
});

test('an answer cut short is an error, never facts about a member with nothing', (t) => {
  t.throws(() => parseGuestProbe(recorded.slice(0, recorded.indexOf('@@etcd-kvm@@ end')), questions), { instanceOf: ProbeOutputError });
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
  const local: GuestQuestions = { paths: [join(dir, 'a file'), join(dir, 'missing'), join(dir, "it's")], units: [], environmentUnits: [], dataDir: dir };
  const result = spawnSync('sh', ['-s'], { input: guestProbeScript(local), encoding: 'utf8' });
  t.is(result.status, 0, result.stderr);
  const facts = parseGuestProbe(result.stdout, local);
  t.deepEqual([...facts.files.keys()], [join(dir, 'a file')]);
  t.like(facts.files.get(join(dir, 'a file')), { mode: 0o640, digest: '5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03' });
  t.false(facts.dataDirInitialized);
  t.deepEqual(facts.cloudInit, { state: 'running' });
});
