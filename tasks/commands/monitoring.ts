#!/usr/bin/env -S npx tsx
import { chmodSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { runTool } from '../cli/tool.ts';
import { EXIT, InputError } from '../core/errors.ts';
import { PUBLIC_FILE_MODE, readIfExists } from '../core/files.ts';
import { loadInventory } from '../inventory/load.ts';
import type { Inventory } from '../inventory/model.ts';
import { renderAlertRules } from '../monitoring/rules.ts';
import { FILES, renderPrometheusConfig, renderTargets, scrapeJobs } from '../monitoring/scrape.ts';

const HELP = `Usage: etcd-kvm monitoring -i INVENTORY --out DIR [--dry-run]

Writes what a Prometheus needs to watch the cluster, from the inventory alone (contacts nothing):
  DIR/prometheus.yml                 scrape interval, the rules file and the two jobs below
  DIR/etcd-kvm-rules.yml             the alert rules (monitoring.alert_for sets each one's for:)
  DIR/targets/etcd-kvm-etcd.json     each member's etcd metrics (monitoring.metrics_port; none with 0)
  DIR/targets/etcd-kvm-node.json     each member's node exporter, with the agent's own metrics
Every target is labelled with its cluster and member; plain HTTP, no credentials (docs/monitoring.md).
Use DIR/prometheus.yml as it is, or copy its scrape_configs and rule_files into yours.

  -i, --inventory FILE   the inventory (required)
      --out DIR          where to write (made if missing; the files in it are replaced, and a
                         target file no longer generated is removed)
      --dry-run          say what would be written, write nothing
  -h, --help             this text

Exit: 0 written (or nothing to change), 2 bad input.`;

interface OutputFile {
  /** Relative to DIR. */
  path: string;
  content: string;
}

function outputFiles(inventory: Inventory): OutputFile[] {
  return [
    { path: FILES.config, content: renderPrometheusConfig(inventory) },
    { path: FILES.rules, content: renderAlertRules(inventory) },
    ...scrapeJobs(inventory).map((job) => ({ path: job.file, content: renderTargets(job) })),
  ];
}

/**
 * Not writeFileAtomic: that makes the directory private, and DIR may be /etc/prometheus, which the
 * prometheus user must go on reading. Nothing here is secret. A temporary file and a rename still keep
 * Prometheus from reading half a target file.
 */
function writePublicFile(path: string, content: string): void {
  mkdirSync(dirname(path), { recursive: true });
  const temporary = `${path}.tmp-${process.pid}`;
  writeFileSync(temporary, content, { mode: PUBLIC_FILE_MODE });
  // Whatever the umask: Prometheus runs as a user of its own.
  chmodSync(temporary, PUBLIC_FILE_MODE);
  renameSync(temporary, path);
}

process.exitCode = await runTool({
  help: HELP,
  options: { out: { type: 'string' }, 'dry-run': { type: 'boolean', default: false } },
  failure: 'monitoring configuration failed',
  async run(values, path) {
    if (typeof values.out !== 'string' || values.out === '') throw new InputError(`--out DIR is required\n\n${HELP}`);
    const out = values.out;
    const dryRun = values['dry-run'] === true;
    const inventory = loadInventory(path);
    const files = outputFiles(inventory);
    // A target file no longer generated (metrics_port set to 0) goes: DIR holds what prometheus.yml names, and a
    // config that merged ours by a glob does not go on scraping a listener that is gone.
    const stale = Object.values(FILES.targets).filter((file) => !files.some((generated) => generated.path === file));
    const lines: [verdict: string, path: string][] = [];
    const said = (action: 'write' | 'change' | 'remove') =>
      dryRun ? `would ${action}` : { write: 'wrote', change: 'changed', remove: 'removed' }[action];
    for (const file of files) {
      const target = join(out, file.path);
      const before = readIfExists(target);
      if (before === file.content) lines.push(['unchanged', target]);
      else {
        if (!dryRun) writePublicFile(target, file.content);
        lines.push([said(before === undefined ? 'write' : 'change'), target]);
      }
    }
    for (const file of stale) {
      const target = join(out, file);
      if (readIfExists(target) === undefined) continue;
      if (!dryRun) rmSync(target);
      lines.push([said('remove'), target]);
    }
    const width = Math.max(...lines.map(([verdict]) => verdict.length));
    for (const [verdict, target] of lines) console.log(`${verdict.padEnd(width)}  ${target}`);
    if (inventory.monitoring.metricsPort === 0)
      console.log("monitoring.metrics_port is 0: no etcd job, and no alert on etcd's own metrics");
    return EXIT.ok;
  },
});
