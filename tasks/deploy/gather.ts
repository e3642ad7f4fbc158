import { CONTROL_NODE, type ControlNode, type Fact } from '../core/step.ts';
import type { Runner } from '../core/runner.ts';
import { preloadEtcdClient } from '../etcd/client.ts';
import { orderDepartures } from '../etcd/departures.ts';
import { formedCluster, type FormedCluster } from '../etcd/health.ts';
import { diskVerdict, gatherQuorumFacts } from '../recover/facts.ts';
import { chooseSurvivor, judgeQuorum } from '../recover/verdict.ts';
import { planMembership, type LiveMember, type MembershipPlan } from '../etcd/membership.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import { peerUrl } from '../inventory/urls.ts';
import { imageQuestions, judgeImage } from '../libvirt/os-image.ts';
import { ownerQuestions } from '../libvirt/ownership.ts';
import { peerStageOfFacts } from '../pki/plan.ts';
import { readFacts } from '../pki/materials.ts';
import { domainUuids, formationFact, formationStep } from '../steps/formation.ts';
import { guestQuestions } from '../steps/guest.ts';
import { departingHealth, isMarkedReplacing, replacingQuestion } from '../steps/depart.ts';
import { hypervisorQuestionsAhead } from '../steps/registry.ts';
import { networkIdsOf, networksFact, type NetworkNames } from '../steps/networks.ts';
import { guestsOf, type DeployContext } from './context.ts';
import type { DeployRecord, ImageChange, PlanOptions } from './plan.ts';

/** What the gather stage learned: the plan's record, and what the phases take as it is (members, network names). */
export interface Gathered {
  record: DeployRecord;
  membership: MembershipPlan;
  networkNames: NetworkNames;
}

/**
 * Facts first, in one batch per host: libvirt's on each hypervisor and the guests' own (through each
 * member's guest agent), asked while other work goes on and taken by the steps that need them.
 */
export function prefetchFacts(
  context: DeployContext,
  of: readonly Member[],
  guestsWanted: boolean,
  guests = guestsOf(context.inventory, of, context.store),
): void {
  if (guestsWanted) prefetchGuestFacts(context, of, guests);
  void context.remote.prefetch(of, hypervisorQuestionsAhead);
}

/**
 * The guests' facts, the longest wait of a run that changes nothing: asked as soon as the run starts,
 * while the cluster's run lock is taken (the guest step asks again before acting on drift they show).
 */
function prefetchGuestFacts(context: DeployContext, of: readonly Member[], guests = guestsOf(context.inventory, of, context.store)): void {
  context.guestProbe.prefetch(of, (member) => guestQuestions(guests.get(member.name)!));
}

/** Is every member's domain known not to run (a hypervisor that does not answer says nothing)? */
async function noDomainRunning(context: DeployContext): Promise<boolean> {
  const { inventory, remote } = context;
  const states = await Promise.all(
    inventory.members.map((member) =>
      remote.probe(member, { state: ownerQuestions(member).state }).then(
        ({ state }) => state,
        () => undefined,
      ),
    ),
  );
  return states.every((state) => state !== undefined && !/^running$/m.test(state.output));
}

/**
 * Members etcd lists whose OS or data volume is gone for certain (see judgeDisks): they are replaced.
 * What is less than certain replaces nothing and is said (`doubts`); the volumes step then stops at
 * that member. A hypervisor that does not answer says nothing here.
 */
async function disksGone(
  context: DeployContext,
  members: readonly Member[],
  live: readonly LiveMember[],
): Promise<{ gone: Map<string, string>; doubts: string[] }> {
  const { inventory, remote, clients } = context;
  const listed = members.filter((member) => live.some((l) => l.peerURLs.includes(peerUrl(inventory, member))));
  const verdicts = await Promise.all(listed.map(async (member) => [member.name, await diskVerdict(remote, clients, member)] as const));
  return {
    gone: new Map(verdicts.flatMap(([name, verdict]) => (verdict.gone ? [[name, verdict.why]] : []))),
    doubts: verdicts.flatMap(([name, verdict]) =>
      !verdict.gone && verdict.why ? [`${name}: ${verdict.why} (--replace ${name} replaces it on purpose)`] : [],
    ),
  };
}

/**
 * Members whose OS disk was built from another image than base_image, followers first and the
 * leader last (leadership moves once at most): rebuilt in place with a data disk, replaced without.
 * A hypervisor that does not answer says nothing here: its members are not rebuilt in this run.
 */
