import { mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { $ } from 'zx';
import { freshBuild } from '../../bin/fresh-build.mjs';
import { argument, median } from './cli.ts';
import type { DeployTiming } from '../../tasks/core/timing.ts';

/**
 * A change's effect on a no-op, on the deployed lab (`npm run lab:up`, then a deploy): the installed
 * command of another commit (`--before`, built in a git worktree of its own) and of this checkout
 * (built if stale), each run in turn, so both see the same load; this machine's load moves a no-op
 * by more than most changes do, so compare within one run of this script only. Prints a Markdown
 * row per build: the medians of the run's wall-clock time, the tool's work (its --json report) and
 * the guest phase.
 *
 *   npx tsx scripts/bench/ab.ts --before REV [--rounds N] [-i INVENTORY]
 */

const before = argument('--before', '');
if (!before) throw new Error('--before REV: the commit to compare this checkout with');
const rounds = Number(argument('--rounds', '7'));
const inventory = resolve(argument('-i', 'inventories/lab.yaml'));
const REPORT = join(tmpdir(), 'etcd-kvm-ab-report.json');
$.verbose = false;

interface Report {
  timing: DeployTiming;
}

/** One no-op of the installed command in `root`: its wall-clock time, its work and its guest phase, in ms. */
async function noOp(root: string): Promise<{ wall: number; work: number; guest: number }> {
  const started = performance.now();
  const result = await $`${process.execPath} ${join(root, 'bin/etcd-kvm.mjs')} deploy -i ${inventory} --json ${REPORT}`.nothrow();
  const wall = performance.now() - started;
  if (result.exitCode !== 0) throw new Error(`the no-op of ${root} failed:\n${result.stdout.slice(-2000)}\n${result.stderr}`);
  const { timing } = JSON.parse(readFileSync(REPORT, 'utf8')) as Report;
  return { wall, work: timing.workMs, guest: timing.phases.find(({ phase }) => phase === 'guest')?.ms ?? 0 };
}

const worktree = mkdtempSync(join(tmpdir(), 'etcd-kvm-ab-'));
try {
  await $`git worktree add --detach ${worktree} ${before}`;
  // The packages of this checkout: a commit whose package-lock.json differs is not what this compares.
  symlinkSync(resolve('node_modules'), join(worktree, 'node_modules'));
  await $`${process.execPath} ${join(worktree, 'scripts/build.mjs')}`;
  if (!freshBuild(pathToFileURL(`${process.cwd()}/`))) await $`${process.execPath} scripts/build.mjs`;
  const builds = { [`${before} (before)`]: worktree, 'this checkout': process.cwd() };
  const runs = new Map(Object.keys(builds).map((name) => [name, [] as Awaited<ReturnType<typeof noOp>>[]]));
  for (let round = 0; round < rounds; round++) for (const [name, root] of Object.entries(builds)) runs.get(name)!.push(await noOp(root));
  const ms = (values: number[]) => `${Math.round(median(values))} ms`;
  console.log(
    `\nno-ops of the installed command, ${rounds} of each, in turn; load average ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')} at the end\n`,
  );
  console.log("| build | wall-clock | the tool's work | guest phase | work, each run |\n|---|---|---|---|---|");
  for (const [name, measured] of runs) {
    const of = (key: 'wall' | 'work' | 'guest') => measured.map((run) => run[key]);
    console.log(`| ${name} | ${ms(of('wall'))} | ${ms(of('work'))} | ${ms(of('guest'))} | ${of('work').map(Math.round).join(', ')} |`);
  }
} finally {
  await $`git worktree remove --force ${worktree}`.nothrow();
  rmSync(worktree, { recursive: true, force: true });
}
