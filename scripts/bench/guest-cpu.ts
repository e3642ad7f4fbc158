import { readFileSync } from 'node:fs';
import { $ } from 'zx';

/**
 * The guests' CPU as this machine sees it: each member's QEMU process (both lab hypervisors run
 * here), found by the `guest=NAME` of its command line, and its user + system time from /proc (every
 * thread's, those ended included). What a run costs the guests is their time during it less what
 * they use idle over as long.
 */

/** Clock ticks are 1/100 s on Linux. */
const TICK_MS = 10;

export async function qemuPids(names: readonly string[]): Promise<Map<string, string>> {
  const lines = (await $`pgrep -af qemu-system`.nothrow().quiet()).stdout.split('\n');
  const pids = new Map<string, string>();
  for (const line of lines) {
    const name = /-name guest=([^,\s]+)/.exec(line)?.[1];
    if (name && names.includes(name)) pids.set(name, line.split(' ')[0]!);
  }
  return pids;
}

/** The processes' CPU time so far, in ms. */
export function cpuMs(pids: Map<string, string>): number {
  let ticks = 0;
  for (const pid of pids.values()) {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    ticks += Number(fields[11]) + Number(fields[12]);
  }
  return ticks * TICK_MS;
}

/** The guests' CPU per ms of wall-clock time while idle, over `ms`. */
export async function idleRate(pids: Map<string, string>, ms = 5_000): Promise<number> {
  const before = cpuMs(pids);
  const started = performance.now();
  await new Promise((resolve) => setTimeout(resolve, ms));
  return (cpuMs(pids) - before) / (performance.now() - started);
}

/** `run`, and the guests' CPU it cost above their idle rate, per guest. */
export async function withGuestCpu<T>(
  pids: Map<string, string>,
  rate: number,
  run: () => Promise<T>,
): Promise<{ result: T; perGuestMs: number }> {
  const before = cpuMs(pids);
  const started = performance.now();
  const result = await run();
  const used = cpuMs(pids) - before - rate * (performance.now() - started);
  return { result, perGuestMs: used / Math.max(pids.size, 1) };
}
