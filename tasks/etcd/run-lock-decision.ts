import { hostname } from 'node:os';
import { firstLineOf } from '../core/errors.ts';
import { forDisplay } from '../core/display.ts';
import { processScope } from '../core/lock.ts';
import { DEFRAG_LOCK_KEY } from '../inventory/lock-keys.ts';

/**
 * One run at a time across machines. The run lock file (core/lock.ts) keeps out runs of the same
 * state directory only; two clones of it (it is meant to be shared through git) would both run, and
 * two rolls could restart two members at once. The managed cluster is itself a lock service: while it
 * answers, a run that changes anything also holds a key in it, created only if it does not exist
 * (createRevision == 0, in one transaction) and attached to a lease the run keeps alive. A run that
 * ends revokes the lease; a killed one's lease expires within its TTL, and the key with it. While etcd
 * does not answer (a first deploy, an outage, or auth not enabled yet in password mode) the lock file
 * is all there is, and the run says so.
 *
 * A deploy takes the key only before its first change, so a run that finds nothing to change writes
 * nothing to etcd (a grant, a transaction and a revoke are raft writes: most of a no-op's time under
 * emulation). It looks first, before reading anything it plans from: a held key refuses it at once,
 * and the epoch key (put by every acquisition, in the same transaction) tells whether another run took
 * the lock since. The acquisition compares that epoch with the one seen: a run overtaken in between
 * (whose facts may predate the other's changes) is refused before its first change.
 */

/** The lease's TTL: how long a killed run's lock outlives it. Kept alive every third of it. */
export const RUN_LOCK_TTL_S = 30;

/** Who holds the lock: the key's value, read by a run it refuses. */
export interface RunLockHolder {
  host: string;
  pid: number;
  since: string;
  command: string;
  /** Where its PID means that process (core/lock.ts processScope): a run is judged gone by it, never by its host's name. */
  scope?: string;
}

export const thisRun = (command: string): RunLockHolder => {
  const scope = processScope();
  return { host: hostname(), pid: process.pid, since: new Date().toISOString(), command, ...(scope !== undefined ? { scope } : {}) };
};

export const holderRecord = (holder: RunLockHolder): string => JSON.stringify(holder);

export function parseHolderRecord(text: string): RunLockHolder | undefined {
  try {
    const record = JSON.parse(text) as Partial<RunLockHolder>;
    const { host, pid, since, command, scope } = record;
    if (typeof host === 'string' && typeof pid === 'number' && typeof since === 'string' && typeof command === 'string')
      return { host, pid, since, command, ...(typeof scope === 'string' ? { scope } : {}) };
  } catch {
    // Not a holder: the refusal says so.
  }
  return undefined;
}

/** What etcd answered to the lock's transaction, or what kept it from answering. */
export type LockAnswer =
  | { created: true }
  /** The key exists: its value, and its lease ('0': none). */
  | { created: false; value: string; lease: string }
  /** The key is free, but another run took it (and may have let it go) since this run looked: its record. */
  | { created: false; overtakenBy: string }
  /** The key is free, but a member's scheduled defragmentation holds its lock (DEFRAG_LOCK_KEY): that member. */
  | { created: false; defragBy: string }
  | { failed: unknown };

export type LockDecision =
  | { kind: 'acquired' }
  | { kind: 'refused'; holder: RunLockHolder | undefined; message: string }
  /** Not now: a scheduled defragmentation is under way (it ends within minutes); asked again until patience runs out. */
  | { kind: 'busy'; why: string }
  | { kind: 'local-only'; why: string };

/** An error's first line, or each distinct one of a Promise.any's errors. */
export function firstLines(error: unknown): string[] {
  if (error instanceof AggregateError) return [...new Set(error.errors.flatMap(firstLines))];
  return [firstLineOf(error)];
}

/** Why etcd could not take the lock, in an operator's words. */
export function whyUnanswered(error: unknown): string {
  const lines = firstLines(error);
  // Password mode before the auth step: root cannot log in yet (certificate mode needs no login).
  if (lines.some((line) => /authentication is not enabled/i.test(line)))
    return 'etcd has no authentication enabled yet, so root cannot take its lock';
  const said = lines.join('; ').slice(0, 300);
  // etcd's own refusals (a wrong root password, a permission) carry its prefix: it answered, and said no.
  if (lines.some((line) => line.includes('etcdserver:'))) return `etcd answers but would not take the lock (${said})`;
  return `etcd does not answer (${said})`;
}

/** A holder's record, in an operator's words. */
function describeHolder(value: string): { holder: RunLockHolder | undefined; who: string } {
  const holder = parseHolderRecord(value);
  const who = holder
    ? `${forDisplay(holder.command)} by PID ${holder.pid} on ${forDisplay(holder.host)} since ${forDisplay(holder.since)}`
    : `a holder this version cannot read (${forDisplay(value).slice(0, 200)})`;
  return { holder, who };
}

export function refusal(key: string, value: string, lease: string, ttlS: number): Extract<LockDecision, { kind: 'refused' }> {
  const { holder, who } = describeHolder(value);
  // A key with no lease was not made by a run: it never expires by itself.
  const gone =
    lease === '0'
      ? `the key has no lease and never expires: if no run is going, remove it (etcdctl del ${key})`
      : `if that run is gone, the lock expires by itself within ${ttlS} s`;
  return {
    kind: 'refused',
    holder,
    message: `another run holds the cluster's run lock in etcd (${key}): ${who}. Wait for it to finish; ${gone}.`,
  };
}

/** Another run took the lock after this one looked: what this run read may predate its changes. */
function overtaken(key: string, value: string): Extract<LockDecision, { kind: 'refused' }> {
  const { holder, who } = describeHolder(value);
  return {
    kind: 'refused',
    holder,
    message:
      `another run took the cluster's run lock in etcd (${key}) after this run read the cluster: ` +
      `${who}. It may have changed what this run read, so this run changed nothing; run it again.`,
  };
}

/** The decision from etcd's answer: held, refused naming the holder, or only the local lock file. */
export function decideLock(answer: LockAnswer, key: string, ttlS = RUN_LOCK_TTL_S): LockDecision {
  if ('failed' in answer) return { kind: 'local-only', why: whyUnanswered(answer.failed) };
  if (answer.created) return { kind: 'acquired' };
  if ('overtakenBy' in answer) return overtaken(key, answer.overtakenBy);
  if ('defragBy' in answer)
    return {
      kind: 'busy',
      why: `${forDisplay(answer.defragBy).slice(0, 100)} is defragmenting its database on its schedule (it holds ${DEFRAG_LOCK_KEY})`,
    };
  return refusal(key, answer.value, answer.lease, ttlS);
}
