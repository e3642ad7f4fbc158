import { setTimeout as delay } from 'node:timers/promises';
import type { Change, Step } from '../core/step.ts';
import { firstAnswering, type EtcdClients } from '../etcd/client.ts';
import { memberHealth } from '../etcd/health.ts';
import { liveMember, MembershipRefusal, type LiveMember } from '../etcd/membership.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import { quorumOf } from '../etcd/roll.ts';
import type { RemoteContext } from '../libvirt/context.ts';
import { volInfo } from '../libvirt/volumes.ts';
import { judgeOwnership, ownerQuestions, type Ownership } from '../libvirt/ownership.ts';
import type { ClusterIdentity } from '../pki/identity.ts';
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
  return answer.members.map(liveMember);
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
      // Not added yet: what a dry-run sees (a real run adds it first, or skips this member when adding failed).
      if (!facts.live) return [{ summary: `promote ${joiner.name} to a voting member once it has been added, has started and has caught up`, action: { kind: 'promote', id: '' } }];
      if (!facts.live.isLearner) return [];
      if (!facts.live.name) return [{ summary: `promote ${joiner.name} to a voting member once it has started and caught up (it has not started yet)`, action: { kind: 'promote', id: facts.live.id } }];
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
              throw new Error(`promoting ${joiner.name} failed: ${message.split('\n')[0]}${NOT_IN_SYNC.test(message) ? ` (still behind the leader after ${Math.round(timeoutMs / 1000)} s; cluster.health_timeout sets the wait)` : ''}`);
            }
            await delay(PROMOTE_RETRY_MS);
          }
        }
      }
    },
  };
}

export interface DepartFacts {
  /** The member as etcd lists it, while it does. */
  live?: LiveMember;
  /** etcd's leader's ID (decimal), if a member answers. */
  leaderId?: string;
  /** Members that stay (voting) and answer healthy, and those that do not. */
  healthy: Member[];
  unhealthy: string[];
  /** virsh domstate of its VM, or `absent`. */
  vm: string;
  /** Whose VM it is: only this cluster's is stopped and undefined, and only then are its volumes deleted. */
  ownership: Ownership;
  /** Its volumes that exist, by pool/name. */
  volumes: string[];
}

type DepartAction =
  | { kind: 'move-leader'; to: Member }
  | { kind: 'remove'; id: string }
  | { kind: 'undefine'; running: boolean }
  | { kind: 'delete-volumes'; volumes: { pool: string; name: string }[] };

/**
 * `leave`: a member marked state: absent goes, its volumes kept. `replace`: a member whose disk is gone
 * (or named by --replace) goes with everything it had, so that it joins again empty and takes its data
 * from the cluster, never from an old disk or a snapshot.
 */
export type Departure = 'leave' | 'replace';

/** The member's volumes, as pool/name with whether the tool made them (only those are ever deleted). */
function volumesOf(member: Member): { pool: string; name: string; ours: boolean }[] {
  const { os, data, pool } = member.volumes;
  return [
    { pool, name: 'existing' in os ? os.existing : os.name, ours: !('existing' in os) },
    ...(data ? [{ pool, name: 'existing' in data ? data.existing : data.name, ours: !('existing' in data) }] : []),
  ];
}

/**
 * A member departs, one at a time: leadership moved away first if it leads; removed by its ID, refused
 * unless the members that stay keep a healthy quorum; its VM stopped and undefined; for a replacement,
 * its volumes deleted. Each part is decided from etcd's member list and libvirt, so a run stopped in
 * between finishes it.
 */
