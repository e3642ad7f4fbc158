import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { $ } from 'zx';
import { buildCloudInitIso } from '../tasks/libvirt/cloud-init-iso.ts';
import { idleRate, qemuPids, withGuestCpu } from './bench/guest-cpu.ts';
import { scaleSeries, type ScalePoint } from './bench/scale.ts';
import { argument, median } from './bench/cli.ts';
import type { DeployTiming } from '../tasks/core/timing.ts';
import { loadInventory } from '../tasks/inventory/load.ts';

/**
 * Deploy timings on the local lab (run `npm run lab:up` first): cold deploys of the 3 members, each
 * followed by the lower bound (the slowest VM from `virsh start` to etcd healthy, without the tool), a no-op re-run
 * and a dry-run, each as the median of several runs, started as the installed command (compiled), with
 * `node --import tsx` and with `npx tsx`; each run's start-up (process start and module loading, before the tool's main)
 * is told apart from the tool's own work by the timing in its --json report. Prints Markdown tables
 * for docs/benchmarks.md.
 *
 * The installed command's no-ops also report the guests' CPU above idle per member (scripts/bench/guest-cpu.ts),
 * and the scale series (scripts/bench/scale.ts) runs that no-op on 3 and on 5 members.
 *
 *   npx tsx scripts/bench.ts [--cold N] [--warm N] [--scale N] [-i INVENTORY]
 *     --cold 0: only the warm runs, on the deployed lab; --scale 0: no scale series;
 *     -i: the warm runs on that inventory's deployed cluster (a cluster on release binaries, the two-hypervisor lab):
 *         the cold runs and the scale series remove and recreate the default lab's own members, so they need --cold 0
 *         and --scale 0 there.
 */

const DEFAULT_INVENTORY = 'inventories/lab.yaml';
const INVENTORY = argument('-i', DEFAULT_INVENTORY);
const inventory = loadInventory(INVENTORY);
const STATE = inventory.stateDir;
const MEMBERS = Object.fromEntries(inventory.members.map((member) => [member.name, member.etcdIp]));
const POOL = 'etcd-lab';
const REPORT = '/tmp/etcd-kvm-bench-report.json';

const coldRuns = Number(argument('--cold', '3'));
const warmRuns = Number(argument('--warm', '7'));
const scaleRuns = Number(argument('--scale', String(warmRuns)));
if (resolve(INVENTORY) !== resolve(DEFAULT_INVENTORY) && (coldRuns > 0 || scaleRuns > 0)) {
  console.error(
    `-i ${INVENTORY}: the bench's cold runs and scale series remove and recreate the default lab's members (${DEFAULT_INVENTORY}); on another inventory add --cold 0 --scale 0 (warm runs on its deployed cluster)`,
  );
  process.exit(2);
}

$.verbose = false;
const virsh = (args: string[]) => $`virsh -q -c qemu:///system ${args}`.quiet();
const seconds = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
const shares = (cores: number[]) => cores.map((share) => `${Math.round(share * 100)} %`).join(', ');

interface Report {
  results: { step: string; host: string; status: string; durationMs: number }[];
  timing: DeployTiming;
}

/**
 * How the tool is started: the installed command (code compiled at install time: `npm run build`, which
 * main() runs first), with node's loader flag (no npx, no tsx launcher process), and as the scripts'
 * own shebang has it (`npx tsx`).
 */
const LAUNCHERS = {
  'etcd-kvm deploy': [process.execPath, 'bin/etcd-kvm.mjs', 'deploy'],
  'node --import tsx': [process.execPath, '--import', 'tsx', 'tasks/deploy.ts'],
  'npx tsx': ['npx', 'tsx', 'tasks/deploy.ts'],
} as const;
type Launcher = keyof typeof LAUNCHERS;

async function timedDeploy(extra: string[] = [], launcher: Launcher = 'npx tsx'): Promise<{ ms: number; report: Report }> {
  const started = performance.now();
  const result = await $`${LAUNCHERS[launcher]} -i ${INVENTORY} --json ${REPORT} ${extra}`.nothrow().quiet();
  const ms = performance.now() - started;
  if (result.exitCode !== 0) throw new Error(`deploy ${extra.join(' ')} failed:\n${result.stdout.slice(-3000)}\n${result.stderr}`);
  return { ms, report: JSON.parse(readFileSync(REPORT, 'utf8')) as Report };
}

