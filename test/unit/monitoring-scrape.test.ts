import test from 'ava';
import { camelCase } from '../../tasks/inventory/camel.ts';
import { readFileSync } from 'node:fs';
import { posix } from 'node:path';
import { parse } from 'yaml';
import { loadInventory } from '../../tasks/inventory/load.ts';
import type { Inventory } from '../../tasks/inventory/model.ts';
import { ALERTS, alertsOf, renderAlertRules, runbookAnchor } from '../../tasks/monitoring/rules.ts';
import { FILES, JOBS, renderPrometheusConfig, renderTargets, scrapeJobs, type TargetGroup } from '../../tasks/monitoring/scrape.ts';
import { baseDocument, load } from '../helpers/inventory.ts';

/**
 * What `etcd-kvm monitoring` hands a Prometheus, read back as Prometheus reads it: the file_sd target
 * lists, prometheus.yml and the rule file's structure. What each alert means is promtool's to test
 * (test/prometheus/etcd-kvm-rules.test.yml, run by test/integration/promtool.test.ts).
 */

const FIXTURE = loadInventory('test/fixtures/monitoring-inventory.yaml');

interface ScrapeConfig {
  job_name: string;
  scheme?: string;
  metrics_path?: string;
  file_sd_configs: { files: string[] }[];
  [other: string]: unknown;
}
interface PrometheusConfig {
  global: { scrape_interval: string };
  rule_files: string[];
  scrape_configs: ScrapeConfig[];
}
interface RuleFile {
  groups: {
    name: string;
    rules: { alert: string; expr: string; for: string; labels: { severity: string }; annotations: Record<string, string> }[];
  }[];
}

const configOf = (inventory: Inventory, directory?: string) =>
  parse(renderPrometheusConfig(inventory, directory === undefined ? {} : { directory })) as PrometheusConfig;
const targetsOf = (inventory: Inventory) =>
  Object.fromEntries(scrapeJobs(inventory).map((job) => [job.name, JSON.parse(renderTargets(job)) as TargetGroup[]]));

const withMonitoring = (monitoring: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
  load({ ...baseDocument(), monitoring, ...extra });

test('etcd is scraped at each member address on metrics_port, the node exporter on 9100, each labelled with cluster and member', (t) => {
  const targets = targetsOf(FIXTURE);
  const expected = (port: number) =>
    ['etcd-1', 'etcd-2', 'etcd-3'].map((member, index) => ({
      targets: [`10.10.0.1${index + 1}:${port}`],
      labels: { etcd_cluster: 'mon-test', member },
    }));
  t.deepEqual(targets, { [JOBS.etcd]: expected(2381), [JOBS.node]: expected(9100) });
});

test('another metrics_port moves the etcd targets only', (t) => {
  const targets = targetsOf(withMonitoring({ metrics_port: 12381 }));
  t.deepEqual(
    targets[JOBS.etcd]!.flatMap((group) => group.targets),
    ['10.10.0.11:12381', '10.10.0.12:12381', '10.10.0.13:12381'],
  );
  t.deepEqual(
    targets[JOBS.node]!.flatMap((group) => group.targets),
    ['10.10.0.11:9100', '10.10.0.12:9100', '10.10.0.13:9100'],
  );
});

test('prometheus.yml: the inventory scrape interval, the rules file and one job per target file, by paths beside it', (t) => {
  const config = configOf(FIXTURE);
  t.is(config.global.scrape_interval, '15s');
  t.deepEqual(config.rule_files, [FILES.rules]);
  t.deepEqual(
    config.scrape_configs.map((job) => [job.job_name, job.file_sd_configs.flatMap((sd) => sd.files)]),
    [
      [JOBS.etcd, [FILES.targets.etcd]],
      [JOBS.node, [FILES.targets.node]],
    ],
  );
  // Relative paths: Prometheus resolves them against the config file's directory, where the command writes them.
  for (const path of [...config.rule_files, ...config.scrape_configs.flatMap((job) => job.file_sd_configs.flatMap((sd) => sd.files))])
    t.false(posix.isAbsolute(path), path);
  // The job writes each file where the config looks for it.
  t.deepEqual(
    scrapeJobs(FIXTURE).map((job) => job.file),
    config.scrape_configs.map((job) => job.file_sd_configs[0]!.files[0]),
  );
});

test('prometheus.yml: plain HTTP to /metrics, with no credential of any kind', (t) => {
  for (const job of configOf(FIXTURE).scrape_configs) {
    t.is(job.scheme, 'http', job.job_name);
    t.is(job.metrics_path, '/metrics', job.job_name);
    for (const key of ['tls_config', 'basic_auth', 'authorization', 'oauth2', 'bearer_token', 'bearer_token_file'])
      t.false(key in job, `${job.job_name}: ${key}`);
  }
});

test('prometheus.yml: an absolute directory names the rules and target files there', (t) => {
  const config = configOf(FIXTURE, '/etc/prometheus/etcd-kvm');
  t.deepEqual(config.rule_files, ['/etc/prometheus/etcd-kvm/etcd-kvm-rules.yml']);
  t.deepEqual(
    config.scrape_configs.flatMap((job) => job.file_sd_configs.flatMap((sd) => sd.files)),
    ['/etc/prometheus/etcd-kvm/targets/etcd-kvm-etcd.json', '/etc/prometheus/etcd-kvm/targets/etcd-kvm-node.json'],
  );
});

test('metrics_port 0: no etcd job nor target file, and no alert on etcd metrics; the node exporter and its alerts stay', (t) => {
  const inventory = withMonitoring({ metrics_port: 0 });
  t.deepEqual(
    scrapeJobs(inventory).map((job) => job.name),
    [JOBS.node],
  );
  t.deepEqual(
    configOf(inventory).scrape_configs.map((job) => job.job_name),
    [JOBS.node],
  );
  const rules = (parse(renderAlertRules(inventory)) as RuleFile).groups[0]!.rules;
  t.deepEqual(
    rules.map((rule) => rule.alert),
    ALERTS.filter(
      (alert) => alert.source === 'node' && !['backup_missing', 'backup_drill_failed', 'backup_unverified'].includes(alert.key),
    ).map((alert) => alert.name),
  );
  t.false(rules.some((rule) => rule.expr.includes(JOBS.etcd)));
});

test('the alerts: one per monitoring.alert_for key, each named once', (t) => {
  t.deepEqual(ALERTS.map((alert) => camelCase(alert.key)).sort(), Object.keys(FIXTURE.monitoring.alertFor).sort());
  t.is(new Set(ALERTS.map((alert) => alert.name)).size, ALERTS.length);
});

test('the rules file: one group etcd-kvm, every alert with its for:, severity and annotations, every expression on this cluster only', (t) => {
  const file = parse(renderAlertRules(FIXTURE)) as RuleFile;
  t.deepEqual(
    file.groups.map((group) => group.name),
    ['etcd-kvm'],
  );
  const rules = file.groups[0]!.rules;
  t.deepEqual(
    rules.map((rule) => rule.alert),
    ALERTS.map((alert) => alert.name),
  );
  for (const [index, rule] of rules.entries()) {
    const alert = ALERTS[index]!;
    t.is(rule.for, FIXTURE.monitoring.alertFor[camelCase(alert.key)], alert.name);
    t.true(['critical', 'warning'].includes(rule.labels.severity), alert.name);
    t.regex(rule.annotations.summary ?? '', /\{\{ \$labels\.(member|etcd_cluster) \}\}/, alert.name);
    t.is(rule.annotations.description, alert.runbook, alert.name);
    t.regex(rule.annotations.description ?? '', /`etcd-kvm [a-z]+ /, alert.name);
    // The fixture says where docs/monitoring.md is published: each alert points at its own row there.
    t.is(rule.annotations.runbook_url, `${FIXTURE.monitoring.runbookUrl}#${alert.name.toLowerCase()}`, alert.name);
    t.deepEqual(Object.keys(rule.annotations).sort(), ['description', 'runbook_url', 'summary'], alert.name);
    // Every selector of the expression names the cluster and a job of ours.
    const selectors = rule.expr.match(/\{[^}]*\}/g) ?? [];
    t.true(selectors.length > 0, alert.name);
    for (const selector of selectors) {
      t.true(selector.includes('etcd_cluster="mon-test"'), `${alert.name}: ${selector}`);
      t.regex(selector, /job="etcd-kvm-(etcd|node)"/, `${alert.name}: ${selector}`);
    }
  }
});

test('the settings reach the expressions: quota fraction, fragmentation floor, certificate days', (t) => {
  const inventory = withMonitoring({ quota_fraction: 0.9, fragmentation_floor_bytes: 5000, certificate_expiry_days: 7 });
  const expr = Object.fromEntries((parse(renderAlertRules(inventory)) as RuleFile).groups[0]!.rules.map((rule) => [rule.alert, rule.expr]));
  t.regex(expr.EtcdKvmDatabaseNearQuota ?? '', /> 0\.9 \* etcd_server_quota_backend_bytes/);
  t.regex(expr.EtcdKvmDatabaseFragmented ?? '', /> 5000\)$/);
  t.regex(expr.EtcdKvmCertificateExpiring ?? '', /< 604800$/);
});

