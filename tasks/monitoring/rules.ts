import { stringify } from 'yaml';
import { camelCase } from '../inventory/camel.ts';
import type { AlertForField, Inventory } from '../inventory/model.ts';
import { CLUSTER_LABEL, JOBS, type JobKey } from './scrape.ts';

/**
 * The alert rules for one cluster, from its inventory: one Prometheus rule group, `etcd-kvm`. Pure.
 *
 * Every expression selects its series by job and by `etcd_cluster="<name>"`, so two clusters' rules in one
 * Prometheus never read each other's members. etcd's own metrics come from the etcd job; what etcd does not
 * export (its alarms, certificates, backups, drift) comes from the member agent's textfile, on the node
 * exporter's job. test/prometheus/etcd-kvm-rules.test.yml fires and spares each alert with promtool.
 */

type Monitoring = Inventory['monitoring'];
/** An alert's key: its `monitoring.alert_for.<key>` setting. */
export type AlertKey = AlertForField;
export type Severity = 'critical' | 'warning';

/** The label selectors an expression takes, already narrowed to this cluster and the right job. */
interface Selectors {
  /** `{job="etcd-kvm-etcd",etcd_cluster="…"}` plus the matchers given. */
  etcd: (...matchers: string[]) => string;
  node: (...matchers: string[]) => string;
}

interface AlertDefinition {
  key: AlertKey;
  name: string;
  severity: Severity;
  /** Whose series it reads: without the etcd job (metrics_port 0) its etcd alerts could never fire, so they are left out. */
  source: JobKey;
  expr: (select: Selectors, monitoring: Monitoring) => string;
  /** Go template text: `{{ $labels.member }}`, `{{ $value }}`. */
  summary: string;
  /** One sentence: what to do, with the tool's commands. */
  runbook: string;
  /** Whether this cluster has what it watches (the backup alert needs scheduled backups). */
  applies?: (inventory: Inventory) => boolean;
}

const DAY_SECONDS = 86_400;
const of = '{{ $labels.member }} ({{ $labels.etcd_cluster }})';

/** The quantile over every bucket of a member, as etcd's own dashboards compute it. */
const p99 = (bucket: string, selector: string) =>
  `histogram_quantile(0.99, sum by (le, etcd_cluster, member) (rate(${bucket}${selector}[5m])))`;

