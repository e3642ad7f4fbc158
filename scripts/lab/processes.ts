import { existsSync, readFileSync, rmSync } from 'node:fs';

/** Daemons the lab started, tracked by PID file; a PID file whose process is gone (a killed run) is stale. */

export function livePid(pidFile: string, command: string): number | undefined {
  if (!existsSync(pidFile)) return undefined;
  const pid = Number.parseInt(readFileSync(pidFile, 'utf8').trim(), 10);
  if (Number.isInteger(pid) && pid > 0 && processCommand(pid) === command) return pid;
  rmSync(pidFile, { force: true });
  return undefined;
}

export function processCommand(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return undefined;
  }
}

export const isAlive = (pid: number): boolean => processCommand(pid) !== undefined && !isZombie(pid);

function isZombie(pid: number): boolean {
  try {
    return /^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, 'utf8'));
  } catch {
    return true;
  }
}

/** SIGTERM, then SIGKILL after `graceMs`; resolves when the process is gone. */
export async function stopProcess(pid: number, graceMs = 5_000): Promise<void> {
  const signal = (name: NodeJS.Signals) => {
    try {
      process.kill(pid, name);
    } catch {
      // already gone
    }
  };
  signal('SIGTERM');
  const deadline = Date.now() + graceMs;
  while (isAlive(pid) && Date.now() < deadline) await sleep(100);
  if (isAlive(pid)) signal('SIGKILL');
  while (isAlive(pid)) await sleep(50);
}

export async function stopByPidFile(pidFile: string, command: string): Promise<boolean> {
  const pid = livePid(pidFile, command);
  if (pid !== undefined) await stopProcess(pid);
  rmSync(pidFile, { force: true });
  return pid !== undefined;
}

/** Polls `ready` until it resolves true or `timeoutMs` passes. */
export async function waitFor(what: string, ready: () => Promise<boolean> | boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await ready())) {
    if (Date.now() > deadline) throw new Error(`lab: ${what} not ready after ${timeoutMs / 1000} s`);
    await sleep(200);
  }
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