async function imageChanges(context: DeployContext, members: readonly Member[], leader: string | undefined): Promise<ImageChange[]> {
  const verdicts = await Promise.all(
    members.map(async (member) => {
      const questions = imageQuestions(member);
      if (!questions) return undefined;
      const answers = await context.remote.probe(member, questions).catch(() => undefined);
      if (!answers) return undefined;
      // An answer that cannot be read rebuilds nothing: the volumes step says what libvirt answered.
      const verdict = (() => {
        try {
          return judgeImage(member, { ...answers, dataDisk: member.volumes.data !== undefined });
        } catch {
          return undefined;
        }
      })();
      if (!verdict || verdict.kind === 'current') return undefined;
      // A refused one goes to the rebuild step, which says why and changes nothing.
      const how = verdict.kind === 'replace' ? ('replace' as const) : ('rebuild' as const);
      return { member: member.name, from: verdict.from, to: verdict.to, how };
    }),
  );
  const changes = verdicts.filter((change): change is ImageChange => change !== undefined);
  return [...changes.filter((change) => change.member !== leader), ...changes.filter((change) => change.member === leader)];
}

/** Members whose domain carries the being-replaced mark: a replacement an earlier run began. */
async function markedReplacing(context: DeployContext, members: readonly Member[]): Promise<Set<string>> {
  const marked = await Promise.all(
    members.map((member) =>
      context.remote.probe(member, { replacing: replacingQuestion(member) }).then(
        ({ replacing }) => isMarkedReplacing(member.name, replacing),
        () => false,
      ),
    ),
  );
  return new Set(members.filter((_, i) => marked[i]).map((member) => member.name));
}

/**
 * Who is in the cluster: etcd's member list against the inventory, on the control node, so a
 * mismatch the tool will not resolve (a member the inventory lacks, an address changed) stops the run
 * before anything changes.
 */
const membersFact = (
  inventory: Inventory,
  live: LiveMember[],
  gone: Map<string, string>,
  marked: Set<string>,
  replace: readonly string[],
): Fact<MembershipPlan, ControlNode> => ({
  name: 'members',
  targets: [CONTROL_NODE],
  ask: async () => planMembership(inventory, live, { replace: new Set(replace), disksGone: gone, markedReplacing: marked }),
});

const everyoneVotes = (inventory: Inventory): MembershipPlan => ({ voting: inventory.members, joiners: [], leavers: [], replacements: [] });

interface ClusterFacts {
  formed: boolean;
  membership: MembershipPlan;
  /** The leader's name, when etcd answered. */
  leader?: string;
}

/** The cluster phase when etcd answered: who is in it, and formed.json kept up to date. */
async function formedFacts(
  context: DeployContext,
  runner: Runner,
  members: readonly Member[],
  formed: FormedCluster,
  replace: readonly string[],
) {
  const { inventory } = context;
  const [disks, marked] = await Promise.all([disksGone(context, members, formed.members), markedReplacing(context, members)]);
  const { answers, results } = await runner.runFact(membersFact(inventory, formed.members, disks.gone, marked, replace));
  const membership = answers.get(CONTROL_NODE);
  if (!membership) return { shown: results };
  const recorded = await runner.runStep(
    formationStep({
      stateDir: inventory.stateDir,
      members: inventory.members.map((member) => member.name),
      domainUuids: domainUuids(context.remote, context.inventory.members),
    }),
  );
  if (recorded.some((result) => result.status === 'failed')) return { shown: recorded };
  const joining = membership.joiners
    .filter(({ member }) => members.includes(member))
    .map(({ member, stage }) => (stage === 'to-add' ? member.name : `${member.name} (${stage}, resumed)`));
  const notReplaced = disks.doubts.length ? `; not replaced, for want of certain evidence: ${disks.doubts.join('; ')}` : '';
  const line =
    `formed (leader ${formed.leader}): members join as existing` +
    `${joining.length ? `; to join one after another: ${joining.join(', ')}` : ''}${notReplaced}`;
  return { shown: line, value: { formed: true, membership, leader: formed.leader } satisfies ClusterFacts };
}

/** Has the cluster formed, and who is in it? Decides ETCD_INITIAL_CLUSTER_STATE and who joins or leaves. */
async function clusterFacts(
  context: DeployContext,
  runner: Runner,
  members: readonly Member[],
  options: GatherOptions,
): Promise<{ shown: string | Awaited<ReturnType<Runner['runStep']>>; value?: ClusterFacts }> {
  const { inventory, clients } = context;
  void preloadEtcdClient();
  // No member's VM running (a first deploy): nothing can answer, so the probe's timeout is not waited for.
  const asking = formedCluster(clients, inventory.members);
  const formed = await Promise.race([asking, noDomainRunning(context).then((none) => (none ? undefined : asking))]);
  if (formed) return formedFacts(context, runner, members, formed, options.replace ?? []);
  // Every etcd down, or a cluster not formed yet: is_initializing: false, or a VM the cluster formed on, says which.
  const { answers, results } = await runner.runFact(
    formationFact({
      stateDir: inventory.stateDir,
      isInitializing: inventory.cluster.isInitializing,
      domainUuids: domainUuids(context.remote, context.inventory.members),
    }),
  );
  const verdict = answers.get(CONTROL_NODE);
  if (verdict?.formed) await refuseLostQuorum(context);
  return verdict ? { shown: verdict.why, value: { formed: verdict.formed, membership: everyoneVotes(inventory) } } : { shown: results };
}