test('the backup alert exists only with scheduled backups', (t) => {
  t.true(alertsOf(FIXTURE).some((alert) => alert.key === 'backup_missing'));
  t.false(alertsOf(load(baseDocument())).some((alert) => alert.key === 'backup_missing'));
  t.false(renderAlertRules(load(baseDocument())).includes('EtcdKvmBackupMissing'));
});

test('docs/monitoring.md has every alert, with its severity and its runbook as rules.ts says it', (t) => {
  const doc = readFileSync('docs/monitoring.md', 'utf8');
  for (const alert of ALERTS) {
    const row = doc.split('\n').find((line) => line.startsWith(`| \`${alert.name}\``));
    t.truthy(row, `${alert.name} has no row in docs/monitoring.md`);
    t.true(row?.includes(`\`${alert.key}\``), `${alert.name}: its key`);
    t.true(row?.includes(alert.severity), `${alert.name}: its severity`);
    t.true(row?.includes(alert.runbook.replaceAll('|', '\\|')), `${alert.name}: its runbook differs from tasks/monitoring/rules.ts`);
    t.true(row?.includes(`<a id="${runbookAnchor(alert.name)}"></a>`), `${alert.name}: the anchor its runbook_url points to`);
  }
});

test('without monitoring.runbook_url the alerts carry summary and description only; the target label is etcd_cluster, never cluster', (t) => {
  const inventory = { ...FIXTURE, monitoring: { ...FIXTURE.monitoring, runbookUrl: '' } };
  const file = parse(renderAlertRules(inventory)) as RuleFile;
  for (const rule of file.groups[0]!.rules) t.deepEqual(Object.keys(rule.annotations).sort(), ['description', 'summary'], rule.alert);
  // A Prometheus's external_labels often set `cluster` for its own cluster: no expression or target of ours uses it.
  t.notRegex(renderAlertRules(FIXTURE), /[{,( ]cluster[=,)]/);
  t.notRegex(JSON.stringify(scrapeJobs(FIXTURE)), /"cluster"/);
  t.regex(JSON.stringify(scrapeJobs(FIXTURE)), /"etcd_cluster":"mon-test"/);
});
