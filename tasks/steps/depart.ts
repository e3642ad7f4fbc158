import type { Change, Step } from '../core/step.ts';
import { firstAnswering, type EtcdClients } from '../etcd/client.ts';
import { hasLeaderNow, memberHealth } from '../etcd/health.ts';
import { liveMember, MembershipRefusal, type LiveMember, type MembershipPlan } from '../etcd/membership.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import { moveLeader, quorumOf } from '../etcd/roll.ts';
import type { RemoteContext } from '../libvirt/context.ts';
import { volInfo } from '../libvirt/volumes.ts';
import { judgeOwnership, ownerQuestions, type Ownership } from '../libvirt/ownership.ts';
import { saysDomainMissing, type ProbeAnswer, type Question, type Virsh } from '../libvirt/virsh.ts';
import type { VirshAsker } from '../libvirt/session.ts';
import { runThroughAgents } from '../guest/agent.ts';
import { knownHealth, votingSets, type Departure, type KnownHealth, type VotingSets } from '../etcd/departures.ts';
import type { ClusterIdentity } from '../pki/identity.ts';
import { peerUrl } from '../inventory/urls.ts';
import { deployStep } from './deploy-step.ts';

/**
 * A replacement in flight, recorded where the next run looks anyway: in the member's libvirt domain.
 * Once etcd has let a replaced member go, its list no longer says that the member's old VM and disks
 * are to be thrown away, and a run that stopped there would otherwise join the member again on them
 * (a learner starting on the data directory of a removed member). So the departure marks the domain
 * before anything else, and the mark goes only with the domain itself — undefined last, after its
 * volumes are deleted. Kept in its own metadata namespace, apart from the owner's mark, which says
 * whose the domain is, not what is happening to it.
 */

export const REPLACING_NAMESPACE = 'urn:etcd-kvm:replacing:1';
const REPLACING_PREFIX = 'etcd-kvm';

/** The question, asked in the member's batched probe like the owner's mark. */
export const replacingQuestion = (member: Pick<Member, 'name'>): Question => [
  'metadata',
  '--domain',
  member.name,
  '--uri',
  REPLACING_NAMESPACE,
];

/**
 * virsh's arguments that mark the domain: in its persistent definition and, while it runs, live too
 * (`virsh metadata` reads the live definition of a running domain; libvirt refuses `--live` on one
 * that does not run). `memberId`: etcd's ID of the member replaced (decimal), for the operator's eyes.
 */
export function markReplacingArgs(member: Pick<Member, 'name'>, memberId: string | undefined, active: boolean): string[] {
  const id = memberId ? ` member-id="${BigInt(memberId).toString(16)}"` : '';
  return [
    'metadata',
    '--domain',
    member.name,
    '--uri',
    REPLACING_NAMESPACE,
    '--key',
    REPLACING_PREFIX,
    '--set',
    `<replacing${id}/>`,
    '--config',
    ...(active ? ['--live'] : []),
  ];
}

/** Does the answer to replacingQuestion carry the mark? No domain, or no such metadata, is no mark; any other failure is not an answer. */
export function isMarkedReplacing(member: string, answer: ProbeAnswer): boolean {
  if (answer.code === 0) return /<[\w.-]*:?replacing\b/.test(answer.output);
  if (saysDomainMissing(answer.output) || /metadata not found|no metadata/i.test(answer.output)) return false;
  throw new Error(`cannot read whether domain ${member} is being replaced: ${answer.output.trim().split('\n')[0]}`);
}

export interface DepartFacts {
  /** The member as etcd lists it, while it does. */
  live?: LiveMember;
  /** etcd's leader's ID (decimal), if a member answers. */
  leaderId?: string;
  /**
   * The voting members etcd would have right after this removal — those that stay and the departing
   * ones it still lists, this one aside — that answer healthy, and those that do not (with why).
   */
  healthy: Member[];
  unhealthy: string[];
  /** Whether the member itself answers healthy: while it votes, its removal is committed by a quorum that counts it. */
  itselfHealthy: boolean;
  /** virsh domstate of its VM, or `absent`. */
  vm: string;
  /** Whose VM it is: only this cluster's is stopped and undefined, and only then are its volumes deleted. */
  ownership: Ownership;
  /** Whether its domain carries the being-replaced mark: a replacement has begun. */
  markedReplacing: boolean;
  /** Its volumes that exist, by pool/name. */
  volumes: string[];
}

