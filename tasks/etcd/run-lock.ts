import { hostname } from 'node:os';
import { setTimeout as delay } from 'node:timers/promises';
import type { Etcd3 } from 'etcd3';
import { firstLineOf } from '../core/errors.ts';
import { forDisplay } from '../core/display.ts';
import { goneHere, LockHeldError, processScope } from '../core/lock.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { HypervisorConnections } from '../remote/hypervisors.ts';
import { EtcdClients, type ClientIdentity } from './client.ts';
import { DEFRAG_LOCK_KEY, runLockEpochKey, runLockKey } from '../inventory/lock-keys.ts';

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

/** How long the members have to answer before the lock is taken as unavailable: a live member answers in milliseconds. */
const ANSWER_MS = 5_000;

export { RUN_LOCK_PREFIX, runLockEpochKey, runLockKey } from '../inventory/lock-keys.ts';

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
function firstLines(error: unknown): string[] {
  if (error instanceof AggregateError) return [...new Set(error.errors.flatMap(firstLines))];
  return [firstLineOf(error)];
}

/** Why etcd could not take the lock, in an operator's words. */
function whyUnanswered(error: unknown): string {
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

function refusal(key: string, value: string, lease: string, ttlS: number): Extract<LockDecision, { kind: 'refused' }> {
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
    message: `another run took the cluster's run lock in etcd (${key}) after this run read the cluster: ${who}. It may have changed what this run read, so this run changed nothing; run it again.`,
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

/** `promise`, or a rejection after `ms` (an unreferenced timer: it never keeps the process alive). */
async function within<T>(ms: number, what: string, promise: Promise<T>): Promise<T> {
  const timeout = delay(ms, undefined, { ref: false }).then(() => {
    throw new Error(`${what}: no answer within ${ms / 1000} s`);
  });
  return Promise.race([promise, timeout]);
}

/** Renews the lease once: its remaining TTL in seconds (0: gone from etcd, expired or revoked). */
async function keepAliveOnce(client: Etcd3, leaseId: string, ms: number): Promise<number> {
  const stream = await client.leaseClient.leaseKeepAlive();
  const answered = new Promise<number>((resolve, reject) => {
    stream.on('data', (response) => resolve(Number(response.TTL)));
    stream.on('error', reject);
    stream.write({ ID: leaseId });
  });
  try {
    const ttl = await within(ms, 'lease keep-alive', answered);
    // Answered: closed our side, etcd ends the stream.
    stream.end();
    return ttl;
  } catch (error) {
    // Unanswered: the stream would otherwise wait for its own (hour-long) deadline.
    stream.cancel();
    throw error;
  }
}

/**
 * The clients the lock asks etcd through, as root. Either the run's own (shared: the lock's calls open
 * the connections the run's later checks use, and the run closes them), or the lock's own, closed
 * for good (an open still under way then is closed as it finishes: EtcdClients.close()).
 */
class LockClients {
  constructor(
    readonly clients: EtcdClients,
    readonly identity: () => ClientIdentity,
    readonly shared: boolean,
  ) {}

  for(member: Member): Promise<Etcd3> {
    return this.clients.for(member, this.identity());
  }

  close(): void {
    if (!this.shared) this.clients.close();
  }
}

export interface ClusterRunLockOptions {
  connections: HypervisorConnections;
  clientPort: number;
  /** The run's own clients, shared with the lock (the run closes them); without, the lock opens and closes its own. */
  clients?: EtcdClients;
  /** root's: the tool's prefix is root's alone once auth is on. */
  identity: () => ClientIdentity;
  /** Every member the lock may be asked through, in order. */
  members: readonly Member[];
  cluster: string;
  holder: RunLockHolder;
  ttlS?: number;
  /** How long a member has to answer one call (tests shorten it). */
  answerMs?: number;
  /** Once, when the run stops holding the lock before its end (its lease gone, or not renewed for a TTL). */
  onLost: (why: string) => void;
  /** The epoch the run's look saw: the acquisition is refused if another run took the lock since. */
  epoch?: string;
}

/** A lock this run holds: kept alive until release. */
export class HeldRunLock {
  #timer: NodeJS.Timeout | undefined;
  #released = false;
  #lost = false;
  /** When the last renewal (or the grant) that etcd answered was sent: etcd's expiry is at least a TTL after it. */
  #renewedAt: number;
  /** The member that answered last: asked first next time. */
  #current: number;
  /** The renewal under way, if any: release closes the clients again once it settles. */
  #renewing: Promise<void> | undefined;

  constructor(
    readonly key: string,
    readonly leaseId: string,
    private readonly clients: LockClients,
    private readonly options: Required<Pick<ClusterRunLockOptions, 'members' | 'ttlS' | 'answerMs' | 'onLost'>>,
    { answering, renewedAt }: { answering: number; renewedAt: number },
  ) {
    this.#current = answering;
    this.#renewedAt = renewedAt;
    this.#schedule(this.#interval);
  }

  /** A third of the TTL, as etcd's own clients renew. */
  get #interval(): number {
    return (this.options.ttlS * 1000) / 3;
  }

  #schedule(ms: number): void {
    // Unreferenced: the keep-alive never keeps the process alive after the run.
    this.#timer = setTimeout(() => (this.#renewing = this.#renew()), ms).unref();
  }

  /** The members in turn, the one that answered last first: a roll restarts each member once. */
  get #rotation(): number[] {
    const count = this.options.members.length;
    return Array.from({ length: count }, (_, i) => (this.#current + i) % count);
  }

  async #renew(): Promise<void> {
    for (const index of this.#rotation) {
      if (this.#released) return;
      const sent = Date.now();
      try {
        const client = await within(this.options.answerMs, 'etcd', this.clients.for(this.options.members[index]!));
        const ttl = await keepAliveOnce(client, this.leaseId, this.options.answerMs);
        if (this.#released) return;
        if (ttl <= 0) return this.#lose(`etcd says its lease expired or was revoked`);
        this.#renewedAt = sent;
        this.#current = index;
        return this.#schedule(this.#interval);
      } catch {
        // The next member: this one may be restarting.
      }
    }
    if (this.#released) return;
    if (Date.now() - this.#renewedAt >= this.options.ttlS * 1000)
      return this.#lose(`no member renewed its lease for ${this.options.ttlS} s`);
    // Sooner than usual: the lease has less than a TTL left.
    this.#schedule(1_000);
  }

  #lose(why: string): void {
    this.#lost = true;
    this.options.onLost(`lost the cluster's run lock (${this.key}): ${why}`);
  }

  /** The member the lease was last renewed through. */
  get renewingThrough(): string {
    return this.options.members[this.#current]!.name;
  }

  get lost(): boolean {
    return this.#lost;
  }

  /** Revokes the lease (the key goes with it); a problem is returned, the lock then expiring within the TTL. */
  async release(): Promise<string | undefined> {
    if (this.#released) return undefined;
    this.#released = true;
    clearTimeout(this.#timer);
    try {
      for (const index of this.#rotation) {
        try {
          const client = await within(this.options.answerMs, 'etcd', this.clients.for(this.options.members[index]!));
          await within(this.options.answerMs, 'lease revoke', client.leaseClient.leaseRevoke({ ID: this.leaseId }));
          return undefined;
        } catch (error) {
          // A lease already gone is released.
          if (/requested lease not found/i.test(firstLines(error).join(' '))) return undefined;
        }
      }
      return `could not release the cluster's run lock (${this.key}): no member answered; it expires by itself within ${this.options.ttlS} s`;
    } finally {
      this.clients.close();
      // A renewal under way may still open a member's client: closed again once it is done.
      void this.#renewing?.finally(() => this.clients.close());
    }
  }
}

export type Acquisition = { kind: 'acquired'; lock: HeldRunLock } | Exclude<LockDecision, { kind: 'acquired' }>;

/** The first member whose etcd answers, with its client and position. */
async function firstAnswering(clients: LockClients, members: readonly Member[], ms: number): Promise<{ client: Etcd3; index: number }> {
  const asks = members.map(async (member, index) => {
    const client = await clients.for(member);
    await client.maintenance.status({});
    return { client, index };
  });
  return within(ms, 'etcd', Promise.any(asks));
}

/**
 * The lock's transaction on one member: our record on our lease, and in the epoch key, unless the key
 * exists (then its record and lease), a scheduled defragmentation holds its lock (then the member), or,
 * when `epoch` is given, the epoch moved since it was seen (then the record of the run that moved it).
 */
async function createOrRead(client: Etcd3, keys: LockKeys, value: string, leaseId: string, epoch?: string): Promise<LockAnswer> {
  const [keyBytes, epochBytes, defragBytes] = [Buffer.from(keys.lock), Buffer.from(keys.epoch), Buffer.from(DEFRAG_LOCK_KEY)];
  const response = await client.kv.txn({
    compare: [
      { key: keyBytes, target: 'Create', result: 'Equal', create_revision: 0 },
      // No scheduled defragmentation under way: the agent takes its lock only while this key is absent, likewise.
      { key: defragBytes, target: 'Create', result: 'Equal', create_revision: 0 },
      // A key that does not exist compares as revision 0.
      ...(epoch === undefined ? [] : [{ key: epochBytes, target: 'Mod' as const, result: 'Equal' as const, mod_revision: epoch }]),
    ],
    success: [
      { request_put: { key: keyBytes, value: Buffer.from(value), lease: leaseId } },
      { request_put: { key: epochBytes, value: Buffer.from(value) } },
    ],
    failure: [{ request_range: { key: keyBytes } }, { request_range: { key: epochBytes } }, { request_range: { key: defragBytes } }],
  });
  if (response.succeeded) return { created: true };
  const existing = response.responses[0]?.response_range.kvs[0];
  if (existing) return { created: false, value: existing.value.toString(), lease: existing.lease };
  const defragmenting = response.responses[2]?.response_range.kvs[0];
  if (defragmenting) return { created: false, defragBy: defragmenting.value.toString() };
  return { created: false, overtakenBy: response.responses[1]?.response_range.kvs[0]?.value.toString() ?? '(no record)' };
}

interface LockKeys {
  lock: string;
  epoch: string;
}

const lockKeys = (cluster: string): LockKeys => ({ lock: runLockKey(cluster), epoch: runLockEpochKey(cluster) });

/**
 * The lock as a run finds it: the key's record and lease if held, and the epoch's revision ('0': never
 * taken). Serializable (the answering member's own state, no round to the leader): one transaction puts
 * both keys, so any member shows both or neither, and a member behind can only make the acquisition
 * refuse (a lock it did not show yet, or an older epoch), never let an overtaken run through.
 */
async function readLock(client: Etcd3, keys: LockKeys): Promise<{ held?: { value: string; lease: string }; epoch: string }> {
  const response = await client.kv.txn({
    compare: [],
    success: [
      { request_range: { key: Buffer.from(keys.lock), serializable: true } },
      { request_range: { key: Buffer.from(keys.epoch), serializable: true } },
    ],
    failure: [],
  });
  const [held, epoch] = response.responses.map((answer) => answer.response_range.kvs[0]);
  return { ...(held ? { held: { value: held.value.toString(), lease: held.lease } } : {}), epoch: epoch?.mod_revision ?? '0' };
}

/**
 * The key is held, on a lease, by a run of this process's scope whose process is gone. Not by a host's name: another
 * machine of the same name (CI runners, containers) holds PIDs this one cannot see, and its run may be alive.
 */
function heldByDeadRunHere(answer: { value: string; lease: string }): boolean {
  const holder = parseHolderRecord(answer.value);
  return answer.lease !== '0' && holder !== undefined && goneHere(holder);
}

/** Whether root's identity can be presented at all: a CA to verify members with, and a certificate where one is used. */
const hasCredentials = (identity: ClientIdentity): boolean => identity.caCert !== '' && identity.cert !== '';

/** Revokes a lease, within `ms`; a failure is left to the lease's TTL. */
const revokeQuietly = (client: Etcd3, leaseId: string, ms: number): Promise<unknown> =>
  within(ms, 'lease revoke', client.leaseClient.leaseRevoke({ ID: leaseId })).catch(() => undefined);

/** The clients the lock asks through: the run's own when given (shared), else its own. */
function lockClients(options: Pick<ClusterRunLockOptions, 'clients' | 'connections' | 'clientPort' | 'identity'>): LockClients {
  return new LockClients(
    options.clients ?? new EtcdClients(options.connections, options.clientPort, options.identity),
    options.identity,
    options.clients !== undefined,
  );
}

const FIRST_DEPLOY = 'no CA or root certificate in the state directory yet (a first deploy): etcd cannot be asked';

/**
 * Takes the cluster's run lock: held (kept alive until release), refused (another run holds it, or,
 * with `epoch`, took it since the run looked), or local-only (etcd did not answer, or would not take
 * it). Never throws: every failure is local-only.
 */
export async function acquireClusterRunLock(options: ClusterRunLockOptions): Promise<Acquisition> {
  const ttlS = options.ttlS ?? RUN_LOCK_TTL_S;
  const answerMs = options.answerMs ?? ANSWER_MS;
  const keys = lockKeys(options.cluster);
  // A first deploy has no certificates to ask etcd with yet (the pki step makes them), nor an etcd to ask.
  if (!hasCredentials(options.identity())) return { kind: 'local-only', why: FIRST_DEPLOY };
  const clients = lockClients(options);
  const record = holderRecord(options.holder);
  let granted: { client: Etcd3; leaseId: string } | undefined;
  let answer: LockAnswer;
  try {
    const { client, index } = await firstAnswering(clients, options.members, answerMs);
    const grantSent = Date.now();
    granted = { client, leaseId: (await within(answerMs, 'lease grant', client.leaseClient.leaseGrant({ TTL: ttlS }))).ID };
    const transaction = () => within(answerMs, 'lock transaction', createOrRead(client, keys, record, granted!.leaseId, options.epoch));
    answer = await transaction();
    if ('lease' in answer && heldByDeadRunHere(answer)) {
      // As for the lock file: a run of this host that is gone (killed) does not hold the cluster for its lease's TTL.
      // Revoking its lease deletes its key; if two runs do this at once, the transaction still lets one create it.
      await within(answerMs, 'lease revoke', client.leaseClient.leaseRevoke({ ID: answer.lease })).catch(() => undefined);
      answer = await transaction();
    }
    if ('created' in answer && answer.created) {
      return {
        kind: 'acquired',
        lock: new HeldRunLock(
          keys.lock,
          granted.leaseId,
          clients,
          { members: options.members, ttlS, answerMs, onLost: options.onLost },
          { answering: index, renewedAt: grantSent },
        ),
      };
    }
  } catch (error) {
    answer = { failed: error };
  }
  // Not held: the lease is revoked now (a transaction that timed out may still have put the key on it).
  if (granted) await revokeQuietly(granted.client, granted.leaseId, answerMs);
  clients.close();
  const decision = decideLock(answer, keys.lock, ttlS);
  // Only a created key is acquired, and that returned above.
  if (decision.kind === 'acquired') throw new Error('run lock: acquired without a created key');
  return decision;
}

/** What a run finds before reading anything it plans from: free (and the epoch to compare later), refused, or local-only. */
export type LockLook = { kind: 'free'; epoch: string } | Exclude<LockDecision, { kind: 'acquired' | 'busy' }>;

/**
 * Looks at the cluster's run lock without writing: one read-only transaction, answered by the first
 * member that answers. A key held by a run of this host that is gone counts as free (its acquisition
 * takes it over). Never throws.
 */
export async function lookAtClusterRunLock(options: Omit<ClusterRunLockOptions, 'holder' | 'onLost' | 'epoch'>): Promise<LockLook> {
  const answerMs = options.answerMs ?? ANSWER_MS;
  const keys = lockKeys(options.cluster);
  if (!hasCredentials(options.identity())) return { kind: 'local-only', why: FIRST_DEPLOY };
  const clients = lockClients(options);
  try {
    const asks = options.members.map(async (member) => readLock(await clients.for(member), keys));
    const { held, epoch } = await within(answerMs, 'etcd', Promise.any(asks));
    if (held && !heldByDeadRunHere(held)) return refusal(keys.lock, held.value, held.lease, options.ttlS ?? RUN_LOCK_TTL_S);
    return { kind: 'free', epoch };
  } catch (error) {
    return { kind: 'local-only', why: whyUnanswered(error) };
  } finally {
    clients.close();
  }
}

/** Another run holds the cluster's lock: exit 1, as for the lock file. */
export class ClusterRunLockHeldError extends LockHeldError {}

interface CliLockRun {
  connections: HypervisorConnections;
  identity: () => ClientIdentity;
  clients?: EtcdClients;
}

interface CliLockSay {
  command: string;
  say: (line: string) => void;
  onLost: (why: string) => void;
}

const localOnlyLine = (inventory: Inventory, why: string): string =>
  `lock: ${why}: only the lock in ${inventory.stateDir} holds this run (a run from another copy of it is not kept out)`;

/** The lock of a CLI's run, released through `say` (a problem releasing it is said, not thrown). */
function releasing(lock: HeldRunLock, say: (line: string) => void): { release(): Promise<void> } {
  return {
    async release() {
      const problem = await lock.release();
      if (problem) say(`lock: ${problem}`);
    },
  };
}

/**
 * For the CLIs: the lock held, or the run refused (ClusterRunLockHeldError), or undefined after one
 * line saying that only the state directory's lock holds the run. `say` also gets a release problem.
 */
export async function takeClusterRunLock(
  inventory: Inventory,
  run: CliLockRun,
  { command, say, onLost }: CliLockSay,
): Promise<{ release(): Promise<void> } | undefined> {
  const acquired = await unlessBusy(
    () =>
      acquireClusterRunLock({
        ...run,
        clientPort: inventory.etcd.client_port,
        members: inventory.members,
        cluster: inventory.cluster.name,
        holder: thisRun(command),
        onLost,
      }),
    { say },
  );
  if (acquired.kind === 'refused') throw new ClusterRunLockHeldError(acquired.message);
  if (acquired.kind === 'local-only') {
    say(localOnlyLine(inventory, acquired.why));
    return undefined;
  }
  return releasing(acquired.lock, say);
}

/** How long a run whose look etcd answered keeps asking for the lock before it refuses to change anything. */
export const ACQUIRE_AFTER_LOOK_MS = RUN_LOCK_TTL_S * 1000;

/**
 * How long a run waits for a member's scheduled defragmentation to end before it refuses: the agent holds
 * its lock for one member's defragmentation (tens of seconds under emulation, its unit's timeout an hour).
 */
export const DEFRAG_PATIENCE_MS = 180_000;

/**
 * The acquisition, asked again every `pauseMs` while a scheduled defragmentation is under way (said once
 * through `say`), and refused (ClusterRunLockHeldError, nothing changed) when it is still under way after
 * `patienceMs`: a deploy's roll and a defragmentation, which can move leadership, never run at once.
 */
export async function unlessBusy(
  acquire: () => Promise<Acquisition>,
  { patienceMs = DEFRAG_PATIENCE_MS, pauseMs = 2_000, say }: { patienceMs?: number; pauseMs?: number; say?: (line: string) => void } = {},
): Promise<Exclude<Acquisition, { kind: 'busy' }>> {
  const deadline = Date.now() + patienceMs;
  for (let said = false; ; said = true) {
    const acquired = await acquire();
    if (acquired.kind !== 'busy') return acquired;
    if (Date.now() >= deadline)
      throw new ClusterRunLockHeldError(
        `${acquired.why}, still after ${Math.round(patienceMs / 1000)} s: this run changed nothing; run it again once it has ended`,
      );
    if (!said) say?.(`lock: waiting: ${acquired.why}`);
    await delay(pauseMs);
  }
}

/**
 * The lock, for a run whose look etcd answered (so it may not go on with the local lock only): asked
 * again every `pauseMs` while etcd does not answer — most likely another run's roll restarting the
 * leader, which a run going on unlocked would collide with — and refused (ClusterRunLockHeldError,
 * nothing changed) when another run holds or took it, or when etcd has not answered by `patienceMs`.
 */
export async function acquireAfterLook(
  acquire: () => Promise<Acquisition>,
  {
    patienceMs = ACQUIRE_AFTER_LOOK_MS,
    pauseMs = 1_000,
    busy = {},
  }: { patienceMs?: number; pauseMs?: number; busy?: Parameters<typeof unlessBusy>[1] } = {},
): Promise<HeldRunLock> {
  const deadline = Date.now() + patienceMs;
  for (;;) {
    const acquired = await unlessBusy(acquire, busy);
    if (acquired.kind === 'acquired') return acquired.lock;
    if (acquired.kind === 'refused') throw new ClusterRunLockHeldError(acquired.message);
    if (Date.now() >= deadline)
      throw new ClusterRunLockHeldError(
        `etcd answered this run's look at the cluster's run lock but not its acquisition for ${Math.round(patienceMs / 1000)} s (${acquired.why}); another run may be changing the cluster, so this run changed nothing: run it again`,
      );
    await delay(pauseMs);
  }
}

/** The cluster's lock of a run that takes it before its first change (see the top of this file). */
export interface RunLockGate {
  /** Takes the lock (once; later calls get the same answer): throws ClusterRunLockHeldError when refused. */
  beforeFirstChange(): Promise<void>;
  release(): Promise<void>;
}

/**
 * For the deploy: looks at the lock now (a held one refuses the run at once: ClusterRunLockHeldError),
 * and takes it before the run's first change. Undefined, after one line, when only the state
 * directory's lock can hold the run.
 */
export async function lockBeforeFirstChange(
  inventory: Inventory,
  run: CliLockRun,
  { command, say, onLost }: CliLockSay,
): Promise<RunLockGate | undefined> {
  const where = { ...run, clientPort: inventory.etcd.client_port, members: inventory.members, cluster: inventory.cluster.name };
  const look = await lookAtClusterRunLock(where);
  if (look.kind === 'refused') throw new ClusterRunLockHeldError(look.message);
  if (look.kind === 'local-only') {
    say(localOnlyLine(inventory, look.why));
    return undefined;
  }
  let taking: Promise<{ release(): Promise<void> } | undefined> | undefined;
  const take = async () => {
    const lock = await acquireAfterLook(() => acquireClusterRunLock({ ...where, holder: thisRun(command), onLost, epoch: look.epoch }), {
      busy: { say },
    });
    return releasing(lock, say);
  };
  return {
    async beforeFirstChange() {
      taking ??= take();
      await taking;
    },
    async release() {
      const held = await taking?.catch(() => undefined);
      await held?.release();
    },
  };
}

/**
 * For the CLIs: a lock lost mid-run is said on stderr, and no further change starts (the one in
 * flight finishes, as on a signal); `lost` then makes the run's exit 1.
 */
export function onLockLoss(runner: { interrupt(reason: string): void }): { onLost: (why: string) => void; readonly lost: boolean } {
  let lost = false;
  return {
    onLost(why) {
      lost = true;
      console.error(`\nerror: ${why}; another run may start: finishing the change in flight, starting no other`);
      runner.interrupt('the run lock was lost');
    },
    get lost() {
      return lost;
    },
  };
}
