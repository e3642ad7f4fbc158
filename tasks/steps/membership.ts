import { setTimeout as delay } from 'node:timers/promises';
import type { Change, Step } from '../core/step.ts';
import { firstAnswering, type EtcdClients } from '../etcd/client.ts';
import { memberHealth } from '../etcd/health.ts';
import { MembershipRefusal, type LiveMember } from '../etcd/membership.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import { quorumOf } from '../etcd/roll.ts';
import type { RemoteContext } from '../libvirt/context.ts';
import { peerUrl } from '../inventory/urls.ts';

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

export interface JoinFacts {
  /** The joiner as etcd lists it, if it does. */
  live?: LiveMember;
  /** Voting members that do not answer healthy (adding a member needs a healthy cluster). */
  unhealthy: string[];
}

/** The member list from the first voting member that answers. */
async function liveMembers(clients: EtcdClients, voting: readonly Member[]): Promise<LiveMember[]> {
  const { answer } = await firstAnswering(clients, voting, (client) => client.cluster.memberList({}));
  return answer.members.map((m) => ({ id: m.ID, name: m.name, peerURLs: m.peerURLs, isLearner: Boolean(m.isLearner) }));
}

async function joinFacts(inventory: Inventory, clients: EtcdClients, voting: readonly Member[], joiner: Member): Promise<JoinFacts> {
  const [list, health] = await Promise.all([
    liveMembers(clients, voting),
    Promise.all(voting.map(async (member) => ({ member, health: await memberHealth({ ...inventory, members: [...voting] }, clients, member) }))),
  ]);
  const live = list.find((m) => m.peerURLs.includes(peerUrl(inventory, joiner)));
  return { ...(live ? { live } : {}), unhealthy: health.flatMap(({ member, health: h }) => (h.healthy ? [] : [`${member.name} (${h.reason})`])) };
}

type AddAction = { kind: 'add-learner'; peerUrl: string };

/** `voting`: the cluster's voting members before this joiner (the inventory's members etcd already has). */
export function addLearnerStep(inventory: Inventory, clients: EtcdClients, voting: readonly Member[], joiner: Member): Step<JoinFacts, AddAction> {
  const url = peerUrl(inventory, joiner);
  return {
    name: 'add',
    targets: [joiner.name],
    check: () => joinFacts(inventory, clients, voting, joiner),
    plan(facts) {
      if (facts.live) return [];
      if (facts.unhealthy.length > 0) {
        throw new MembershipRefusal(`refusing to add ${joiner.name}: the cluster must be healthy with a leader first; not healthy: ${facts.unhealthy.join(', ')}. Nothing was changed.`);
      }
      return [{ summary: `add ${joiner.name} to the cluster as a learner (peer URL ${url}); it is promoted once its VM has started and caught up`, action: { kind: 'add-learner', peerUrl: url } }];
    },
    async apply(changes) {
      for (const { action } of changes) {
        await firstAnswering(clients, voting, (client) => client.cluster.memberAdd({ peerURLs: [action.peerUrl], isLearner: true }));
      }
    },
  };
}

type PromoteAction = { kind: 'promote'; id: string };

export function promoteStep(inventory: Inventory, clients: EtcdClients, voting: readonly Member[], joiner: Member, timeoutMs: number): Step<JoinFacts, PromoteAction> {
  return {
    name: 'promote',
    targets: [joiner.name],
    check: () => joinFacts(inventory, clients, voting, joiner),
    plan(facts) {
      if (!facts.live) throw new Error(`${joiner.name} is not a member of the cluster: the add step should have added it`);
      if (!facts.live.isLearner) return [];
      if (!facts.live.name) return [{ summary: `promote ${joiner.name} to a voting member once it has started and caught up (it has not started yet)`, action: { kind: 'promote', id: facts.live.id } }];
      return [{ summary: `promote ${joiner.name} from learner to voting member`, action: { kind: 'promote', id: facts.live.id } }];
    },
    async apply(changes) {
      for (const { action } of changes) {
        const deadline = Date.now() + timeoutMs;
        for (;;) {
          try {
            await firstAnswering(clients, voting, (client) => client.cluster.memberPromote({ ID: action.id }));
            break;
          } catch (error) {
            const message = (error as Error).message;
            if (!NOT_IN_SYNC.test(message) || Date.now() > deadline) {
              throw new Error(`promoting ${joiner.name} failed: ${message.split('\n')[0]}${NOT_IN_SYNC.test(message) ? ` (still behind the leader after ${Math.round(timeoutMs / 1000)} s; cluster.health_timeout sets the wait)` : ''}`);
            }
            await delay(PROMOTE_RETRY_MS);
          }
        }
      }
    },
  };
}