const DEFINITIONS: readonly AlertDefinition[] = [
  {
    key: 'member_down',
    name: 'EtcdKvmMemberDown',
    severity: 'critical',
    source: 'etcd',
    expr: (s) => `up${s.etcd()} == 0`,
    summary: `etcd member ${of} does not answer on its metrics port`,
    runbook:
      'Run `etcd-kvm status -i INV` to see whether its VM and etcd run, then `etcd-kvm deploy -i INV` to bring it back; ' +
      'if a majority is lost for good, `etcd-kvm recover -i INV --dry-run` says from which survivor.',
  },
  {
    key: 'node_exporter_down',
    name: 'EtcdKvmNodeExporterDown',
    severity: 'warning',
    source: 'node',
    expr: (s) => `up${s.node()} == 0`,
    summary: `the node exporter of ${of} does not answer: its alarms, certificates, backups and drift go unseen`,
    runbook:
      "Run `etcd-kvm status -i INV` to see whether the VM runs, then `etcd-kvm deploy -i INV`, which starts the member's services again.",
  },
  {
    key: 'no_leader',
    name: 'EtcdKvmNoLeader',
    severity: 'critical',
    source: 'etcd',
    expr: (s) => `etcd_server_has_leader${s.etcd()} == 0`,
    summary: `etcd member ${of} sees no leader: the cluster may have lost its quorum`,
    runbook:
      'Run `etcd-kvm status -i INV` to count the members that answer and bring the missing ones back with ' +
      '`etcd-kvm deploy -i INV`; if a majority is lost for good, run `etcd-kvm recover -i INV --dry-run`.',
  },
  {
    key: 'leader_changes',
    name: 'EtcdKvmFrequentLeaderChanges',
    severity: 'warning',
    source: 'etcd',
    // Every member counts the same elections: the busiest count speaks for the cluster, in one alert.
    expr: (s) => `max by (etcd_cluster) (increase(etcd_server_leader_changes_seen_total${s.etcd()}[15m])) > 3`,
    summary: 'cluster {{ $labels.etcd_cluster }}: leadership changed {{ $value | printf "%.0f" }} times in 15 minutes',
    runbook:
      'Elections follow missed heartbeats: look for slow disks (the fsync and commit alerts) ' +
      'and lost packets between the members, and at `etcd-kvm status -i INV`.',
  },
  {
    key: 'database_near_quota',
    name: 'EtcdKvmDatabaseNearQuota',
    severity: 'warning',
    source: 'etcd',
    // The quota etcd runs with, from etcd itself: right even while a changed space_quota is not deployed yet.
    expr: (s, m) => `etcd_mvcc_db_total_size_in_bytes${s.etcd()} > ${m.quotaFraction} * etcd_server_quota_backend_bytes${s.etcd()}`,
    summary: `the database of ${of} is {{ $value | humanize1024 }}B, near its quota`,
    runbook:
      'Run `etcd-kvm maintain -i INV --compact --defrag` to reclaim space, ' +
      'or raise etcd.space_quota and run `etcd-kvm deploy -i INV`, before etcd raises NOSPACE and refuses writes.',
  },
  {
    key: 'database_fragmented',
    name: 'EtcdKvmDatabaseFragmented',
    severity: 'warning',
    source: 'etcd',
    // Both conditions: a small database half free is not worth a defragmentation.
    expr: (s, m) => {
      const [total, inUse] = ['etcd_mvcc_db_total_size_in_bytes', 'etcd_mvcc_db_total_size_in_use_in_bytes'].map(
        (name) => `${name}${s.etcd()}`,
      );
      return `(${inUse} / ${total} < 0.5) and (${total} - ${inUse} > ${m.fragmentationFloorBytes})`;
    },
    summary: `only {{ $value | humanizePercentage }} of the database file of ${of} is in use`,
    runbook: 'Run `etcd-kvm maintain -i INV --defrag`, which defragments one member at a time, the leader last.',
  },
  {
    key: 'nospace_alarm',
    name: 'EtcdKvmNospaceAlarm',
    severity: 'critical',
    source: 'node',
    // etcd exports no alarm metric: the member agent writes it.
    expr: (s) => `etcd_kvm_alarm_active${s.node('alarm="NOSPACE"')} == 1`,
    summary: `NOSPACE alarm raised on ${of}: the cluster refuses writes`,
    runbook:
      'Free space with `etcd-kvm maintain -i INV --compact --defrag` (or raise etcd.space_quota and ' +
      'run `etcd-kvm deploy -i INV`), then clear the alarm with `etcd-kvm maintain -i INV --disarm`.',
  },
  {
    key: 'corrupt_alarm',
    name: 'EtcdKvmCorruptAlarm',
    severity: 'critical',
    source: 'node',
    // etcd's corruption check found members whose data differ; while the alarm stands etcd answers requests with "corrupt cluster".
    expr: (s) => `etcd_kvm_alarm_active${s.node('alarm="CORRUPT"')} == 1`,
    summary: `CORRUPT alarm raised on ${of}: members' data differ, and the cluster refuses requests`,
    runbook:
      'See which member the alarm names with `etcd-kvm status -i INV`, replace that member with ' +
      '`etcd-kvm deploy -i INV --replace MEMBER` (it joins again empty and takes its ' +
      'data from the others), then clear the alarm with `etcdctl alarm disarm` as root.',
  },
  {
    key: 'slow_wal_fsync',
    name: 'EtcdKvmSlowWalFsync',
    severity: 'warning',
    source: 'etcd',
    expr: (s) => `${p99('etcd_disk_wal_fsync_duration_seconds_bucket', s.etcd())} > 0.5`,
    summary: `99th percentile WAL fsync on ${of} is {{ $value | humanizeDuration }}`,
    runbook:
      "The member's disk is too slow for etcd: look at its hypervisor's storage load, " +
      'or move its volumes to faster storage and rebuild it with `etcd-kvm deploy -i INV --replace MEMBER`.',
  },
  {
    key: 'slow_backend_commit',
    name: 'EtcdKvmSlowBackendCommit',
    severity: 'warning',
    source: 'etcd',
    expr: (s) => `${p99('etcd_disk_backend_commit_duration_seconds_bucket', s.etcd())} > 0.25`,
    summary: `99th percentile backend commit on ${of} is {{ $value | humanizeDuration }}`,
    runbook:
      "The member's disk is too slow for etcd: look at its hypervisor's storage load, " +
      'or move its volumes to faster storage and rebuild it with `etcd-kvm deploy -i INV --replace MEMBER`.',
  },
  {
    key: 'proposals_failing',
    name: 'EtcdKvmProposalsFailing',
    severity: 'warning',
    source: 'etcd',
    // A 5-minute window, so that only failures in every window of `for:` fire it: one election fails a few
    // proposals once, and that is not this alert.
    expr: (s) => `increase(etcd_server_proposals_failed_total${s.etcd()}[5m]) > 0`,
    summary: `proposals keep failing on ${of}`,
    runbook:
      'Proposals fail without a leader or a quorum: run `etcd-kvm status -i INV` ' +
      'and bring missing members back with `etcd-kvm deploy -i INV`.',
  },
  {
    key: 'learner_not_promoted',
    name: 'EtcdKvmLearnerNotPromoted',
    severity: 'warning',
    source: 'etcd',
    expr: (s) => `etcd_server_is_learner${s.etcd()} == 1`,
    summary: `${of} is still a learner`,
    runbook:
      'Run `etcd-kvm deploy -i INV`, which promotes a learner once it has caught ' +
      'up with the leader; `etcd-kvm status -i INV` shows how far behind it is.',
  },
  {
    key: 'mixed_versions',
    name: 'EtcdKvmMixedVersions',
    severity: 'warning',
    source: 'etcd',
    expr: (s) => `count by (etcd_cluster) (count by (etcd_cluster, server_version) (etcd_server_version${s.etcd()})) > 1`,
    summary: 'cluster {{ $labels.etcd_cluster }} runs {{ $value }} etcd versions at once',
    runbook:
      'Finish the upgrade or its rollback: set etcd.version and run `etcd-kvm deploy -i INV`; ' +
      "`etcd-kvm status -i INV` shows each member's version.",
  },
  {
    key: 'certificate_expiring',
    name: 'EtcdKvmCertificateExpiring',
    severity: 'warning',
    source: 'node',
    expr: (s, m) => `etcd_kvm_certificate_expiry_timestamp_seconds${s.node()} - time() < ${m.certificateExpiryDays * DAY_SECONDS}`,
    summary: `certificate {{ $labels.certificate }} ({{ $labels.subject }}) of ${of} ends in {{ $value | humanizeDuration }}`,
    runbook:
      'Run `etcd-kvm deploy -i INV --renew-certs` to re-issue the member and client certificates; ' +
      'a CA or peer CA near its end is replaced with `etcd-kvm deploy -i INV --rotate-ca cluster|peer|both` ' +
      '(docs/operating.md, Rotating the CA).',
  },
  {
    key: 'backup_missing',
    name: 'EtcdKvmBackupMissing',
    severity: 'warning',
    source: 'node',
    // Every member reports the cluster's last backup: the freshest report speaks for the cluster (a member whose
    // agent lags is not a missing backup), in one alert. A period of 0 is one the agent could not tell: no
    // threshold, rather than an alert at every age.
    expr: (s) =>
      `time() - max by (etcd_cluster) (etcd_kvm_backup_last_success_timestamp_seconds${s.node()}) ` +
      `> 2 * (max by (etcd_cluster) (etcd_kvm_backup_period_seconds${s.node()}) > 0)`,
    summary: 'cluster {{ $labels.etcd_cluster }}: no backup has succeeded for {{ $value | humanizeDuration }}, two schedule periods',
    runbook: "Run `etcd-kvm status -i INV` for the last backup and the agents' errors, and `etcd-kvm backup -i INV` to take one now.",
    applies: (inventory) => inventory.backup.enabled,
  },
  {
    key: 'backup_drill_failed',
    name: 'EtcdKvmBackupDrillFailed',
    severity: 'warning',
    source: 'node',
    // The cluster's last drill, as every member reports it: one alert for the cluster, until a drill verifies.
    expr: (s) => `max by (etcd_cluster) (etcd_kvm_backup_last_drill_failed${s.node()}) > 0`,
    summary: 'cluster {{ $labels.etcd_cluster }}: the last restore drill failed: a backup may not restore',
    runbook:
      'Run `etcd-kvm status -i INV` for what the drill found, mend it (docs/operating.md, ' +
      'Restore drills), then `etcd-kvm backup -i INV --verify` again.',
    applies: (inventory) => inventory.backup.enabled,
  },
  {
    key: 'backup_unverified',
    name: 'EtcdKvmBackupUnverified',
    severity: 'warning',
    source: 'node',
    // Counted from the last verified drill, or (none yet) from when the drills were scheduled: the freshest of
    // either, across the members, speaks for the cluster. A period of 0 is one the agent could not tell.
    expr: (s) => {
      const stamps = 'etcd_kvm_backup_last_verified_timestamp_seconds|etcd_kvm_backup_verify_scheduled_since_timestamp_seconds';
      return (
        `time() - max by (etcd_cluster) (${s.node(`__name__=~"${stamps}"`)}) ` +
        `> 2 * (max by (etcd_cluster) (etcd_kvm_backup_verify_period_seconds${s.node()}) > 0)`
      );
    },
    summary:
      'cluster {{ $labels.etcd_cluster }}: no restore drill has verified a backup for {{ $value | humanizeDuration }}, two drill periods',
    runbook:
      'Run `etcd-kvm status -i INV` for the last drill, and `journalctl -u etcd-kvm-verify` on the members for ' +
      'why none ran (a drill runs only while the cluster is healthy); `etcd-kvm backup -i INV --verify` drills now.',
    applies: (inventory) => inventory.backup.enabled && inventory.backup.verify.enabled,
  },
  {
    key: 'drift',
    name: 'EtcdKvmDrift',
    severity: 'warning',
    source: 'node',
    expr: (s) => `etcd_kvm_managed_files_drifted${s.node()} > 0`,
    summary: `{{ $value }} managed files of ${of} differ from what the last converged run wrote`,
    runbook:
      'Run `etcd-kvm deploy -i INV --dry-run --diff` to see the differences, ' +
      'then `etcd-kvm deploy -i INV` to put the files back (or carry a wanted change into the inventory first).',
  },
];

