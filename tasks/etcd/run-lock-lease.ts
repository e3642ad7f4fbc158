import { setTimeout as delay } from 'node:timers/promises';
import type { Etcd3 } from 'etcd3';
import { goneHere } from '../core/lock.ts';
import type { Member } from '../inventory/model.ts';
import type { HypervisorConnections } from '../remote/hypervisors.ts';
import { EtcdClients, type ClientIdentity } from './client.ts';
import { DEFRAG_LOCK_KEY, runLockEpochKey, runLockKey } from '../inventory/lock-keys.ts';
import {
  decideLock,
  firstLines,
  holderRecord,
  parseHolderRecord,
  refusal,
  whyUnanswered,
  RUN_LOCK_TTL_S,
  type LockAnswer,
  type LockDecision,
  type RunLockHolder,
} from './run-lock-decision.ts';

/**
 * The cluster's run lock as a lease in etcd: taken in one transaction (created only if absent, the epoch put
 * beside it), kept alive while the run lasts, revoked when it ends; and looked at without taking it. What an
 * answer means is run-lock-decision.ts's; when a command takes it, run-lock.ts's.
 */

/** How long the members have to answer before the lock is taken as unavailable: a live member answers in milliseconds. */
const ANSWER_MS = 5_000;

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
      return (
        `could not release the cluster's run lock (${this.key}): ` +
        `no member answered; it expires by itself within ${this.options.ttlS} s`
      );
    } finally {
      this.clients.close();
      // A renewal under way may still open a member's client: closed again once it is done.
      void this.#renewing?.finally(() => this.clients.close());
    }
  }
}

/** `Lock`: the lock held, a HeldRunLock but for code that only passes it on (acquireAfterLook). */
export type Acquisition<Lock = HeldRunLock> = { kind: 'acquired'; lock: Lock } | Exclude<LockDecision, { kind: 'acquired' }>;

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