/**
 * One kind of warm run timed: total wall-clock, start-up (wall-clock minus the tool's work), the work, and of the
 * work what ran outside the phases (their named parts together) and what nothing names (core/timing.ts).
 */
interface Timed {
  total: number[];
  startup: number[];
  work: number[];
  outside: number[];
  unaccounted: number[];
}
const timed = (): Timed => ({ total: [], startup: [], work: [], outside: [], unaccounted: [] });
function record(into: Timed, run: { ms: number; report: Report }): void {
  const { timing } = run.report;
  into.total.push(run.ms);
  into.work.push(timing.workMs);
  into.startup.push(run.ms - timing.workMs);
  into.outside.push(timing.outside.reduce((sum, part) => sum + part.ms, 0));
  into.unaccounted.push(timing.unaccountedMs);
}

/** The members' VMs and disks gone, as before a first deploy. */
async function removeMembers(): Promise<void> {
  for (const name of Object.keys(MEMBERS)) {
    await virsh(['destroy', name]).nothrow();
    await virsh(['undefine', name]).nothrow();
  }
  const volumes = (await virsh(['vol-list', POOL])).stdout
    .split('\n')
    .map((line) => line.trim().split(/\s+/)[0])
    .filter((v): v is string => Boolean(v));
  for (const volume of volumes) await virsh(['vol-delete', '--pool', POOL, volume]);
}

async function healthy(ip: string): Promise<boolean> {
  const tls = ['--cacert', `${STATE}/pki/ca.crt`, '--cert', `${STATE}/pki/clients/root.crt`, '--key', `${STATE}/pki/clients/root.key`];
  const result =
    await $`ip netns exec etcd-kvm-lab etcdctl --dial-timeout=2s --command-timeout=3s --endpoints=${`https://${ip}:${inventory.etcd.clientPort}`} ${tls} endpoint health`
      .nothrow()
      .quiet();
  return result.exitCode === 0;
}

/**
 * Without the tool: the same definitions, fresh OS overlays and data disks, and the seeds of a new
 * cluster (`--render-only` renders ETCD_INITIAL_CLUSTER_STATE=new; the deployed seeds say
 * `existing` once the cluster has formed), all three started at once; how long until each member's
 * etcd is healthy.
 */