/** Thrown when the cluster lost its quorum for good: the deploy cannot bring it back, recover can. */
export class QuorumLostError extends Error {}

/**
 * A formed cluster in which no member knows a leader: if that is for good (fewer members than a
 * quorum hold their data), stop before anything changes and say what recover would keep, instead of
 * waiting out the health timeout. Members that are merely down (a power cut) are the deploy's to start.
 */
async function refuseLostQuorum(context: DeployContext): Promise<void> {
  const { inventory, remote, clients } = context;
  const facts = await gatherQuorumFacts(inventory, remote, clients);
  const quorum = judgeQuorum(facts.members, facts.voting);
  if (quorum.kind !== 'lost') return;
  const best = chooseSurvivor(quorum.survivors);
  const fromMember =
    'refused' in best
      ? 'no member survived with its data'
      : `--from-member ${best.name} keeps every write ${best.name} had applied (revision ${best.revision}, raft index ${best.raftIndex})`;
  throw new QuorumLostError(
    `the cluster has lost its quorum for good: ${quorum.why}. Nothing was changed. See what recover would do with ` +
      `etcd-kvm recover -i ${inventory.path} --dry-run: ${fromMember}; --from-snapshot, ` +
      `once no member holds data, keeps what the backup holds (see "Disaster recovery" in docs/operating.md)`,
  );
}

export interface GatherOptions extends PlanOptions {
  replace?: readonly string[];
}

/**
 * The gather stage, after the pki step: whether the cluster has formed, who is in it, the networks'
 * names, the members leaving in the order they leave, and the peer port's stage. Undefined when a
 * fact failed (the run stops there, before anything else changes).
 */
export async function gather(
  context: DeployContext,
  runner: Runner,
  members: readonly Member[],
  options: GatherOptions,
): Promise<Gathered | undefined> {
  const { inventory, store } = context;
  const facts = readFacts(inventory, store);
  const peerStage = peerStageOfFacts(inventory, facts);
  const caRotation = facts.caRotation ? { caRotation: facts.caRotation } : {};
  const networkNames: NetworkNames = new Map();
  if (options.renderOnly !== undefined) {
    const formed = !inventory.cluster.isInitializing;
    return {
      record: { formed, voting: inventory.members.map((m) => m.name), joiners: [], departures: [], peerStage, ...caRotation, rebuilds: [] },
      membership: everyoneVotes(inventory),
      networkNames,
    };
  }
  const cluster = await runner.runPhaseFor('cluster', () => clusterFacts(context, runner, members, options));
  if (!cluster) return undefined;
  const withNetworks = members.filter((member) => networkIdsOf(member).length > 0);
  if (withNetworks.length > 0) {
    // A network_id no hypervisor knows fails that member alone (the runner skips it from then on).
    const names = await runner.runPhaseFor('networks', async () => {
      const { answers, results } = await runner.runFact(networksFact({ members: withNetworks, context: context.remote }));
      return { shown: results, value: answers };
    });
    if (!names) return undefined;
    for (const [member, byId] of names) networkNames.set(member, byId);
  }
  const { membership } = cluster;
  const departing = [
    ...membership.replacements.map(({ member }) => ({ departure: 'replace' as const, member })),
    ...membership.leavers.map(({ member }) => ({ departure: 'leave' as const, member })),
  ];
  // Members known to be down go first: a healthy one removed before them could leave a voting set
  // without a quorum (each departure refuses that too). Their health is asked now, once.
  const known = await departingHealth(
    context.clients,
    context.remote,
    departing.map(({ member }) => member),
  );
  const departures = orderDepartures(departing, known).map(({ departure, member }) => ({ departure, member: member.name }));
  const voting = membership.voting.map((member) => member.name);
  const staying = members.filter((member) => voting.includes(member.name) && !departures.some((d) => d.member === member.name));
  const record: DeployRecord = Object.freeze({
    formed: cluster.formed,
    voting,
    joiners: membership.joiners.map(({ member }) => member.name),
    departures,
    peerStage,
    ...caRotation,
    rebuilds: cluster.formed ? await imageChanges(context, staying, cluster.leader) : [],
  });
  return { record, membership, networkNames };
}
