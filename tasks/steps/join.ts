import { setTimeout as delay } from 'node:timers/promises';
import { retryWhile } from '../core/retry.ts';
import type { Step } from '../core/step.ts';
import { firstAnswering, type MemberClients } from '../etcd/client.ts';
import { memberHealth } from '../etcd/health.ts';
import { liveMember, MembershipRefusal, type LiveMember } from '../etcd/membership.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import { peerUrl } from '../inventory/urls.ts';
import { deployStep } from './deploy-step.ts';

/**
 * A member joining a formed cluster, as etcd's runtime-reconfiguration guide has it: added as a
 * learner (it votes on nothing and cannot cost the quorum) before its VM exists, then — once its VM
 * has started etcd with `initial-cluster-state: existing` and it has caught up — promoted to a voting
 * member. Both steps decide from etcd's member list alone, so a run stopped anywhere in between
 * picks up where it stopped.
 */

/** etcd's answer while a learner is still behind the leader's log. */
const NOT_IN_SYNC = /can only promote a learner member which is in sync with leader/;
const PROMOTE_RETRY_MS = 2_000;
/**
 * etcd refuses to add even a learner unless every voting member has been connected to the one asked
 * for its health interval (5 s): a member restarted moments ago by a roll answers "unhealthy cluster"
 * for those seconds. Refused, nothing was added, so asking again is safe.
 */
const JUST_RESTARTED = /etcdserver: unhealthy cluster/;
const ADD_RETRY = { windowMs: 30_000, pauseMs: 2_000 };

export interface JoinFacts {
  /** The joiner as etcd lists it, if it does. */
  live?: LiveMember;
  /** Voting members that do not answer healthy (adding a member needs a healthy cluster). */
  unhealthy: string[];
}

/** The member list from the first voting member that answers. */
async function liveMembers(clients: MemberClients, voting: readonly Member[]): Promise<LiveMember[]> {
  const { answer } = await firstAnswering(clients, voting, (client) => client.cluster.memberList({}));
  return answer.members.map(liveMember);
}

async function joinFacts(inventory: Inventory, clients: MemberClients, voting: readonly Member[], joiner: Member): Promise<JoinFacts> {
  const [list, health] = await Promise.all([
    liveMembers(clients, voting),
    Promise.all(
      voting.map(async (member) => ({ member, health: await memberHealth({ ...inventory, members: [...voting] }, clients, member) })),
    ),
  ]);
  const live = list.find((m) => m.peerURLs.includes(peerUrl(inventory, joiner)));
  return {
    ...(live ? { live } : {}),
    unhealthy: health.flatMap(({ member, health: h }) => (h.healthy ? [] : [`${member.name} (${h.reason})`])),
  };
}

type AddAction = { kind: 'add-learner'; peerUrl: string };

/** A joiner's steps: `voting` is the cluster's voting members before it (the inventory's members etcd already has). */
interface JoinStepOptions {
  inventory: Inventory;
  clients: MemberClients;
  voting: readonly Member[];
  joiner: Member;
}

export function addLearnerStep({ inventory, clients, voting, joiner }: JoinStepOptions): Step<JoinFacts, AddAction> {
  const url = peerUrl(inventory, joiner);
  return {
    name: 'add',
    targets: [joiner.name],
    check: () => joinFacts(inventory, clients, voting, joiner),
    plan(facts) {
      if (facts.live) return [];
      if (facts.unhealthy.length > 0) {
        throw new MembershipRefusal(
          `refusing to add ${joiner.name}: the cluster must be healthy with a leader first; ` +
            `not healthy: ${facts.unhealthy.join(', ')}. Nothing was changed.`,
        );
      }
      return [
        {
          summary: `add ${joiner.name} to the cluster as a learner (peer URL ${url}); it is promoted once its VM has started and caught up`,
          action: { kind: 'add-learner', peerUrl: url },
        },
      ];
    },
    async apply(changes) {
      for (const { action } of changes) {
        await retryWhile(
          () => firstAnswering(clients, voting, (client) => client.cluster.memberAdd({ peerURLs: [action.peerUrl], isLearner: true })),
          // Never after a timeout: that add may have gone through; etcd would
          // refuse a second (its peer URL exists), failing an add that worked.
          (error) => JUST_RESTARTED.test((error as Error).message) && !/DEADLINE_EXCEEDED|timed? ?out/i.test((error as Error).message),
          ADD_RETRY,
        );
      }
    },
  };
}

type PromoteAction = { kind: 'promote'; id: string };

export function promoteStep({
  inventory,
  clients,
  voting,
  joiner,
  timeoutMs,
}: JoinStepOptions & { timeoutMs: number }): Step<JoinFacts, PromoteAction> {
  return {
    name: 'promote',
    targets: [joiner.name],
    check: () => joinFacts(inventory, clients, voting, joiner),
    plan(facts) {
      // Not added yet: what a dry-run sees (a real run adds it first, or skips this member when adding failed).
      if (!facts.live)
        return [
          {
            summary: `promote ${joiner.name} to a voting member once it has been added, has started and has caught up`,
            action: { kind: 'promote', id: '' },
          },
        ];
      if (!facts.live.isLearner) return [];
      if (!facts.live.name)
        return [
          {
            summary: `promote ${joiner.name} to a voting member once it has started and caught up (it has not started yet)`,
            action: { kind: 'promote', id: facts.live.id },
          },
        ];
      return [{ summary: `promote ${joiner.name} from learner to voting member`, action: { kind: 'promote', id: facts.live.id } }];
    },
    async apply(changes) {
      for (const { action } of changes) {
        if (!action.id) throw new Error(`${joiner.name} is not a member of the cluster: the add step did not add it`);
        const deadline = Date.now() + timeoutMs;
        for (;;) {
          try {
            await firstAnswering(clients, voting, (client) => client.cluster.memberPromote({ ID: action.id }));
            break;
          } catch (error) {
            const message = (error as Error).message;
            if (!NOT_IN_SYNC.test(message) || Date.now() > deadline) {
              const behind = NOT_IN_SYNC.test(message)
                ? ` (still behind the leader after ${Math.round(timeoutMs / 1000)} s; cluster.health_timeout sets the wait)`
                : '';
              throw new Error(`promoting ${joiner.name} failed: ${message.split('\n')[0]}${behind}`);
            }
            await delay(PROMOTE_RETRY_MS);
          }
        }
      }
    },
  };
}

export const join = deployStep<'join', 'join' | 'promote'>({
  id: 'join',
  kind: 'operation',
  on: 'etcd',
  selectable: false,
  changes: [],
  results: ['add'],
  phases: ['join', 'promote'],
  doc: 'each member new to a formed cluster, one at a time: a learner, its VM and guest, then promoted and healthy',
  run: (phase, run) => {
    const { inventory, clients, membersNamed } = run.resources;
    const before = membersNamed(phase.before);
    const joiner = membersNamed([phase.member])[0]!;
    return run.runner.runStep(
      phase.step === 'join'
        ? addLearnerStep({ inventory, clients, voting: before, joiner })
        : promoteStep({ inventory, clients, voting: before, joiner, timeoutMs: inventory.cluster.healthTimeout * 1000 }),
    );
  },
});
