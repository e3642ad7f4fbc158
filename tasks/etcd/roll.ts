import { firstLineOf } from '../core/errors.ts';
import { setTimeout as delay } from 'node:timers/promises';
import type { RollKind } from '../core/step.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { MemberClients } from './client.ts';
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
export async function rollWaves(inventory: Inventory, clients: MemberClients, candidates: readonly RollCandidate[]): Promise<string[][]> {
  const leader = candidates.some((candidate) => candidate.kind === 'restarts')
    ? await currentLeader(inventory, clients, inventory.members)
    : undefined;
  return rollOrder(candidates, leader);
}

/** The leader's name as the first member that answers sees it; undefined when none answers. */
export async function currentLeader(inventory: Inventory, clients: MemberClients, members: readonly Member[]): Promise<string | undefined> {
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
export async function ensureQuorumWithout(inventory: Inventory, clients: MemberClients, member: Member): Promise<void> {
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
async function leaderApplied(inventory: Inventory, clients: MemberClients, leaderId: string): Promise<bigint> {
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
  clients: MemberClients,
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
  clients: MemberClients,
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
export async function moveLeader(clients: MemberClients, from: Member, to: Member): Promise<void> {
  const target = await (await clients.for(to)).maintenance.status({});
  await (await clients.for(from)).maintenance.moveLeader({ targetID: target.header.member_id });
}

/** What one member said of itself when asked before a handoff: its ID, the leader it follows, how far it has applied. */
export interface Standing {
  name: string;
  id: string;
  leaderId: string;
  applied: bigint;
  /** A learner cannot take leadership (etcd refuses the transfer). */
  learner: boolean;
}

export type Handoff =
  /** The member does not lead (or did not answer, so it cannot be asked to hand anything over). */
  | { kind: 'not-leader' }
  /** It leads and no other member answered following it: a cluster of one, or the others down. */
  | { kind: 'nobody' }
  | { kind: 'hand-to'; to: string };

/**
 * Pure: whom `member` hands leadership to before it is taken down — the follower of it that has applied the most
 * (the least to catch up, so the shortest pause once it leads), the inventory's order breaking ties. Standings come
 * in the inventory's order; a member that did not answer is absent.
 */
export function handoffFor(member: string, standings: readonly Standing[]): Handoff {
  const own = standings.find((standing) => standing.name === member);
  if (!own || own.leaderId !== own.id) return { kind: 'not-leader' };
  const followers = standings.filter((standing) => standing.name !== member && standing.leaderId === own.id && !standing.learner);
  if (!followers.length) return { kind: 'nobody' };
  const best = followers.reduce((chosen, follower) => (follower.applied > chosen.applied ? follower : chosen));
  return { kind: 'hand-to', to: best.name };
}

/** A handoff that was tried: to whom, and why it did not happen when it did not. */
export interface HandedOff {
  to: string;
  failed?: string;
}

/**
 * Before `member`'s etcd is restarted, defragmented or stopped: when it leads, leadership goes to its most caught-up
 * follower first (MoveLeader returns once the transfer is done), while the leader still serves. A stopping etcd
 * hands over on its own, to the peer connected longest; a defragmenting one does not, and takes no write meanwhile.
 * A transfer that fails does not stop the work: the cluster elects a leader as it would have without it, and the
 * caller says so. Undefined when the member did not lead (or had nobody to hand to).
 */
export async function handLeadershipAway(inventory: Inventory, clients: MemberClients, member: Member): Promise<HandedOff | undefined> {
  const others = inventory.members.filter((other) => other.name !== member.name);
  if (!others.length) return undefined;
  const standings = await Promise.all(
    inventory.members.map(async (asked): Promise<Standing | undefined> => {
      const status = await clients
        .for(asked)
        .then((client) => client.maintenance.status({}))
        .catch(() => undefined);
      return (
        status && {
          name: asked.name,
          id: status.header.member_id,
          leaderId: status.leader,
          applied: BigInt(status.raftAppliedIndex),
          learner: status.isLearner,
        }
      );
    }),
  );
  const handoff = handoffFor(
    member.name,
    standings.filter((standing) => standing !== undefined),
  );
  if (handoff.kind !== 'hand-to') return undefined;
  const successor = others.find((other) => other.name === handoff.to)!;
  return moveLeader(clients, member, successor).then(
    () => ({ to: successor.name }),
    (error: unknown) => ({ to: successor.name, failed: firstLineOf(error) }),
  );
}

/** A handoff in a few words, for a run's progress. */
export const handoffNote = ({ to, failed }: HandedOff): string =>
  failed ? `leadership not handed to ${to} (${failed}): etcd elects a leader` : `leadership handed to ${to} first`;