type DepartAction =
  | { kind: 'mark-replacing'; active: boolean; memberId?: string }
  | { kind: 'move-leader'; to: Member }
  | { kind: 'remove'; id: string }
  | { kind: 'stop' }
  | { kind: 'undefine'; running: boolean }
  | { kind: 'delete-volumes'; volumes: { pool: string; name: string }[] };

export type { Departure } from '../etcd/departures.ts';

interface Volume {
  pool: string;
  name: string;
  /** Made by the tool: only those are ever deleted. */
  ours: boolean;
}

/**
 * The member's volumes, the data volume first: a replacement stopped between two deletions then leaves
 * the OS disk, never the data directory of a member etcd has let go.
 */
function volumesOf(member: Member): Volume[] {
  const { os, data, pool } = member.volumes;
  return [
    ...(data ? [{ pool, name: 'existing' in data ? data.existing : data.name, ours: !('existing' in data) }] : []),
    { pool, name: 'existing' in os ? os.existing : os.name, ours: !('existing' in os) },
  ];
}

/**
 * Why the member cannot be removed now, if it cannot: etcd commits the removal with a quorum of the
 * voting members it has now (the member too, while it votes), and everything after it — the next
 * departure included — needs a quorum of those left.
 */
function quorumRefusal(facts: DepartFacts, live: LiveMember): string | undefined {
  if (!facts.leaderId) return 'the cluster has no leader';
  const after = facts.healthy.length + facts.unhealthy.length;
  if (facts.healthy.length < quorumOf(after)) {
    return (
      `right after it, only ${facts.healthy.length} of the ${after} voting members ` +
      `etcd would have left are healthy, and they need ${quorumOf(after)} for a quorum`
    );
  }
  if (live.isLearner) return undefined;
  const healthyNow = facts.healthy.length + (facts.itselfHealthy ? 1 : 0);
  if (healthyNow < quorumOf(after + 1))
    return (
      `only ${healthyNow} of the cluster's ${after + 1} voting members are healthy, ` +
      `and committing the removal needs ${quorumOf(after + 1)}`
    );
  return undefined;
}

/** The health of the voting members around the removal, and whether the member itself is healthy. */
async function votersHealth(
  inventory: Inventory,
  clients: EtcdClients,
  member: Member,
  voters: VotingSets,
): Promise<Pick<DepartFacts, 'healthy' | 'unhealthy' | 'itselfHealthy'>> {
  // Healthy means its member list is exactly the voting members etcd has now.
  const cluster = { ...inventory, members: voters.now };
  const ask = async (m: Member) => ({ member: m, health: await memberHealth(cluster, clients, m) });
  // Its own health counts only while it votes; a member etcd has let go may be down, and would cost a wait.
  const votes = voters.now.some((m) => m.name === member.name);
  const [after, itself] = await Promise.all([Promise.all(voters.after.map(ask)), votes ? ask(member) : undefined]);
  return {
    healthy: after.filter(({ health }) => health.healthy).map(({ member: m }) => m),
    unhealthy: after.flatMap(({ member: m, health }) => (health.healthy ? [] : [`${m.name} (${health.reason})`])),
    itselfHealthy: itself?.health.healthy ?? false,
  };
}

/** Who departs, how, and who else: what a departure is judged against. */
export interface DepartOptions {
  departure: Departure;
  member: Member;
  staying: readonly Member[];
  alsoDeparting: readonly Member[];
  /** In a dry-run, the departures planned before this one: counted as gone (see votingSets). */
  assumedRemoved?: readonly Member[];
  owner: { identity: ClusterIdentity; adopt: ReadonlySet<string> };
}

/**
 * A member departs, one at a time: leadership moved away first if it leads; removed by its ID, refused
 * unless the voting members left right after it — those that stay and the departing ones etcd still
 * lists — keep a healthy quorum; its VM stopped and undefined; for a replacement, its volumes deleted.
 * Each part is decided from etcd's member list and libvirt, so a run stopped in between finishes it:
 * a replacement marks the domain first and undefines it last, so that the mark outlives etcd's listing
 * and the disks (replacingQuestion).
 */