export function departStep(
  inventory: Inventory,
  clients: EtcdClients,
  remote: RemoteContext,
  how: { departure: Departure; member: Member; staying: readonly Member[]; alsoDeparting: readonly Member[]; owner: { identity: ClusterIdentity; adopt: ReadonlySet<string> } },
): Step<DepartFacts, DepartAction> {
  const { departure, member, staying, alsoDeparting, owner } = how;
  const volumes = volumesOf(member);
  return {
    name: departure,
    targets: [member.name],
    async check() {
      const [{ answer: list, member: asked }, answers] = await Promise.all([
        firstAnswering(clients, staying, (client) => client.cluster.memberList({})),
        remote.probe<string>(member, { ...ownerQuestions(member), ...Object.fromEntries(volumes.map((v, i) => [`volume${i}`, volInfo(v.pool, v.name)])) }),
      ]);
      const status = await (await clients.for(asked)).maintenance.status({});
      const live = list.members.find((m) => m.peerURLs.includes(peerUrl(inventory, member)));
      // The voting members etcd has now: those that stay, and the departing ones it still lists.
      const departingNow = [...new Set([member, ...alsoDeparting])].filter((m) => list.members.some((l) => !l.isLearner && l.peerURLs.includes(peerUrl(inventory, m))));
      const votingNow = [...staying, ...departingNow];
      const health = await Promise.all(staying.map(async (m) => ({ member: m, health: await memberHealth({ ...inventory, members: votingNow }, clients, m) })));
      return {
        ...(live ? { live: liveMember(live) } : {}),
        ...(status.leader && status.leader !== '0' ? { leaderId: status.leader } : {}),
        healthy: health.filter(({ health: h }) => h.healthy).map(({ member: m }) => m),
        unhealthy: health.flatMap(({ member: m, health: h }) => (h.healthy ? [] : [`${m.name} (${h.reason})`])),
        vm: answers.state!.code === 0 ? answers.state!.output.trim() : 'absent',
        ownership: judgeOwnership(member.name, { mark: answers.mark!, title: answers.title!, state: answers.state! }, owner.identity, owner.adopt.has(member.name)),
        volumes: volumes.filter((_, i) => answers[`volume${i}`]?.code === 0).map((v) => `${v.pool}/${v.name}`),
      };
    },
    plan(facts) {
      if (facts.ownership.kind === 'refused') throw new MembershipRefusal(`refusing to ${departure === 'leave' ? 'remove' : 'replace'} ${member.name}: ${facts.ownership.reason}. Nothing was changed.`);
      const changes: Change<DepartAction>[] = [];
      if (facts.live) {
        const needed = quorumOf(staying.length);
        if (!facts.leaderId || facts.healthy.length < needed) {
          throw new MembershipRefusal(
            `refusing to remove ${member.name}: ${!facts.leaderId ? 'the cluster has no leader' : `only ${facts.healthy.length} of the ${staying.length} members that stay are healthy, and they need ${needed} for a quorum`}` +
              `${facts.unhealthy.length ? ` (not healthy: ${facts.unhealthy.join(', ')})` : ''}. Nothing was changed.`,
          );
        }
        if (facts.leaderId === facts.live.id) {
          const to = facts.healthy[0]!;
          changes.push({ summary: `move leadership from ${member.name} to ${to.name} first`, action: { kind: 'move-leader', to } });
        }
        const why = departure === 'replace' ? '; it joins again empty and takes its data from the cluster' : '';
        changes.push({ summary: `remove ${member.name} from the cluster (member ID ${BigInt(facts.live.id).toString(16)}${facts.live.isLearner ? ', a learner' : ''})${why}`, action: { kind: 'remove', id: facts.live.id } });
      }
      const kept = departure === 'leave' && facts.volumes.length ? `; its volumes stay (${facts.volumes.join(', ')}: virsh vol-delete removes them)` : '';
      if (facts.vm !== 'absent') {
        changes.push({ summary: `${facts.vm === 'shut off' ? '' : 'stop and '}undefine VM ${member.name} on ${member.hypervisor.name}${kept}`, action: { kind: 'undefine', running: facts.vm !== 'shut off' } });
      }
      if (departure === 'replace' && facts.volumes.length > 0) {
        const existing = volumes.filter((v) => facts.volumes.includes(`${v.pool}/${v.name}`));
        const theirs = existing.filter((v) => !v.ours);
        if (theirs.length > 0) {
          throw new MembershipRefusal(`refusing to replace ${member.name}: its volume(s) ${theirs.map((v) => `${v.pool}/${v.name}`).join(', ')} are the operator's (volume_id / data_volume_id); a replacement needs them empty: recreate them yourself. Nothing was changed.`);
        }
        changes.push({ summary: `delete ${member.name}'s volumes ${facts.volumes.join(', ')} (the old member's disks are never reused)`, action: { kind: 'delete-volumes', volumes: existing } });
      }
      return changes;
    },
    async apply(changes) {
      for (const { action } of changes) {
        if (action.kind === 'move-leader') {
          // MoveLeader is the leader's to do: asked of the departing member itself, which leads.
          const target = await (await clients.for(action.to)).maintenance.status({});
          await (await clients.for(member)).maintenance.moveLeader({ targetID: target.header.member_id });
        } else if (action.kind === 'remove') {
          await firstAnswering(clients, staying, (client) => client.cluster.memberRemove({ ID: action.id }));
        } else if (action.kind === 'undefine') {
          const virsh = await remote.virshFor(member);
          // Stopped at once: it is no member any more, and nothing in it is kept.
          if (action.running) await virsh.run(['destroy', member.name]).catch(() => undefined);
          await virsh.run(['undefine', member.name]);
        } else {
          const virsh = await remote.virshFor(member);
          for (const volume of action.volumes) await virsh.run(['vol-delete', '--pool', volume.pool, volume.name]);
        }
      }
    },
  };
}