export interface AlertInfo {
  key: AlertKey;
  name: string;
  severity: Severity;
  source: JobKey;
  runbook: string;
}

/** Every alert the tool defines, by key and name: docs/monitoring.md and the promtool tests read this list. */
export const ALERTS: readonly AlertInfo[] = DEFINITIONS.map(({ key, name, severity, source, runbook }) => ({
  key,
  name,
  severity,
  source,
  runbook,
}));

/** An alert's anchor in docs/monitoring.md's table (its row's `<a id>`), which runbook_url points to. */
export const runbookAnchor = (alert: string) => alert.toLowerCase();

/** The rule group's name, the same in every cluster's file (Prometheus keys groups by file and name). */
export const RULE_GROUP = 'etcd-kvm';

/** A PromQL string literal: a JSON string is one (cluster names are DNS labels anyway). */
const literal = (value: string) => JSON.stringify(value);

function selectorsOf(inventory: Inventory): Selectors {
  const selector =
    (job: string) =>
    (...matchers: string[]) =>
      `{${[`job=${literal(job)}`, `${CLUSTER_LABEL}=${literal(inventory.cluster.name)}`, ...matchers].join(',')}}`;
  return { etcd: selector(JOBS.etcd), node: selector(JOBS.node) };
}

/** Without the etcd job nothing reads etcd's metrics; without scheduled backups none is missing. */
const applicable = (inventory: Inventory) =>
  DEFINITIONS.filter(
    (definition) => (definition.source !== 'etcd' || inventory.monitoring.metricsPort !== 0) && (definition.applies?.(inventory) ?? true),
  );

/** The alerts this cluster's rules file holds. */
export function alertsOf(inventory: Inventory): AlertInfo[] {
  const keys = new Set(applicable(inventory).map((definition) => definition.key));
  return ALERTS.filter((alert) => keys.has(alert.key));
}

export function renderAlertRules(inventory: Inventory): string {
  const select = selectorsOf(inventory);
  const { monitoring } = inventory;
  const rules = applicable(inventory).map((definition) => ({
    alert: definition.name,
    expr: definition.expr(select, monitoring),
    for: monitoring.alertFor[camelCase(definition.key)],
    labels: { severity: definition.severity },
    annotations: {
      summary: definition.summary,
      description: definition.runbook,
      ...(monitoring.runbookUrl ? { runbook_url: `${monitoring.runbookUrl}#${runbookAnchor(definition.name)}` } : {}),
    },
  }));
  const header = `# Written by etcd-kvm monitoring for cluster ${inventory.cluster.name}: regenerate rather than edit.`;
  return `${header}\n${stringify({ groups: [{ name: RULE_GROUP, rules }] }, { lineWidth: 0 })}`;
}
