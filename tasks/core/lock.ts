import { closeSync, openSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { ensurePrivateDir, PRIVATE_FILE_MODE } from './files.ts';

/**
 * One run at a time per state directory: a lock file created exclusively before anything is read,
 * holding who took it. A second run fails at once naming the holder; a lock whose process is gone
 * (this host, no such PID) is taken over, and the caller says so.
 */

export interface LockHolder {
  pid: number;
  host: string;
  since: string;
}

export class LockHeldError extends Error {}

const LOCK_FILE = 'run.lock';

function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists, owned by someone else.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export class RunLock {
  private constructor(
    readonly path: string,
    /** The holder whose stale lock this run took over, if any. */
    readonly tookOverFrom: LockHolder | undefined,
  ) {}

  static acquire(stateDir: string): RunLock {
    ensurePrivateDir(stateDir);
    const path = join(stateDir, LOCK_FILE);
    const me: LockHolder = { pid: process.pid, host: hostname(), since: new Date().toISOString() };
    try {
      const fd = openSync(path, 'wx', PRIVATE_FILE_MODE);
      writeSync(fd, `${JSON.stringify(me)}\n`);
      closeSync(fd);
      return new RunLock(path, undefined);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    let holder: LockHolder | undefined;
    try {
      holder = JSON.parse(readFileSync(path, 'utf8')) as LockHolder;
    } catch {
      // Unreadable or half-written by a run killed while taking it: nobody holds it.
    }
    if (holder && (holder.host !== hostname() || processExists(holder.pid))) {
      throw new LockHeldError(
        `another run holds ${path}: PID ${holder.pid} on ${holder.host} since ${holder.since}. Wait for it to finish` +
          `${holder.host === hostname() ? '' : `, or remove the file if that run on ${holder.host} is gone`}.`,
      );
    }
    // Stale: replaced atomically, so two runs taking over at once cannot both win.
    const mine = `${path}.${process.pid}`;
    const fd = openSync(mine, 'wx', PRIVATE_FILE_MODE);
    writeSync(fd, `${JSON.stringify(me)}\n`);
    closeSync(fd);
    renameSync(mine, path);
    const now = JSON.parse(readFileSync(path, 'utf8')) as LockHolder;
    if (now.pid !== process.pid) throw new LockHeldError(`another run took over the stale lock ${path} at the same moment: PID ${now.pid}`);
    return new RunLock(path, holder ?? { pid: 0, host: 'unknown', since: 'unknown' });
  }

  release(): void {
    try {
      const holder = JSON.parse(readFileSync(this.path, 'utf8')) as LockHolder;
      if (holder.pid === process.pid) rmSync(this.path);
    } catch {
      // Already gone.
    }
  }
}
