import { firstLineOf } from '../core/errors.ts';
import { setTimeout as delay } from 'node:timers/promises';
import type { RollKind } from '../core/step.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { EtcdClients } from './client.ts';
import { memberHealth } from './health.ts';

/**
 * How changes that take etcd down on a member are ordered and guarded: members whose change keeps
 * etcd running go first, then members whose etcd is not running anyway (starting them only adds to
 * the quorum), then followers, and the leader last, so leadership moves once at most. Before a
 * running member is taken down, every other member must be healthy enough that the cluster keeps
 * its quorum without it.
 */

export type { RollKind };

export interface RollCandidate {
  target: string;
  kind: RollKind;
}

/**
 * Pure: the waves of a roll, given each candidate's kind and the current leader's name (if known).
 * Members whose etcd keeps running change together, then the ones whose etcd is down start together
 * (each only adds to the quorum), then one wave per restart: followers in the inventory's order, the
 * leader last.
 */
export function rollOrder(candidates: readonly RollCandidate[], leader: string | undefined): string[][] {
  const of = (kind: RollKind) => candidates.filter((candidate) => candidate.kind === kind).map((candidate) => candidate.target);
  const restarts = of('restarts');
  const followersThenLeader = [...restarts.filter((target) => target !== leader), ...restarts.filter((target) => target === leader)];
  return [of('keeps-running'), of('starts'), ...followersThenLeader.map((target) => [target])].filter((wave) => wave.length > 0);
}

/** The waves of a roll; asks etcd for the leader only when a member is to be restarted. */
export async function rollWaves(inventory: Inventory, clients: EtcdClients, candidates: readonly RollCandidate[]): Promise<string[][]> {
  const leader = candidates.some((candidate) => candidate.kind === 'restarts')
    ? await currentLeader(inventory, clients, inventory.members)
    : undefined;
  return rollOrder(candidates, leader);
}

/** The leader's name as the first member that answers sees it; undefined when none answers. */
export async function currentLeader(inventory: Inventory, clients: EtcdClients, members: readonly Member[]): Promise<string | undefined> {
  for (const member of members) {
    const health = await memberHealth(inventory, clients, member);
    if (health.healthy) return health.leader;
  }
  return undefined;
}

/** Votes a cluster of `size` voting members needs to make progress. */
export const quorumOf = (size: number) => Math.floor(size / 2) + 1;

/**
 * How many of the other members must be healthy before one member is taken down: enough to keep the
 * quorum — or, in a cluster too small to keep it without any member (one or two members), all the
 * others: such a cluster cannot restart a member without a pause, and refusing would leave it
 * unconvergeable.
 */
export const healthyOthersNeeded = (size: number) => Math.min(quorumOf(size), size - 1);

export class QuorumError extends Error {}

/** Refuses to take `member` down unless the other members are healthy enough to keep the quorum meanwhile. */
export async function ensureQuorumWithout(inventory: Inventory, clients: EtcdClients, member: Member): Promise<void> {
  const others = inventory.members.filter((m) => m.name !== member.name);
  const answers = await Promise.all(others.map(async (other) => ({ other, health: await memberHealth(inventory, clients, other) })));
  const healthy = answers.filter(({ health }) => health.healthy).length;
  const needed = healthyOthersNeeded(inventory.members.length);
  if (healthy < needed) {
    const unhealthy = answers
      .filter(({ health }) => !health.healthy)
      .map(({ other, health }) => `${other.name} (${health.healthy ? '' : health.reason})`);
    throw new QuorumError(
      `refusing to take etcd on ${member.name} down: only ${healthy} of the other ${others.length} members are healthy ` +
        `and ${needed} must be (a quorum of ${inventory.members.length} is ${quorumOf(inventory.members.length)}); ` +
        `unhealthy: ${unhealthy.join(', ')}. Bring those back first (the next run starts a stopped etcd), then run again.`,
    );
  }
}

/** Between two looks at a member that came back onto a release. */
const RELEASE_POLL_MS = 500;

/** The leader's applied index, asked of the member etcd names as leader (hex or decimal ID as Status gives it). */
async function leaderApplied(inventory: Inventory, clients: EtcdClients, leaderId: string): Promise<bigint> {
  for (const member of inventory.members) {
    const status = await (await clients.for(member)).maintenance.status({}).catch(() => undefined);
    if (status && status.header.member_id === leaderId) return BigInt(status.raftAppliedIndex);
  }
  throw new Error(`the leader (${BigInt(leaderId).toString(16)}) did not answer`);
}

/** The leader's applied index a member must reach, taken the first time the member is asked (`undefined` until then). */
export interface CatchUpMark {
  target?: bigint;
}

/**
 * How far a member that came back has got: the version it reports, and whether it has applied what
 * the leader had applied when it was first asked (healthy alone means it reached the leader, not
 * that it caught up with it). `what` says where it stands, for a wait's message.
 */
export async function catchUp(
  inventory: Inventory,
  clients: EtcdClients,
  member: Member,
  mark: CatchUpMark,
  version?: string,
): Promise<{ version: string; caughtUp: boolean; what: string }> {
  const status = await (await clients.for(member)).maintenance.status({});
  // With a version asked for, the leader's index is taken only once the member runs it (when it came back on it).
  if (version !== undefined && status.version !== version)
    return { version: status.version, caughtUp: false, what: `it runs etcd ${status.version}, not ${version}` };
  mark.target ??= await leaderApplied(inventory, clients, status.leader);
  const caughtUp = BigInt(status.raftAppliedIndex) >= mark.target;
  return { version: status.version, caughtUp, what: `it has applied ${status.raftAppliedIndex} of the leader's ${mark.target}` };
}

/**
 * After a member's restart onto a release, and before the next member goes: it reports that version,
 * and it has caught up with the leader (catchUp).
 */
export async function waitForRelease(
  inventory: Inventory,
  clients: EtcdClients,
  member: Member,
  version: string,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const mark: CatchUpMark = {};
  let last = 'no answer yet';
  for (;;) {
    try {
      const progress = await catchUp(inventory, clients, member, mark, version);
      if (progress.caughtUp) return;
      last = progress.what;
    } catch (error) {
      last = firstLineOf(error);
    }
    if (Date.now() >= deadline)
      throw new Error(
        `${member.name} is healthy but not on etcd ${version} with the leader's data after ${Math.round(timeoutMs / 1000)} s: ${last}`,
      );
    await delay(RELEASE_POLL_MS);
  }
}

/** Leadership handed from `from`, which leads, to `to`: MoveLeader is the leader's to do, so `from` is asked. */
export async function moveLeader(clients: EtcdClients, from: Member, to: Member): Promise<void> {
  const target = await (await clients.for(to)).maintenance.status({});
  await (await clients.for(from)).maintenance.moveLeader({ targetID: target.header.member_id });
}