export function departStep({
  inventory,
  clients,
  remote,
  how,
}: {
  inventory: Inventory;
  clients: EtcdClients;
  remote: RemoteContext;
  how: DepartOptions;
}): Step<DepartFacts, DepartAction> {
  const { departure, member } = how;
  return {
    name: departure,
    targets: [member.name],
    check: () => departFacts(inventory, clients, remote, how),
    plan(facts) {
      if (facts.ownership.kind === 'refused') {
        const verb = departure === 'leave' ? 'remove' : 'replace';
        throw new MembershipRefusal(`refusing to ${verb} ${member.name}: ${facts.ownership.reason}. Nothing was changed.`);
      }
      const removing = facts.live ? removal(how, facts, facts.live) : [];
      return departure === 'leave' ? [...removing, ...leaveVm(member, facts)] : replacement(member, facts, removing);
    },
    async apply(changes) {
      for (const { action } of changes) {
        if (action.kind === 'move-leader') await moveLeader(clients, member, action.to);
        else if (action.kind === 'remove') {
          await firstAnswering(clients, how.staying, (client) => client.cluster.memberRemove({ ID: action.id }));
        } else {
          await applyToVm(await remote.virshFor(member), member, action);
        }
      }
    },
  };
}

/** etcd's list and leader (from a member that stays), the voters' health, and the member's domain and volumes (one probe). */
async function departFacts(inventory: Inventory, clients: EtcdClients, remote: RemoteContext, how: DepartOptions): Promise<DepartFacts> {
  const { member, staying, owner } = how;
  const volumes = volumesOf(member);
  const volumeQuestions = Object.fromEntries(volumes.map((v, i) => [`volume${i}`, volInfo(v.pool, v.name)]));
  const questions = { ...ownerQuestions(member), replacing: replacingQuestion(member), ...volumeQuestions };
  const [{ answer: list, member: asked }, answers] = await Promise.all([
    firstAnswering(clients, staying, (client) => client.cluster.memberList({})),
    remote.probe<string>(member, questions),
  ]);
  const status = await (await clients.for(asked)).maintenance.status({});
  const listed = list.members.map(liveMember);
  const live = listed.find((m) => m.peerURLs.includes(peerUrl(inventory, member)));
  return {
    ...(live ? { live } : {}),
    ...(status.leader && status.leader !== '0' ? { leaderId: status.leader } : {}),
    ...(await votersHealth(inventory, clients, member, votingSets(inventory, listed, member, how))),
    vm: answers.state!.code === 0 ? answers.state!.output.trim() : 'absent',
    ownership: judgeOwnership(
      member.name,
      { mark: answers.mark!, title: answers.title!, state: answers.state! },
      owner.identity,
      owner.adopt.has(member.name),
    ),
    markedReplacing: isMarkedReplacing(member.name, answers.replacing!),
    volumes: volumes.filter((_, i) => answers[`volume${i}`]?.code === 0).map((v) => `${v.pool}/${v.name}`),
  };
}

const vmOf = (member: Member): string => `VM ${member.name} on ${member.hypervisor.name}`;

/** Leadership moved away if the member leads, then the removal, or a refusal. */
function removal({ departure, member, staying }: DepartOptions, facts: DepartFacts, live: LiveMember): Change<DepartAction>[] {
  const refusal = quorumRefusal(facts, live);
  if (refusal) {
    const unhealthy = facts.unhealthy.length ? ` (not healthy: ${facts.unhealthy.join(', ')})` : '';
    throw new MembershipRefusal(`refusing to remove ${member.name}: ${refusal}${unhealthy}. Nothing was changed.`);
  }
  const changes: Change<DepartAction>[] = [];
  if (facts.leaderId === live.id) {
    // To a member that stays where one is healthy: a departing one would only have to hand it on again.
    const to = facts.healthy.find((m) => staying.some((s) => s.name === m.name)) ?? facts.healthy[0]!;
    changes.push({ summary: `move leadership from ${member.name} to ${to.name} first`, action: { kind: 'move-leader', to } });
  }
  const why = departure === 'replace' ? '; it joins again empty and takes its data from the cluster' : '';
  const id = `member ID ${BigInt(live.id).toString(16)}${live.isLearner ? ', a learner' : ''}`;
  changes.push({ summary: `remove ${member.name} from the cluster (${id})${why}`, action: { kind: 'remove', id: live.id } });
  return changes;
}