async function lowerBound(): Promise<Record<string, number>> {
  const definitions = new Map<string, string>();
  for (const name of Object.keys(MEMBERS)) definitions.set(name, (await virsh(['dumpxml', '--inactive', name])).stdout);
  const basePath = (await virsh(['vol-path', '--pool', 'etcd-lab-images', 'debian-12-etcd.qcow2'])).stdout.trim();
  const seeds = mkdtempSync(join(tmpdir(), 'etcd-kvm-bench-seeds-'));
  await $`npx tsx tasks/deploy.ts -i ${INVENTORY} --render-only ${seeds}`;
  for (const name of Object.keys(MEMBERS)) {
    await virsh(['destroy', name]).nothrow();
    await virsh(['undefine', name]);
    for (const volume of [`${name}-os.qcow2`, `${name}-data.qcow2`, `${name}-cloud-init.iso`])
      await virsh(['vol-delete', '--pool', POOL, volume]).nothrow();
    await virsh([
      'vol-create-as',
      '--pool',
      POOL,
      '--name',
      `${name}-os.qcow2`,
      '--capacity',
      '4G',
      '--format',
      'qcow2',
      '--backing-vol',
      basePath,
      '--backing-vol-format',
      'qcow2',
    ]);
    await virsh(['vol-create-as', '--pool', POOL, '--name', `${name}-data.qcow2`, '--capacity', '1G', '--format', 'qcow2']);
    const rendered = ['user-data', 'meta-data', 'network-config'].map((file) => {
      const content = readFileSync(join(seeds, name, file), 'utf8');
      return { name: file, content, display: content, containsSecrets: false };
    });
    const iso = await buildCloudInitIso(rendered);
    await virsh([
      'vol-create-as',
      '--pool',
      POOL,
      '--name',
      `${name}-cloud-init.iso`,
      '--capacity',
      `${iso.bytes.length}`,
      '--format',
      'raw',
    ]);
    const isoFile = join(seeds, `${name}.iso`);
    writeFileSync(isoFile, iso.bytes);
    await virsh(['vol-upload', '--pool', POOL, `${name}-cloud-init.iso`, isoFile]);
    const file = join(tmpdir(), `etcd-kvm-bench-${name}.xml`);
    writeFileSync(file, definitions.get(name)!);
    await virsh(['define', file]);
    rmSync(file);
  }
  rmSync(seeds, { recursive: true, force: true });
  const started = performance.now();
  await Promise.all(Object.keys(MEMBERS).map((name) => virsh(['start', name])));
  const times: Record<string, number> = {};
  await Promise.all(
    Object.entries(MEMBERS).map(async ([name, ip]) => {
      while (!(await healthy(ip))) {
        if (performance.now() - started > 900_000) throw new Error(`${name} not healthy after 15 min`);
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
      times[name] = performance.now() - started;
    }),
  );
  return times;
}

/** Each QEMU process's share of a core over 5 s while the cluster idles. */
async function guestIdleCpu(): Promise<number[]> {
  const pids = (await $`pgrep -f qemu-system-x86`.nothrow()).stdout.split('\n').filter(Boolean);
  const ticks = () =>
    pids.map((pid) => {
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
      return Number(fields[11]) + Number(fields[12]);
    });
  const before = ticks();
  await new Promise((resolve) => setTimeout(resolve, 5_000));
  const after = ticks();
  // Clock ticks are 1/100 s on Linux.
  return after.map((tick, i) => (tick - before[i]!) / 100 / 5);
}

function stepTimes(report: Report): Map<string, number> {
  const slowest = new Map<string, number>();
  for (const r of report.results) slowest.set(r.step, Math.max(slowest.get(r.step) ?? 0, r.durationMs));
  return slowest;
}

/** The scale series as a table, and the work's ratio of 5 members to 3 (issue 29: ≤ 1.3). */
function printScale(points: ScalePoint[]): void {
  console.log(
    "\n| no-op, installed command | total | start-up | the tool's work | the tool's CPU | guest CPU per member above idle | the idle guests' CPU | totals of the runs |",
  );
  console.log('|---|---|---|---|---|---|---|---|');
  for (const point of points)
    console.log(
      `| ${point.members} members | ${seconds(median(point.total))} | ${seconds(median(point.startup))} | ${seconds(median(point.work))} | ${seconds(median(point.toolCpu))} | ${Math.round(median(point.guestCpu))} ms | ${point.idleCores.toFixed(2)} cores | ${point.total.map(seconds).join(', ')} |`,
    );
  const [three, five] = points.map((point) => median(point.work));
  const [threeCpu, fiveCpu] = points.map((point) => median(point.toolCpu));
  if (three !== undefined && five !== undefined && threeCpu !== undefined && fiveCpu !== undefined)
    console.log(
      `\nThe tool's work, 5 members against 3: ${(five / three).toFixed(2)} × (target ≤ 1.3: ${five / three <= 1.3 ? 'met' : 'NOT met'}); its own CPU: ${(fiveCpu / threeCpu).toFixed(2)} ×.`,
    );
  // A no-op that keeps the machine busy takes about the CPU it needs over what the idle guests leave:
  // the ratio of what they leave is a floor under the work's ratio that no change to the tool moves.
  const [left3, left5] = points.map((point) => cpus().length - point.idleCores);
  if (left3 !== undefined && left5 !== undefined && left5 > 0)
    console.log(
      `What the idle guests leave of this machine's ${cpus().length} cores: ${left3.toFixed(2)} beside 3 members, ${left5.toFixed(2)} beside 5; ` +
        `so a no-op that keeps the machine busy costs five members at least ${(left3 / left5).toFixed(2)} × three, before a fifth member asks anything.`,
    );
}

async function main(): Promise<void> {
  // The installed command's runs are of the sources as they are now, compiled.
  await $`node scripts/build.mjs`;
  // Each cold deploy followed by a lower-bound boot, as often: both vary by tens of seconds from boot
  // to boot on this machine, so each side is the median of as many runs, taken under the same load.
  const cold: { ms: number; steps: Map<string, number> }[] = [];
  const bounds: Record<string, number>[] = [];
  for (let i = 0; i < coldRuns; i++) {
    await removeMembers();
    rmSync(STATE, { recursive: true, force: true });
    const run = await timedDeploy();
    cold.push({ ms: run.ms, steps: stepTimes(run.report) });
    console.error(`cold run ${i + 1}/${coldRuns}: ${seconds(run.ms)}`);
    const bound = await lowerBound();
    bounds.push(bound);
    console.error(
      `lower bound ${i + 1}/${coldRuns}: ${Object.entries(bound)
        .map(([name, ms]) => `${name} ${seconds(ms)}`)
        .join(', ')}`,
    );
  }
  // The fresh cluster from the lower-bound run has no auth yet and new seeds: converge once, then measure no-ops.
  await timedDeploy();
  // What the guests take idle, before the warm runs and again at the end: every figure below is under that load.
  const idleBefore = await guestIdleCpu();
  // No-ops and dry-runs with both launchers, interleaved so that each sees the same load.
  const noop = { 'etcd-kvm deploy': timed(), 'node --import tsx': timed(), 'npx tsx': timed() };
  const dry = { 'etcd-kvm deploy': timed(), 'node --import tsx': timed(), 'npx tsx': timed() };
  const pids = await qemuPids(Object.keys(MEMBERS));
  const rate = await idleRate(pids);
  const installedGuestCpu: number[] = [];
  for (let i = 0; i < warmRuns; i++) {
    for (const launcher of Object.keys(LAUNCHERS) as Launcher[]) {
      const { result: run, perGuestMs } = await withGuestCpu(pids, rate, () => timedDeploy([], launcher));
      if (launcher === 'etcd-kvm deploy') installedGuestCpu.push(perGuestMs);
      const changed = run.report.results.filter((r) => r.status !== 'ok');
      if (changed.length > 0) throw new Error(`a no-op run changed something: ${JSON.stringify(changed)}`);
      record(noop[launcher], run);
      record(dry[launcher], await timedDeploy(['--dry-run'], launcher));
    }
  }
  // The same no-op without the guest step (--skip-tags guest), interleaved so both see the same load.
  const noopNoGuest = timed();
  const noopWithGuest = timed();
  const guestStep: number[] = [];
  for (let i = 0; i < warmRuns; i++) {
    record(noopNoGuest, await timedDeploy(['--skip-tags', 'guest'], 'node --import tsx'));
    const run = await timedDeploy([], 'node --import tsx');
    record(noopWithGuest, run);
    guestStep.push(stepTimes(run.report).get('guest') ?? 0);
  }
  const scale = scaleRuns > 0 ? await scaleSeries(LAUNCHERS['etcd-kvm deploy'], scaleRuns, (line) => console.error(line)) : [];
  const idle = await guestIdleCpu();
  const load = (await $`cat /proc/loadavg`).stdout.split(' ').slice(0, 3).join(' ');

  const slowest = bounds.map((bound) => Math.max(...Object.values(bound)));
  const slowestVm = median(slowest);
  const coldMedian = median(cold.map((c) => c.ms));
  const steps = [...(cold[0]?.steps.keys() ?? [])];
  const cpu = cpus()[0]?.model ?? 'unknown CPU';
  console.log(
    `Measured ${new Date().toISOString().slice(0, 10)} on ${cpus().length} × ${cpu}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}, QEMU TCG (no KVM).\n`,
  );
  console.log('| what | median | runs |');
  console.log('|---|---|---|');
  // --cold 0: the warm runs only, on the cluster the lab has.
  if (coldRuns > 0) {
    console.log(`| cold deploy, 3 members (total) | ${seconds(coldMedian)} | ${cold.map((c) => seconds(c.ms)).join(', ')} |`);
    for (const step of steps)
      console.log(`| &nbsp;&nbsp;step ${step} (slowest host) | ${seconds(median(cold.map((c) => c.steps.get(step) ?? 0)))} | |`);
    console.log(`| lower bound: slowest VM, virsh start → etcd healthy | ${seconds(slowestVm)} | ${slowest.map(seconds).join(', ')} |`);
  }
  console.log(
    `| guest step in a no-op (slowest member: what is left of its probe, asked from the cluster phase on) | ${seconds(median(guestStep))} | ${guestStep.map(seconds).join(', ')} |`,
  );
  console.log(`\n${INVENTORY}, ${Object.keys(MEMBERS).length} members\n`);
  console.log(
    "| warm run | started with | total | start-up | the tool's work | of it outside the phases (named) | of it unaccounted | totals of the runs |",
  );
  console.log('|---|---|---|---|---|---|---|---|');
  const row = (what: string, launcher: string, runs: Timed) =>
    console.log(
      `| ${what} | ${launcher} | ${seconds(median(runs.total))} | ${seconds(median(runs.startup))} | ${seconds(median(runs.work))} | ${seconds(median(runs.outside))} | ${seconds(median(runs.unaccounted))} | ${runs.total.map(seconds).join(', ')} |`,
    );
  for (const launcher of Object.keys(LAUNCHERS) as Launcher[]) row('no-op re-run', `\`${launcher}\``, noop[launcher]);
  for (const launcher of Object.keys(LAUNCHERS) as Launcher[]) row('dry-run', `\`${launcher}\``, dry[launcher]);
  row('no-op without the guest step (`--skip-tags guest`)', '`node --import tsx`', noopNoGuest);
  row('no-op with it, interleaved with the row above', '`node --import tsx`', noopWithGuest);
  const work = median(Object.values(noop).flatMap((runs) => runs.work));
  console.log(
    `\nThe tool's own work in a no-op (start-up excluded, every launcher): ${seconds(work)} median, target ≤ 1.50 s: ${work <= 1_500 ? 'met' : 'NOT met'}.`,
  );
  const installed = noop['etcd-kvm deploy'];
  const verdict = (met: boolean) => (met ? 'met' : 'NOT met');
  console.log(
    `The installed command's no-op: ${seconds(median(installed.total))} in all, start-up ${seconds(median(installed.startup))}, the tool's work ${seconds(median(installed.work))} (issue 29's targets ≤ 1.5 / 0.3 / 1.0 s: ${verdict(median(installed.total) <= 1_500)}, ${verdict(median(installed.startup) <= 300)}, ${verdict(median(installed.work) <= 1_000)}); the guests' CPU above idle per member: ${Math.round(median(installedGuestCpu))} ms (${installedGuestCpu.map(Math.round).join(', ')}).`,
  );
  const unnamed = median(installed.unaccounted);
  console.log(
    `Of the installed command's no-op, outside the phases and named by nothing: ${seconds(unnamed)} (issue 51's target ≤ 0.10 s: ${verdict(unnamed <= 100)}).`,
  );
  if (scale.length > 0) printScale(scale);
  const added = median(noopWithGuest.total) - median(noopNoGuest.total);
  console.log(
    `The guest step adds ${seconds(added)} to a no-op's median (interleaved runs), target ≤ 1.50 s: ${added <= 1_500 ? 'met' : 'NOT met'}.`,
  );
  if (coldRuns > 0)
    console.log(
      `Cold deploy / lower bound: ${(coldMedian / slowestVm).toFixed(2)}, target ≤ 1.10: ${coldMedian / slowestVm <= 1.1 ? 'met' : 'NOT met'}.`,
    );
  console.log(
    `\nLoad average at the end: ${load}; the idle guests used ${shares(idleBefore)} of a core each before the warm runs and ${shares(idle)} at the end (QEMU's CPU time over 5 s).`,
  );
}

await main();
