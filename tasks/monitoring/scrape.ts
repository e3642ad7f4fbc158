import { posix } from 'node:path';
import { stringify } from 'yaml';
import type { Inventory } from '../inventory/model.ts';
import { NODE_EXPORTER } from '../render/guest/node-exporter.ts';

/**
 * What an operator's Prometheus scrapes, from the inventory alone: one file_sd target list per job and a
 * prometheus.yml that reads them and the rules file. Pure: the command (tasks/commands/monitoring.ts) writes them.
 *
 * Both jobs scrape plain HTTP with no identity, by choice: etcd's metrics listener (`listen-metrics-urls`)
 * serves only /metrics and /health, never a key or a value, and asks for no client certificate; the node
 * exporter is HTTP only. A scraper holding a client certificate of the cluster could read every key
 * through the client port; this way Prometheus holds nothing worth stealing (docs/monitoring.md).
 */

/** The job names; the alert rules select their series by them (tasks/monitoring/rules.ts). */
export const JOBS = { etcd: 'etcd-kvm-etcd', node: 'etcd-kvm-node' } as const;
export type JobKey = keyof typeof JOBS;

/** The generated files' names, relative to the output directory. */
export const FILES = {
  config: 'prometheus.yml',
  rules: 'etcd-kvm-rules.yml',
  targets: { etcd: `targets/${JOBS.etcd}.json`, node: `targets/${JOBS.node}.json` },
} as const satisfies { config: string; rules: string; targets: Record<JobKey, string> };

/** One entry of a file_sd file: Prometheus's own format (a JSON array of these). */
export interface TargetGroup {
  targets: string[];
  labels: Record<string, string>;
}

export interface ScrapeJob {
  key: JobKey;
  name: string;
  /** Relative to the output directory. */
  file: string;
  groups: TargetGroup[];
}

/**
 * The target label naming the etcd cluster: not `cluster`, which most Prometheus set-ups already set among
 * their `external_labels` for the Prometheus's own cluster (a target's label would shadow it on every alert).
 */
export const CLUSTER_LABEL = 'etcd_cluster';

/**
 * The labels every series of a member carries once scraped: which cluster (so that two clusters in one
 * Prometheus never mix: every rule filters on it) and which member (etcd's own metrics name neither).
 */
export const memberLabels = (inventory: Inventory, member: string): Record<string, string> => ({
  [CLUSTER_LABEL]: inventory.cluster.name,
  member,
});

/**
 * The jobs to scrape. With `monitoring.metrics_port` 0 etcd has no metrics listener, so there is no etcd
 * job: its client port would need a client certificate, which this configuration deliberately never holds.
 */
export function scrapeJobs(inventory: Inventory): ScrapeJob[] {
  const port = inventory.monitoring.metricsPort;
  // One group per member, since each carries its own member label.
  const groups = (targetPort: number): TargetGroup[] =>
    inventory.members.map((member) => ({ targets: [`${member.etcdIp}:${targetPort}`], labels: memberLabels(inventory, member.name) }));
  return [
    ...(port === 0 ? [] : [{ key: 'etcd' as const, name: JOBS.etcd, file: FILES.targets.etcd, groups: groups(port) }]),
    { key: 'node', name: JOBS.node, file: FILES.targets.node, groups: groups(NODE_EXPORTER.port) },
  ];
}

/** A file_sd file's content: Prometheus re-reads it on change, without a reload. */
export const renderTargets = (job: ScrapeJob): string => `${JSON.stringify(job.groups, null, 2)}\n`;

export interface ConfigOptions {
  /**
   * The absolute directory where Prometheus finds the rules and target files. Unset: beside
   * prometheus.yml, by relative paths, which Prometheus resolves against the config file's directory.
   */
  directory?: string;
}

export function renderPrometheusConfig(inventory: Inventory, options: ConfigOptions = {}): string {
  const at = (file: string) => (options.directory === undefined ? file : posix.join(options.directory, file));
  const config = {
    // Rules evaluated as often as the series they read change; Prometheus's own default is 1m.
    global: { scrape_interval: inventory.monitoring.scrapeInterval, evaluation_interval: inventory.monitoring.scrapeInterval },
    rule_files: [at(FILES.rules)],
    scrape_configs: scrapeJobs(inventory).map((job) => ({
      job_name: job.name,
      scheme: 'http',
      metrics_path: '/metrics',
      file_sd_configs: [{ files: [at(job.file)] }],
    })),
  };
  const header = [
    `# Written by etcd-kvm monitoring for cluster ${inventory.cluster.name}: regenerate rather than edit.`,
    '# Plain HTTP on purpose: the targets serve metrics only, and Prometheus holds no identity of the cluster.',
  ];
  return `${header.join('\n')}\n${stringify(config)}`;
}
