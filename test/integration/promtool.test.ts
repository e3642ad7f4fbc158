import test from 'ava';
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parse } from 'yaml';
import { ALERTS } from '../../tasks/monitoring/rules.ts';
import { FILES } from '../../tasks/monitoring/scrape.ts';
import { run } from '../helpers/exec.ts';
import { baseDocument, writeInventory } from '../helpers/inventory.ts';

/**
 * The generated Prometheus files against Prometheus's own checker: `etcd-kvm monitoring` writes them for the
 * fixture inventory, `promtool check` accepts them, and `promtool test rules` runs
 * test/prometheus/etcd-kvm-rules.test.yml, which fires and spares every alert. promtool is Debian's
 * `prometheus` package (scripts/system/packages.ts).
 */

const BIN = resolve('bin/etcd-kvm.mjs');
const FIXTURE = resolve('test/fixtures/monitoring-inventory.yaml');
const RULE_TESTS = resolve('test/prometheus/etcd-kvm-rules.test.yml');

function etcdKvm(args: string[]): { status: number; stdout: string; stderr: string } {
  const result = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', timeout: 60_000 });
  if (result.error) throw result.error;
  return { status: result.status ?? -1, stdout: result.stdout, stderr: result.stderr };
}

/** The fixture's files, written by the command into a directory of their own. */
function generate(): string {
  const out = mkdtempSync(join(tmpdir(), 'etcd-kvm-prometheus-'));
  const result = etcdKvm(['monitoring', '-i', FIXTURE, '--out', out]);
  if (result.status !== 0) throw new Error(`etcd-kvm monitoring failed: ${result.stderr}`);
  return out;
}

const promtool = (args: string[], cwd: string) => run('sh', ['-c', 'cd "$1" && shift && exec promtool "$@"', 'sh', cwd, ...args]);

test('promtool check rules accepts the generated rules', (t) => {
  const out = generate();
  const result = promtool(['check', 'rules', FILES.rules], out);
  t.is(result.status, 0, `${result.stdout}${result.stderr}`);
  t.regex(result.stdout, new RegExp(`SUCCESS: ${ALERTS.length} rules found`));
});

test('promtool test rules: every alert fires where it should and nowhere else', (t) => {
  const out = generate();
  // The test file names the rules file by a relative path: beside it.
  copyFileSync(RULE_TESTS, join(out, 'etcd-kvm-rules.test.yml'));
  const result = promtool(['test', 'rules', 'etcd-kvm-rules.test.yml'], out);
  t.is(result.status, 0, `${result.stdout}${result.stderr}`);
  t.regex(result.stdout, /SUCCESS/);
});

interface RuleTests {
  rule_files: string[];
  tests: { name: string; alert_rule_test?: { alertname: string; exp_alerts?: unknown[] | null }[] }[];
}

test('the promtool tests cover every alert rules.ts defines: a case that fires it and one that must not', (t) => {
  const file = parse(readFileSync(RULE_TESTS, 'utf8')) as RuleTests;
  t.deepEqual(file.rule_files, [FILES.rules]);
  const cases = file.tests.flatMap((group) => group.alert_rule_test ?? []);
  for (const { name } of ALERTS) {
    const mine = cases.filter((candidate) => candidate.alertname === name);
    t.true(
      mine.some((candidate) => (candidate.exp_alerts ?? []).length > 0),
      `${name}: no case in ${RULE_TESTS} expects it to fire`,
    );
    t.true(
      mine.some((candidate) => (candidate.exp_alerts ?? []).length === 0),
      `${name}: no case in ${RULE_TESTS} expects it not to fire (exp_alerts: [])`,
    );
  }
  // No case for an alert that does not exist (a renamed one would pass vacuously otherwise).
  const names = new Set(ALERTS.map((alert) => alert.name));
  t.deepEqual(
    cases.filter((candidate) => !names.has(candidate.alertname)).map((candidate) => candidate.alertname),
    [],
  );
});

test('promtool check config accepts prometheus.yml with its rules and target files', (t) => {
  const out = generate();
  t.deepEqual(readdirSync(join(out, 'targets')).sort(), ['etcd-kvm-etcd.json', 'etcd-kvm-node.json']);
  const result = promtool(['check', 'config', FILES.config], out);
  t.is(result.status, 0, `${result.stdout}${result.stderr}`);
  t.regex(result.stdout, /is valid prometheus config file syntax/);
  t.notRegex(`${result.stdout}${result.stderr}`, /WARNING/);
});

test('the command: --dry-run writes nothing, a second run changes nothing, the files are world-readable', (t) => {
  const out = join(mkdtempSync(join(tmpdir(), 'etcd-kvm-prometheus-')), 'prometheus');
  const files = [FILES.config, FILES.rules, FILES.targets.etcd, FILES.targets.node];
  const dry = etcdKvm(['monitoring', '-i', FIXTURE, '--out', out, '--dry-run']);
  t.is(dry.status, 0, dry.stderr);
  t.false(existsSync(out));
  t.deepEqual(
    dry.stdout.trim().split('\n'),
    files.map((file) => `would write  ${join(out, file)}`),
  );
  t.is(etcdKvm(['monitoring', '-i', FIXTURE, '--out', out]).status, 0);
  for (const file of files) t.is(statSync(join(out, file)).mode & 0o777, 0o644, file);
  const again = etcdKvm(['monitoring', '-i', FIXTURE, '--out', out, '--dry-run']);
  t.deepEqual(
    again.stdout.trim().split('\n'),
    files.map((file) => `unchanged  ${join(out, file)}`),
  );
});

test('the command: metrics_port 0 drops the etcd target file an earlier run wrote', (t) => {
  const out = generate();
  const inventory = writeInventory({
    ...baseDocument(),
    cluster: { name: 'mon-test', initial_token: 't' },
    monitoring: { metrics_port: 0 },
  });
  const result = etcdKvm(['monitoring', '-i', inventory, '--out', out]);
  t.is(result.status, 0, result.stderr);
  t.regex(result.stdout, new RegExp(`removed +${join(out, FILES.targets.etcd)}`));
  t.false(existsSync(join(out, FILES.targets.etcd)));
  const check = promtool(['check', 'config', FILES.config], out);
  t.is(check.status, 0, `${check.stdout}${check.stderr}`);
});

test('the command: no --out is bad input, exit 2, nothing written', (t) => {
  const result = etcdKvm(['monitoring', '-i', FIXTURE]);
  t.is(result.status, 2);
  t.regex(result.stderr, /^error: --out DIR is required/);
  t.notRegex(result.stderr, /^\s+at /m);
});
