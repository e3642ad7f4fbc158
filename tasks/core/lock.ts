import { randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, linkSync, openSync, readFileSync, readlinkSync, rmSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { dirname, join } from 'node:path';
import { ensurePrivateDir, PRIVATE_FILE_MODE } from './files.ts';

/**
 * One run at a time per state directory: a lock file, holding who took it, made before anything is
 * read. A second run fails at once naming the holder; a lock whose process is gone (this host, no
 * such PID) is taken over, and the caller says so.
 *
 * The lock file is never seen empty or half-written: the holder is written to a private temporary
 * file first, and link() puts it in place, which fails when the lock exists (an exclusive create
 * with its content). So a lock file that does not read as a holder is not one this version makes
 * while taking it, and is never judged stale. Taking over a stale lock is serialised by a second
 * lock made the same way (run.lock.takeover): under it the stale file is checked to be still the
 * one judged stale, removed, and the new lock linked, which a run arriving at the same time can
 * win instead; either way exactly one run holds the lock.
 */

export interface LockHolder {
  pid: number;
  host: string;
  since: string;
  /** Where its PID means that process (processScope); absent in a holder written by an older version. */
  scope?: string;
}

export class LockHeldError extends Error {}

const LOCK_FILE = 'run.lock';
const TAKEOVER_FILE = 'run.lock.takeover';

/** Is a process with this PID running on this host? */
export function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists, owned by someone else.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

let scope: string | undefined | null = null;

/**
 * Where this process's PIDs mean something: the running kernel (its boot ID) and its PID namespace. Host names
 * repeat (CI runners, containers, VMs cloned from one image), so a holder is judged by its scope, never by its host's
 * name. Undefined where /proc does not say: then no holder is ever judged gone.
 */
export function processScope(): string | undefined {
  if (scope === null) {
    try {
      scope = `${readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim()} ${readlinkSync('/proc/self/ns/pid')}`;
    } catch {
      scope = undefined;
    }
  }
  return scope;
}

/** A holder whose run is gone: written in this process's scope (its PID means the same process here), and no such process. */
export function goneHere(holder: { pid: number; scope?: string | undefined }): boolean {
  const here = processScope();
  return here !== undefined && holder.scope === here && holder.pid !== process.pid && !processExists(holder.pid);
}

const errorCode = (error: unknown): string | undefined => (error as NodeJS.ErrnoException).code;

/** The holder written to a private temporary file, flushed, so a link of it shows the whole holder at once. */
function writeHolderFile(stateDir: string, holder: LockHolder): string {
  const path = join(stateDir, `${LOCK_FILE}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`);
  const fd = openSync(path, 'wx', PRIVATE_FILE_MODE);
  try {
    writeSync(fd, `${JSON.stringify(holder)}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  return path;
}

/** Links `from` to `to` unless `to` exists: true when this call made it. */
function linkExclusive(from: string, to: string): boolean {
  try {
    linkSync(from, to);
    return true;
  } catch (error) {
    if (errorCode(error) === 'EEXIST') return false;
    throw error;
  }
}

/** The file's text, or undefined when it is gone. */
function readText(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    if (errorCode(error) === 'ENOENT') return undefined;
    throw error;
  }
}

function parseHolder(text: string): LockHolder | undefined {
  try {
    const holder = JSON.parse(text) as Partial<LockHolder>;
    if (typeof holder.pid === 'number' && typeof holder.host === 'string' && typeof holder.since === 'string')
      return {
        pid: holder.pid,
        host: holder.host,
        since: holder.since,
        ...(typeof holder.scope === 'string' ? { scope: holder.scope } : {}),
      };
  } catch {
    // Not a holder: said by the caller.
  }
  return undefined;
}

/**
 * Gone: in this scope, and no such process. A holder elsewhere (another
 * machine or container, whatever its name) cannot be checked from here.
 */
const isStale = (holder: LockHolder): boolean => goneHere(holder);

function heldError(path: string, holder: LockHolder): LockHeldError {
  const here = holder.scope !== undefined && holder.scope === processScope();
  return new LockHeldError(
    `another run holds ${path}: PID ${holder.pid} on ${holder.host} since ${holder.since}. Wait for it to finish` +
      `${here ? '' : `, or remove the file if that run on ${holder.host} is gone`}.`,
  );
}

function unreadableError(path: string): LockHeldError {
  // A run of an older version writes its lock after creating it: empty for a moment, so it may be live.
  return new LockHeldError(
    `${path} does not name a run (empty or damaged; a run may be taking it right now). If no run is going, remove the file and run again.`,
  );
}

type Attempt = { won: true; tookOverFrom?: LockHolder } | { won: false; retry: true };

/**
 * Under the takeover lock: the lock file is removed only if it is still the very text judged stale,
 * then ours is linked. Returns retry when the lock changed or vanished meanwhile (look again).
 */
function takeOver(path: string, mine: string, staleText: string, stale: LockHolder): Attempt {
  const guard = join(dirname(path), TAKEOVER_FILE);
  if (!linkExclusive(mine, guard)) {
    const text = readText(guard);
    if (text === undefined) return { won: false, retry: true };
    const taker = parseHolder(text);
    if (taker && isStale(taker)) {
      // Left by a run killed while taking over (a few milliseconds): removing it safely would need a third lock.
      throw new LockHeldError(
        `${guard} was left by a run that is gone (PID ${taker.pid}) ` +
          `while it took over ${path}. If no run is going, remove both files and run again.`,
      );
    }
    throw new LockHeldError(
      `another run${taker ? ` (PID ${taker.pid} on ${taker.host})` : ''} is ` +
        `taking over the stale lock ${path} right now; run again when it is done.`,
    );
  }
  try {
    if (readText(path) !== staleText) return { won: false, retry: true };
    rmSync(path);
    // A run arriving now may link first: then it holds the lock and this one looks again.
    return linkExclusive(mine, path) ? { won: true, tookOverFrom: stale } : { won: false, retry: true };
  } finally {
    rmSync(guard, { force: true });
  }
}

/** One look at the lock: take it if free, take it over if stale, or fail naming who holds it. */
function attempt(path: string, mine: string): Attempt {
  if (linkExclusive(mine, path)) return { won: true };
  const text = readText(path);
  if (text === undefined) return { won: false, retry: true };
  const holder = parseHolder(text);
  if (!holder) throw unreadableError(path);
  if (!isStale(holder)) throw heldError(path, holder);
  return takeOver(path, mine, text, holder);
}

/** Looks again this many times when the lock changes under a look (each change is another run's progress). */
const MAX_LOOKS = 20;

export class RunLock {
  private constructor(
    readonly path: string,
    /** The holder whose stale lock this run took over, if any. */
    readonly tookOverFrom: LockHolder | undefined,
  ) {}

  static acquire(stateDir: string): RunLock {
    ensurePrivateDir(stateDir);
    const path = join(stateDir, LOCK_FILE);
    const here = processScope();
    const mine = writeHolderFile(stateDir, {
      pid: process.pid,
      host: hostname(),
      since: new Date().toISOString(),
      ...(here !== undefined ? { scope: here } : {}),
    });
    try {
      for (let look = 0; look < MAX_LOOKS; look += 1) {
        const result = attempt(path, mine);
        if (result.won) return new RunLock(path, result.tookOverFrom);
      }
      throw new LockHeldError(`${path} kept changing while this run looked at it (other runs starting); run again.`);
    } finally {
      rmSync(mine, { force: true });
    }
  }

  release(): void {
    const holder = parseHolder(readText(this.path) ?? '');
    if (holder?.pid === process.pid && holder.host === hostname()) rmSync(this.path, { force: true });
  }
}