/** A leaver's VM goes; its volumes stay. */
function leaveVm(member: Member, facts: DepartFacts): Change<DepartAction>[] {
  if (facts.vm === 'absent') return [];
  const kept = facts.volumes.length ? `; its volumes stay (${facts.volumes.join(', ')}: virsh vol-delete removes them)` : '';
  const running = facts.vm !== 'shut off';
  return [{ summary: `${running ? 'stop and ' : ''}undefine ${vmOf(member)}${kept}`, action: { kind: 'undefine', running } }];
}

/**
 * A replacement, in the order that keeps a record of it until nothing of the old member is left:
 * with a domain, marked first and undefined last; without one, only etcd's listing (with its disks
 * gone) says so, and the disks go before the removal.
 */
function replacement(member: Member, facts: DepartFacts, removing: Change<DepartAction>[]): Change<DepartAction>[] {
  const deletion = volumeDeletion(member, facts);
  if (facts.vm === 'absent') return [...deletion, ...removing];
  const active = facts.ownership.kind === 'ours' || facts.ownership.kind === 'to-mark' ? facts.ownership.running : false;
  const mark: Change<DepartAction>[] = facts.markedReplacing
    ? []
    : [
        {
          summary: `mark domain ${member.name} as being replaced (libvirt metadata): a run stopped from here on finishes the replacement`,
          action: { kind: 'mark-replacing', active, ...(facts.live ? { memberId: facts.live.id } : {}) },
        },
      ];
  const stop: Change<DepartAction>[] = facts.vm === 'shut off' ? [] : [{ summary: `stop ${vmOf(member)}`, action: { kind: 'stop' } }];
  const undefine: Change<DepartAction> = {
    summary: `undefine ${vmOf(member)} (its being-replaced mark goes with it)`,
    action: { kind: 'undefine', running: false },
  };
  return [...mark, ...removing, ...stop, ...deletion, undefine];
}

/** A replaced member's volumes that exist, deleted (the tool's own only: the operator's are refused). */
function volumeDeletion(member: Member, facts: DepartFacts): Change<DepartAction>[] {
  const existing = volumesOf(member).filter((v) => facts.volumes.includes(`${v.pool}/${v.name}`));
  const named = (volumes: readonly Volume[]) => volumes.map((v) => `${v.pool}/${v.name}`).join(', ');
  const theirs = existing.filter((v) => !v.ours);
  if (theirs.length > 0) {
    throw new MembershipRefusal(
      `refusing to replace ${member.name}: its volume(s) ${named(theirs)} are the operator's (volume_id / data_volume_id); ` +
        'a replacement needs them empty: recreate them yourself. Nothing was changed.',
    );
  }
  if (existing.length === 0) return [];
  const volumes = existing.map(({ pool, name }) => ({ pool, name }));
  const summary = `delete ${member.name}'s volumes ${named(existing)} (the old member's disks are never reused)`;
  return [{ summary, action: { kind: 'delete-volumes', volumes } }];
}

/** How long a departing member's etcd is given to stop, through its guest agent, before its VM is destroyed anyway. */
const ETCD_STOP_MS = 20_000;

/**
 * A departing member's VM stopped: its etcd first, through the QEMU guest agent, then the VM destroyed. etcd
 * stopping closes its clients' connections, and they fail over at once; a VM destroyed under a running etcd leaves
 * them open with nothing behind them, and a client waits out its deadline (bench:availability's replace-leader on
 * 2026-12-03: 3.3 s without an acknowledged write, where the lab's restarts cost 0.4-0.6 s). The agent rather than
 * SSH: it answers a member whose network is gone. Nothing waits on it: an agent that does not answer, or an etcd
 * that does not stop, leaves the VM to be destroyed as before.
 */