export interface LeaveFacts {
  /** The leaver as etcd lists it, while it does. */
  live?: LiveMember;
  /** etcd's leader's ID (decimal), if a member answers. */
  leaderId?: string;
  /** Remaining voting members that answer healthy, and those that do not. */
  healthy: Member[];
  unhealthy: string[];
  /** virsh domstate of its VM, or `absent`. */
  vm: string;
}

type LeaveAction = { kind: 'move-leader'; from: string; to: Member } | { kind: 'remove'; id: string } | { kind: 'undefine'; running: boolean };

/**
 * A member marked `state: absent` leaves: leadership moved away first if it leads, then removed by its
 * ID (refused unless the members that stay keep a healthy quorum), then its VM shut down and undefined.
 * Its volumes stay: the output names them, and `virsh vol-delete` removes them.
 */
export function leaveStep(inventory: Inventory, clients: EtcdClients, remote: RemoteContext, remaining: readonly Member[], leaver: Member, leaving: readonly Member[]): Step<LeaveFacts, LeaveAction> {
  return {
    name: 'leave',
    targets: [leaver.name],
    async check() {
      const [{ answer: list, member: asked }, domain] = await Promise.all([
        firstAnswering(clients, remaining, (client) => client.cluster.memberList({})),
        remote.probe(leaver, { state: ['domstate', leaver.name] }),
      ]);
      const status = await (await clients.for(asked)).maintenance.status({});
      const live = list.members.find((m) => m.peerURLs.includes(peerUrl(inventory, leaver)));
      // The voting members etcd has now: those that stay, and those still to leave (this one included) that it still lists.
      const votingNow = [...remaining, ...leaving.filter((m) => list.members.some((l) => !l.isLearner && l.peerURLs.includes(peerUrl(inventory, m))))];
      const health = await Promise.all(remaining.map(async (member) => ({ member, health: await memberHealth({ ...inventory, members: votingNow }, clients, member) })));
      return {
        ...(live ? { live: { id: live.ID, name: live.name, peerURLs: live.peerURLs, isLearner: Boolean(live.isLearner) } } : {}),
        ...(status.leader && status.leader !== '0' ? { leaderId: status.leader } : {}),
        healthy: health.filter(({ health: h }) => h.healthy).map(({ member }) => member),
        unhealthy: health.flatMap(({ member, health: h }) => (h.healthy ? [] : [`${member.name} (${h.reason})`])),
        vm: domain.state.code === 0 ? domain.state.output.trim() : 'absent',
      };
    },
    plan(facts) {
      const changes: Change<LeaveAction>[] = [];
      if (facts.live) {
        const needed = quorumOf(remaining.length);
        if (!facts.leaderId || facts.healthy.length < needed) {
          throw new MembershipRefusal(
            `refusing to remove ${leaver.name}: ${!facts.leaderId ? 'the cluster has no leader' : `only ${facts.healthy.length} of the ${remaining.length} members that stay are healthy, and they need ${needed} for a quorum`}` +
              `${facts.unhealthy.length ? ` (not healthy: ${facts.unhealthy.join(', ')})` : ''}. Nothing was changed.`,
          );
        }
        if (facts.leaderId === facts.live.id) {
          const to = facts.healthy[0]!;
          changes.push({ summary: `move leadership from ${leaver.name} to ${to.name} first`, action: { kind: 'move-leader', from: facts.live.id, to } });
        }
        changes.push({ summary: `remove ${leaver.name} from the cluster (member ID ${BigInt(facts.live.id).toString(16)}${facts.live.isLearner ? ', a learner' : ''})`, action: { kind: 'remove', id: facts.live.id } });
      }
      if (facts.vm !== 'absent') {
        const { os, data, pool } = leaver.volumes;
        const volumes = ['existing' in os ? os.existing : os.name, ...(data ? ['existing' in data ? data.existing : data.name] : [])].map((name) => `${pool}/${name}`);
        changes.push({
          summary: `${facts.vm === 'running' ? 'stop and ' : ''}undefine VM ${leaver.name} on ${leaver.hypervisor.name}; its volumes stay (${volumes.join(', ')}: virsh vol-delete removes them)`,
          action: { kind: 'undefine', running: facts.vm !== 'shut off' },
        });
      }
      return changes;
    },
    async apply(changes) {
      for (const { action } of changes) {
        if (action.kind === 'move-leader') {
          // MoveLeader is the leader's to do: asked of the leaver itself, which leads.
          const target = await (await clients.for(action.to)).maintenance.status({});
          await (await clients.for(leaver)).maintenance.moveLeader({ targetID: target.header.member_id });
        } else if (action.kind === 'remove') {
          await firstAnswering(clients, remaining, (client) => client.cluster.memberRemove({ ID: action.id }));
        } else {
          const virsh = await remote.virshFor(leaver);
          if (action.running) await virsh.run(['destroy', leaver.name]).catch(() => undefined);
          await virsh.run(['undefine', leaver.name]);
        }
      }
    },
  };
}
