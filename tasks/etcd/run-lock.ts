import { setTimeout as delay } from 'node:timers/promises';
import { LockHeldError } from '../core/lock.ts';
import type { Inventory } from '../inventory/model.ts';
import type { HypervisorConnections } from '../remote/hypervisors.ts';
import type { EtcdClients, ClientIdentity } from './client.ts';
import { RUN_LOCK_TTL_S, thisRun } from './run-lock-decision.ts';
import { acquireClusterRunLock, lookAtClusterRunLock, type Acquisition, type HeldRunLock } from './run-lock-lease.ts';

/**
 * The cluster's run lock as the commands take it (run-lock-decision.ts says what an answer means, run-lock-lease.ts
 * holds the lease): held for a whole run, or looked at first and taken before the first change; refused runs
 * are ClusterRunLockHeldError.
 */

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
        clientPort: inventory.etcd.clientPort,
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
export async function unlessBusy<Lock = HeldRunLock>(
  acquire: () => Promise<Acquisition<Lock>>,
  { patienceMs = DEFRAG_PATIENCE_MS, pauseMs = 2_000, say }: { patienceMs?: number; pauseMs?: number; say?: (line: string) => void } = {},
): Promise<Exclude<Acquisition<Lock>, { kind: 'busy' }>> {
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
export async function acquireAfterLook<Lock = HeldRunLock>(
  acquire: () => Promise<Acquisition<Lock>>,
  {
    patienceMs = ACQUIRE_AFTER_LOOK_MS,
    pauseMs = 1_000,
    busy = {},
  }: { patienceMs?: number; pauseMs?: number; busy?: Parameters<typeof unlessBusy>[1] } = {},
): Promise<Lock> {
  const deadline = Date.now() + patienceMs;
  for (;;) {
    const acquired = await unlessBusy(acquire, busy);
    if (acquired.kind === 'acquired') return acquired.lock;
    if (acquired.kind === 'refused') throw new ClusterRunLockHeldError(acquired.message);
    if (Date.now() >= deadline)
      throw new ClusterRunLockHeldError(
        `etcd answered this run's look at the cluster's run lock but not its acquisition for ${Math.round(patienceMs / 1000)} ` +
          `s (${acquired.why}); another run may be changing the cluster, so this run changed nothing: run it again`,
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
  const where = { ...run, clientPort: inventory.etcd.clientPort, members: inventory.members, cluster: inventory.cluster.name };
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