export async function stopMemberVm(virsh: VirshAsker & Pick<Virsh, 'run'>, domain: string): Promise<void> {
  await runThroughAgents(virsh, [{ domain, path: '/bin/systemctl', args: ['stop', 'etcd'] }], ETCD_STOP_MS).catch(() => undefined);
  await virsh.run(['destroy', domain]);
}

/** libvirt's part of a departure. */
async function applyToVm(virsh: Virsh, member: Member, action: Exclude<DepartAction, { kind: 'move-leader' | 'remove' }>): Promise<void> {
  if (action.kind === 'mark-replacing') {
    await virsh.run(markReplacingArgs(member, action.memberId, action.active));
  } else if (action.kind === 'stop') {
    // Its disks are deleted next: a VM that did not stop must stop the replacement (it may have stopped by itself meanwhile).
    await stopMemberVm(virsh, member.name).catch((error: Error) => {
      if (!/domain is not running/i.test(error.message)) throw error;
    });
  } else if (action.kind === 'undefine') {
    // Stopped at once: it is no member any more, and nothing in it is kept.
    if (action.running) await stopMemberVm(virsh, member.name).catch(() => undefined);
    await virsh.run(['undefine', member.name]);
  } else {
    for (const volume of action.volumes) await virsh.run(['vol-delete', '--pool', volume.pool, volume.name]);
  }
}

/**
 * What is known of each departing member before any departure, for orderDepartures: whether its
 * domain runs (libvirt's answer, left for the steps that ask it too) and whether its etcd answers with
 * a leader. Asked once, before the departures' order is fixed; each departure asks again for itself.
 */
export async function departingHealth(
  clients: EtcdClients,
  remote: RemoteContext,
  departing: readonly Member[],
): Promise<Map<string, KnownHealth>> {
  const known = await Promise.all(
    departing.map(async (member) => {
      const state = await remote.probe(member, { state: ownerQuestions(member).state }).then(
        ({ state: answer }) => answer,
        () => undefined,
      );
      const domainRunning =
        state === undefined
          ? undefined
          : state.code === 0
            ? state.output.trim() === 'running'
            : saysDomainMissing(state.output)
              ? false
              : undefined;
      // Not asked of a VM known not to run: the answer would take the whole wait.
      const etcdHasLeader = domainRunning === false ? undefined : await hasLeaderNow(clients, member);
      return [member.name, knownHealth({ domainRunning, etcdHasLeader })] as const;
    }),
  );
  return new Map(known);
}

export const depart = deployStep({
  id: 'depart',
  kind: 'operation',
  on: 'etcd',
  selectable: false,
  changes: ['libvirt', 'guest', 'vm'],
  results: ['leave', 'replace'],
  doc: 'members replaced or marked absent, one at a time, never below a healthy quorum: removed from etcd, VM undefined',
  asksHypervisor: (member) => [replacingQuestion(member)],
  run: (planned, run) => {
    const { inventory, clients, remote, membersNamed } = run.resources;
    // The gather stage's departures are judged together; a replacement onto a new image, alone (each
    // one after the member before it has joined again).
    const member = planned.image ? membersNamed([planned.member])[0]! : departingNamed(run.membership, [planned.member])[0]!;
    const together = run.plan.flatMap((phase) => (phase.step === 'depart' && !phase.image ? [phase.member] : []));
    return run.runner.runStep(
      departStep({
        inventory,
        clients,
        remote,
        how: {
          departure: planned.departure,
          member,
          // A member replaced on a new image is still among the voters the gather stage saw.
          staying: run.membership.voting.filter((voter) => voter.name !== member.name),
          alsoDeparting: planned.image ? [member] : departingNamed(run.membership, together),
          assumedRemoved: departingNamed(run.membership, planned.assumedRemoved),
          owner: run.resources.owner(),
        },
      }),
    );
  },
});

/** Members leaving or replaced, by name: a member marked absent is no longer among the inventory's members. */
function departingNamed(membership: MembershipPlan, names: readonly string[]): Member[] {
  const all = [...membership.replacements, ...membership.leavers].map(({ member }) => member);
  return names.map((name) => {
    const member = all.find((m) => m.name === name);
    if (!member) throw new Error(`${name} is not among the members to replace or leave`);
    return member;
  });
}
