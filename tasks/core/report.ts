// The one function used, not the package's index (which loads every diff algorithm at each start).
import { createTwoFilesPatch } from 'diff/lib/patch/create.js';
import { forDisplay } from './display.ts';
import type { Diff, Status, StepResult } from './step.ts';

/*
 * Every report is made safe for a terminal as a whole (forDisplay): results carry what guests said
 * (agent reasons, cloud-init's module names, journal lines), and a report is printed.
 */

/** A unified diff of display-safe text (secrets already masked by the renderer). */
export function unifiedDiff(diff: Diff): string {
  const patch = createTwoFilesPatch(`${diff.label} (current)`, `${diff.label} (wanted)`, diff.before, diff.after, undefined, undefined, {
    context: 3,
  });
  // Drop the "====" header line jsdiff adds before the file names.
  return patch
    .split('\n')
    .filter((line) => !line.startsWith('====='))
    .join('\n')
    .trimEnd();
}

function indent(text: string, by: string): string {
  return text
    .split('\n')
    .map((line) => `${by}${line}`)
    .join('\n');
}

const rollLength = (results: readonly StepResult[], step: string) =>
  Math.max(...results.filter((r) => r.step === step).map((r) => r.rollPosition ?? 0));

/**
 * What changed (or would change), host by host, step by step: one line a change, every one of them before any diff,
 * so a plan reads whole and a failure is never buried among file contents. With `diffs` (--diff) the diffs follow,
 * each under its host, step and change; without, a dry-run says how many it left out.
 */
export function formatChanges(results: readonly StepResult[], { dryRun, diffs }: { dryRun: boolean; diffs: boolean }): string {
  const lines: string[] = [];
  const diffed: { heading: string; diff: Diff }[] = [];
  const hosts = [...new Set(results.map((r) => r.host))];
  for (const host of hosts) {
    const mine = results.filter((r) => r.host === host && (r.status === 'changed' || r.status === 'failed' || r.warnings?.length));
    if (mine.length === 0) continue;
    lines.push(`${host}:`);
    for (const result of mine) {
      for (const warning of result.warnings ?? []) lines.push(`  ${result.step}: WARNING: ${warning}`);
      if (result.status === 'failed') {
        lines.push(`  ${result.step}: FAILED: ${result.error}`);
        continue;
      }
      // A rolling step's members change wave by wave: say which wave each changed in.
      const step = result.rollPosition
        ? `${result.step} (roll ${result.rollPosition} of ${rollLength(results, result.step)})`
        : result.step;
      for (const change of result.changes) {
        const line = `${step}: ${dryRun ? 'would ' : ''}${change.summary}`;
        lines.push(`  ${line}`);
        if (change.diff) diffed.push({ heading: `${host} ${line}`, diff: change.diff });
      }
    }
  }
  if (diffs && diffed.length > 0) {
    lines.push('', 'diffs:');
    for (const { heading, diff } of diffed) lines.push(heading, indent(unifiedDiff(diff), '    '));
  } else if (dryRun && diffed.length > 0) {
    lines.push(`(${diffed.length} of these changes have a diff: --diff shows them)`);
  }
  return forDisplay(lines.join('\n'));
}

export type HostRecap = Record<Status, number>;

export function recapByHost(results: readonly StepResult[]): Map<string, HostRecap> {
  const recap = new Map<string, HostRecap>();
  for (const result of results) {
    const counts = recap.get(result.host) ?? { ok: 0, changed: 0, failed: 0, skipped: 0 };
    counts[result.status] += 1;
    recap.set(result.host, counts);
  }
  return recap;
}

/** Ansible-style recap: one line per host with ok / changed / failed / skipped step counts. */
export function formatRecap(results: readonly StepResult[], dryRun: boolean, elapsedMs?: number): string {
  const recap = recapByHost(results);
  const width = Math.max(...[...recap.keys()].map((host) => host.length), 4);
  const lines = [
    `RECAP${dryRun ? ' (dry-run: nothing was changed)' : ''}${elapsedMs === undefined ? '' : ` in ${(elapsedMs / 1000).toFixed(1)} s`}`,
  ];
  for (const [host, counts] of recap) {
    lines.push(`${host.padEnd(width)}  ok=${counts.ok}  changed=${counts.changed}  failed=${counts.failed}  skipped=${counts.skipped}`);
  }
  return forDisplay(lines.join('\n'));
}

/** After the recap: each hypervisor the run could not reach, the members it failed, and why. */
export function formatUnreachable(
  unreachable: readonly { hypervisor: string; members: readonly string[]; at: string; reason: string; detail?: string }[],
): string {
  if (unreachable.length === 0) return '';
  const line = ({ hypervisor, members, at, reason, detail }: (typeof unreachable)[number]) => {
    const who = members.join(', ') || 'no member in this run';
    // The hypervisor's own failure, its address said once; otherwise the reason names the bastion on the way.
    return detail !== undefined ? `hypervisor ${hypervisor} at ${at} (${who}): ${detail}` : `hypervisor ${hypervisor} (${who}): ${reason}`;
  };
  return forDisplay(['UNREACHABLE (their members failed; the others went on)', ...unreachable.map(line)].join('\n'));
}

/**
 * --profile: each step's time on each host (a step that ran twice in a run, e.g. render, is added
 * up), the slowest step first, as Ansible's profile_tasks: where a run's time went.
 */
export function formatProfile(results: readonly StepResult[], phases: readonly { phase: string; ms: number }[] = []): string {
  const steps = new Map<string, Map<string, number>>();
  for (const result of results) {
    const hosts = steps.get(result.step) ?? new Map<string, number>();
    hosts.set(result.host, (hosts.get(result.host) ?? 0) + result.durationMs);
    steps.set(result.step, hosts);
  }
  const slowest = (hosts: Map<string, number>) => Math.max(...hosts.values());
  const ordered = [...steps].sort(([, a], [, b]) => slowest(b) - slowest(a));
  const width = Math.max(...ordered.map(([step]) => step.length), 4);
  const seconds = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
  const lines = [
    'PROFILE (each step on each host, slowest step first)',
    ...ordered.map(([step, hosts]) => `${step.padEnd(width)}  ${[...hosts].map(([host, ms]) => `${host} ${seconds(ms)}`).join('  ')}`),
  ];
  // Phases hold what no step's time shows: facts asked ahead for later steps, the cluster probe, waits.
  if (phases.length > 0)
    lines.push(`phases (wall-clock, in order): ${phases.map(({ phase, ms }) => `${phase} ${seconds(ms)}`).join(', ')}`);
  return forDisplay(lines.join('\n'));
}
