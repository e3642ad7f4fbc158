import { join, resolve } from 'node:path';
import { PRIVATE_FILE_MODE, PUBLIC_FILE_MODE, writeFileAtomic } from './core/files.ts';
import { InputError } from './core/errors.ts';
import type { Phase, Runner } from './core/runner.ts';
import type { Inventory, Member } from './inventory/model.ts';
import { identityFrom, materialsFrom, readFacts } from './pki/materials.ts';
import { clientIdentities, type ClientIdentities } from './etcd/identities.ts';
import { PkiStore } from './pki/store.ts';
import { renderGuest, renderMember, type RenderedFile } from './render/member.ts';
import type { DesiredGuest } from './render/guest/desired.ts';
import type { InitialClusterState } from './render/etcd.ts';
import { pkiStep } from './steps/pki.ts';
import { renderedFilesStep } from './steps/rendered-files.ts';
import { EtcdClients, preloadEtcdClient } from './etcd/client.ts';
import { RemoteContext } from './libvirt/context.ts';
import { authStep } from './steps/auth.ts';
import { usersStep } from './steps/users.ts';
import { cloudInitIsoStep, seedQuestions } from './steps/cloud-init-iso.ts';
import { domainQuestions, domainsStep } from './steps/domains.ts';
import { domainUuid } from './libvirt/domain-xml.ts';
import { etcdAnswers, formedCluster } from './etcd/health.ts';
import { judgeDisks, type DiskVerdict } from './libvirt/lost-disks.ts';
import type { FormationVerdict, SeenDomains } from './etcd/formation.ts';
import { formationStep, type Unanswered } from './steps/formation.ts';
import { inventoryOf, planMembership, type LiveMember, type MembershipPlan } from './etcd/membership.ts';
import { CONTROL_NODE, type AnyStep, type Step } from './core/step.ts';
import { addLearnerStep, departingHealth, departStep, isMarkedReplacing, promoteStep, replacingQuestion, type Departure } from './steps/membership.ts';
import { orderDepartures } from './etcd/departures.ts';
import { guestQuestions, guestStep } from './steps/guest.ts';
import { GuestProbe } from './guest/probe.ts';
import { healthStep } from './steps/health.ts';
import { restoreStep } from './steps/restore.ts';
import { MemberConnections } from './remote/members.ts';
import type { HypervisorConnections, Unreachable } from './remote/hypervisors.ts';
import { volumeQuestions, volumesStep } from './steps/volumes.ts';
import { adoptionStep, ownershipStep } from './steps/ownership.ts';
import { networkIdsOf, networksStep, type NetworkNames } from './steps/networks.ts';
import { ownerQuestions } from './libvirt/ownership.ts';
import { nextPeerStage, PEER_STAGE_DOC, PEER_STAGES, peerStageOf, readPeerTrust, writePeerTrust, type PeerTrustStage } from './pki/peer-trust.ts';
import { membersDeployedBefore } from './pki/plan.ts';
import { isNotFound, type Question } from './libvirt/virsh.ts';
import { peerUrl } from './inventory/urls.ts';

/**
 * The order of the deploy, in one place:
 *   1. pki       – CA, member and root client certificates, the tool's SSH key (control node)
 *   2. cluster   – has the cluster formed? (any member with a leader; when none answers, a VM it formed on,
 *                  recorded in formed.json; decides ETCD_INITIAL_CLUSTER_STATE)
 *      networks  – only for interfaces given by network_id: the network's name on the member's hypervisor
 *      members   – etcd's member list against the inventory: who votes, who joins, who leaves; a
 *                  mismatch the tool does not resolve stops the run here
 *   3. leave     – each member marked state: absent, one at a time: leadership moved away, removed
 *                  from etcd (never below a healthy quorum), its VM undefined, its volumes kept
 *   then, for the members etcd already has:
 *   4. render    – domain XML, cloud-init files and the guest's contents per member, recorded in the state directory
 *      owner     – is the member's domain this cluster's (its mark)? Another cluster's or an unmarked one
 *                  stops that member here; one an earlier version made gets the mark (always runs)
 *   5. volumes   – OS overlay and data disks (hypervisors, over SSH)
 *   6. cloud-init– the NoCloud seed ISO per member
 *   7. domain    – define, start, autostart; a changed definition is applied by restarting one member
 *                  at a time, leader last, each healthy again before the next
 *   8. restore   – only with restore.enabled: the same etcd-backup snapshot into every member's empty
 *                  data directory (SSH to the member), then etcd starts
 *   9. guest     – every member's files and services as rendered (SSH to the member); etcd restarts
 *                  rolled one member at a time, leader last, never below quorum
 *  10. health    – every member healthy with the inventory's voting members (etcd's API, via the hypervisor)
 *  11. auth      – root role and user, auth enable, from the designated member only
 *      users     – the inventory's application roles and users, from the same member: created, changed,
 *                  and removed when they leave the inventory, only those the tool made
 *  12. join      – each member new to a formed cluster, one at a time: added as a learner, then render
 *                  to guest (4–9) for it alone with the cluster so far, promoted once in sync, health
 *  13. formed    – when this run formed the cluster or members joined: render, seed ISOs and guests
 *                  again with the whole cluster and ETCD_INITIAL_CLUSTER_STATE=existing (no restart:
 *                  etcd reads both only when it first starts)
 * pki, cluster and render always run; --tags / --skip-tags choose among the others.
 */

/** The peer trust stage a finished run moves on to: none before the peer CA was recorded, or once members trust it alone. */
const peerStageAfter = (recorded: PeerTrustStage | undefined): PeerTrustStage | undefined => (recorded ? nextPeerStage(recorded) : undefined);

export interface PipelineOptions {
  dryRun: boolean;
  renderOnly?: string;
  limit?: string[];
  /** Only these steps (besides the ones that always run). */
  tags?: string[];
  /** Not these steps. */
  skipTags?: string[];
  /** Re-issue every leaf certificate (members, root client) in this run. */
  renewCerts?: boolean;
  /** Members to replace (--replace): removed, their VM and volumes deleted, joined again empty. */
  replace?: string[];
  /** Members whose existing domains, without the tool's mark, are taken as this cluster's (--adopt). */
  adopt?: string[];
  /** --diff: the run shows its changes' diffs (a dry-run always does). */
  diff?: boolean;
  /**
   * Taken before the run's first phase, released before its connections close: the cluster's run lock
   * (etcd/run-lock.ts), through the run's own hypervisor connections and identities. A throw stops the run.
   */
  hold?: (run: { connections: HypervisorConnections; identities: ClientIdentities }) => Promise<{ release(): Promise<void> } | undefined>;
}

/** Steps a run can choose with --tags / --skip-tags; pki, cluster and render feed every other step and always run. */
export const SELECTABLE_STEPS = ['volumes', 'cloud-init', 'domain', 'restore', 'guest', 'health', 'auth', 'users'] as const;

export function selectMembers(inventory: Inventory, limit: string[] | undefined): Member[] {
  if (!limit) return inventory.members;
  const unknown = limit.filter((name) => !inventory.members.some((member) => member.name === name));
  if (unknown.length > 0) throw new InputError(`--limit names unknown members: ${unknown.join(', ')}; members are ${inventory.members.map((m) => m.name).join(', ')}`);
  return inventory.members.filter((member) => limit.includes(member.name));
}

export interface Rendered {
  files: Map<string, RenderedFile[]>;
  guests: Map<string, DesiredGuest>;
}

const renderContext = (inventory: Inventory, store: PkiStore, initialClusterState: InitialClusterState, networkNames?: NetworkNames) => ({
  inventory,
  pki: materialsFrom(inventory, readFacts(inventory, store)),
  initialClusterState,
  ...(networkNames ? { networkNames } : {}),
});

export function renderAll(inventory: Inventory, members: Member[], store: PkiStore, initialClusterState: InitialClusterState, networkNames?: NetworkNames): Rendered {
  const context = renderContext(inventory, store, initialClusterState, networkNames);
  return {
    files: new Map(members.map((member) => [member.name, renderMember(context, member)])),
    guests: new Map(members.map((member) => [member.name, renderGuest(context, member)])),
  };
}

/** What each member's guest holds, before the cluster's state is known: which files and units there are does not depend on it. */
function guestsOf(inventory: Inventory, members: Member[], store: PkiStore): Map<string, DesiredGuest> {
  const context = renderContext(inventory, store, 'existing');
  return new Map(members.map((member) => [member.name, renderGuest(context, member)]));
}

/** Writes rendered files for review: DIR/<member>/<file>; files holding secrets are 0600, directories 0700. */
export function writeRendered(dir: string, rendered: Map<string, RenderedFile[]>): string[] {
  const written: string[] = [];
  for (const [member, files] of rendered) {
    for (const file of files) {
      const path = join(resolve(dir), member, file.name);
      writeFileAtomic(path, file.content, file.containsSecrets ? PRIVATE_FILE_MODE : PUBLIC_FILE_MODE);
      written.push(path);
    }
  }
  return written;
}

function validateTags(options: PipelineOptions): void {
  for (const [flag, names] of [['--tags', options.tags], ['--skip-tags', options.skipTags]] as const) {
    // `--tags ,` would select nothing and run none of the steps without a word.
    if (names?.length === 0) throw new InputError(`${flag} names no step; steps are ${SELECTABLE_STEPS.join(', ')} (pki, cluster and render always run)`);
    const unknown = (names ?? []).filter((name) => !(SELECTABLE_STEPS as readonly string[]).includes(name));
    if (unknown.length > 0) throw new InputError(`${flag} names unknown steps: ${unknown.join(', ')}; steps are ${SELECTABLE_STEPS.join(', ')} (pki, cluster and render always run)`);
  }
}

/** One pass of the remote steps over some members, against the cluster as it is during that pass. */
interface Pass {
  /** The cluster during the pass: the whole inventory, or (while members join) the members it has so far. */
  inventory: Inventory;
  members: Member[];
  /** Members joining a formed cluster: added as learners, so their fresh disks and empty data are expected. */
  joining: boolean;
}

export interface DeployOutcome {
  /** Files --render-only wrote. */
  written: string[];
  /** Hypervisors the run could not reach, the selected members on each, and why. */
  unreachable: (Unreachable & { hypervisor: string; members: string[] })[];
  /** Members whose guest agent did not answer this run (their facts came over SSH), and why. */
  guestAgentUnanswered: { member: string; reason: string }[];
}

export async function runDeploy(inventory: Inventory, runner: Runner, options: PipelineOptions): Promise<DeployOutcome> {
  validateTags(options);
  for (const [flag, names] of [['--replace', options.replace], ['--adopt', options.adopt]] as const) {
    const unknown = (names ?? []).filter((name) => !inventory.members.some((member) => member.name === name));
    if (unknown.length > 0) throw new InputError(`${flag} names members the inventory does not have (present): ${unknown.join(', ')}; members are ${inventory.members.map((m) => m.name).join(', ')}`);
  }
  const members = selectMembers(inventory, options.limit);
  // Whole seconds: certificate times have no finer resolution, and one issued in this run must not look older than the run.
  const runStarted = new Date(Math.floor(Date.now() / 1000) * 1000);
  const store = await PkiStore.open(inventory.stateDir);
  let rendered: Rendered = { files: new Map(), guests: new Map() };
  // Names of the libvirt networks members give by network_id, asked on their hypervisors before rendering.
  const networkNames: NetworkNames = new Map();
  // Whose domains this run may touch: read after the pki step, which makes the ID once.
  const owner = () => ({ identity: identityFrom(inventory, store), adopt: new Set(options.adopt ?? []) });
  let written: string[] = [];
  let clusterFormed = !inventory.cluster.is_initializing;
  // Who is in the cluster, from etcd's member list: everyone, unless members are still to join.
  let membership: MembershipPlan = { voting: inventory.members, joiners: [], leavers: [], replacements: [] };
  const remote = new RemoteContext();
  const identity = clientIdentities(inventory, store);
  const clients = new EtcdClients(remote.connections, inventory.etcd.client_port, identity.health);
  // Loaded only when needed: importing the S3 SDK costs ~120 ms at every start otherwise.
  const snapshots = inventory.restore.enabled ? new (await import('./backup/source.ts')).SnapshotSource(inventory.restore, inventory.etcd.space_quota) : undefined;
  // Read when a member is first reached: the pki step may only make the key in this run.
  const adminKey = () => {
    const key = store.read('ssh/admin').privateKey;
    if (key === undefined) throw new Error(`the tool's SSH key ${store.pathsOf('ssh/admin').privateKey} is missing`);
    return key;
  };
  const memberSsh = new MemberConnections(remote.connections, { privateKey: adminKey, knownHostsPath: store.knownHostsPath });
  const guestProbe = new GuestProbe(memberSsh, remote.sessions, () => owner().identity.id);
  const guest = (pass: Pass, { askedAfterEveryChange = false } = {}) => {
    // The domain step starts or restarts VMs and the restore step starts etcd: their changes make early
    // answers stale — unless the answers were asked after them (the `formed` phase asks again).
    const changedEarlier = (name: string) => !askedAfterEveryChange && runner.results.some((result) => result.host === name && (result.step === 'domain' || result.step === 'restore') && result.status === 'changed');
    return guestStep({ inventory: pass.inventory, members: pass.members, desired: rendered.guests, ssh: memberSsh, probe: guestProbe, changedEarlier, clients, clusterFormed: clusterFormed && !pass.joining, dryRun: options.dryRun, diffs: options.dryRun || options.diff === true, progress: runner.progress });
  };
  const selected = (title: string) => (options.tags ? options.tags.includes(title) : true) && !(options.skipTags ?? []).includes(title);
  /**
   * Facts first, in one batch per host: libvirt's on each hypervisor and the guests' own (through each
   * member's guest agent), asked while other work goes on and taken by the steps that need them. A
   * member is asked once per run (until a departure forgets it): the cluster phase starts asking for
   * every selected member, a pass's owner phase asks for those it did not; a step waits for the answers it takes.
   */
  const gatherFacts = (of: readonly Member[], guests: ReadonlyMap<string, DesiredGuest>): Promise<void> => {
    if (selected('guest')) guestProbe.prefetch(of, (member) => guestQuestions(guests.get(member.name)!));
    return remote.prefetch(of, (member) => [
      ...Object.values(ownerQuestions(member)),
      replacingQuestion(member),
      ...Object.values(volumeQuestions(member)),
      ...Object.values(seedQuestions(member)),
      ...Object.values(domainQuestions(member)),
    ]);
  };
  const onlySelected = (phases: Phase[]) => phases.map((phase) => (selected(phase.title) ? phase : { title: phase.title, run: async () => [], skip: 'not selected by --tags / --skip-tags' }));

  /** owner → volumes → cloud-init → domain → restore → guest over one pass's members. */
  const convergePhases = (pass: Pass): Phase[] => [
    {
      // Always: whatever else a run does on a member's VM, it does only to this cluster's.
      title: 'owner',
      run: async () => {
        void preloadEtcdClient();
        // Asked now for members the cluster phase did not ask (a joiner); each step waits for the answers it takes.
        void gatherFacts(pass.members, rendered.guests);
        const identity = owner().identity;
        const results = await runner.runStep(ownershipStep(pass.members, remote, owner()));
        // Every member's domain marked in this pass: a migrated state directory stops adopting unmarked ones.
        if (!identity.adoptsUnmarked || identity.id === undefined || pass.joining || pass.members.length !== inventory.members.length) return results;
        const everyDomainMarked = () => results.every((result) => result.status === 'ok' || result.status === 'changed');
        return [...results, ...(await runner.runStep(adoptionStep(inventory.stateDir, inventory.cluster.name, everyDomainMarked)))];
      },
    },
    ...onlySelected([
      { title: 'volumes', run: () => runner.runStep(volumesStep(pass.inventory, pass.members, remote, { joining: pass.joining, formed: clusterFormed })) },
      { title: 'cloud-init', run: () => runner.runStep(cloudInitIsoStep(inventory.stateDir, pass.members, rendered.files, remote)) },
      { title: 'domain', run: () => runner.runStep(domainsStep({ inventory: pass.inventory, members: pass.members, rendered: rendered.files, context: remote, clients })) },
      ...(snapshots && !pass.joining
        ? [
            {
              title: 'restore',
              // A restore founds a cluster; a member with an empty data directory in a formed one is a replacement (see membership).
              run: async () => (clusterFormed ? 'not run: the cluster has formed, and a restore only founds a new one' : runner.runStep(restoreStep(pass.inventory, pass.members, memberSsh, snapshots, options.dryRun))),
            },
          ]
        : []),
      { title: 'guest', run: () => runner.runStep(guest(pass)) },
    ]),
  ];
  const healthPhase = (pass: Pass): Phase => ({ title: 'health', run: () => runner.runStep(healthStep(pass.inventory, pass.members, clients, options.dryRun, runner.progress)) });

  /** Render (and record) what `pass` deploys, with the cluster as it is during the pass. */
  const renderPhase = (pass: () => Pass): Phase => ({
    title: 'render',
    run: async () => {
      const { inventory: cluster, members: targets } = pass();
      rendered = renderAll(cluster, targets, store, clusterFormed ? 'existing' : 'new', networkNames);
      if (options.renderOnly !== undefined) {
        written = writeRendered(options.renderOnly, rendered.files);
        return [];
      }
      return runner.runStep(renderedFilesStep(inventory.stateDir, rendered.files));
    },
  });

  /** The auth and users steps of the main pass, made once membership is known. */
  let access: { auth: AnyStep; users: AnyStep } | undefined;
  const accessSteps = () => {
    const main = mainPass();
    return (access ??= { auth: authStep(main.inventory, main.members, clients, identity, options.dryRun), users: usersStep(main.inventory, main.members, clients, identity, options.dryRun) });
  };

  /** The members etcd already has, against the cluster they form (all selected members, when nobody joins). */
  const mainPass = (): Pass => {
    const voting = new Set(membership.voting.map((member) => member.name));
    return { inventory: inventoryOf(inventory, membership.voting), members: members.filter((member) => voting.has(member.name)), joining: false };
  };

  /** One joiner, strictly after the one before: added as a learner, its VM created, promoted, and the cluster healthy. */
  const joinPhases = (joiner: Member, before: Member[]): Phase[] => {
    const pass: Pass = { inventory: inventoryOf(inventory, [...before, joiner]), members: [joiner], joining: true };
    return [
      { title: `join ${joiner.name}`, run: () => runner.runStep(addLearnerStep(inventory, clients, before, joiner)) },
      renderPhase(() => pass),
      ...convergePhases(pass),
      { title: `promote ${joiner.name}`, run: () => runner.runStep(promoteStep(inventory, clients, before, joiner, inventory.cluster.health_timeout * 1000)) },
      healthPhase({ ...pass, members: pass.inventory.members.filter((member) => members.includes(member)) }),
    ];
  };

  /**
   * Once the cluster has formed in this run, or members have joined: every member's files again with
   * the whole cluster (ETCD_INITIAL_CLUSTER_STATE=existing, the full ETCD_INITIAL_CLUSTER); etcd reads
   * either only when it first starts, so nothing restarts.
   */
  const settlePhase: Phase = {
    title: 'formed',
    run: async () => {
      const joined = membership.joiners.filter(({ member }) => members.includes(member)).length;
      if (options.dryRun) return clusterFormed ? (joined ? 'a dry-run adds no member' : 'the cluster had formed before this run') : 'a dry-run forms nothing';
      if (clusterFormed && joined === 0) return 'the cluster had formed before this run';
      if (!clusterFormed && (await formedCluster(clients, inventory.members)) === undefined) return 'the cluster has not formed: members stay `new`';
      clusterFormed = true;
      rendered = renderAll(inventory, members, store, 'existing', networkNames);
      const pass: Pass = { inventory, members, joining: false };
      // The guests asked again now, after every change of this run, and answering while the seeds are rewritten.
      if (selected('guest')) guestProbe.prefetch(members, (member) => guestQuestions(rendered.guests.get(member.name)!));
      const files = [...(await recordFormation()), ...(await runner.runStep(renderedFilesStep(inventory.stateDir, rendered.files)))];
      // The seeds on the hypervisors and the files in the guests at the same time: neither reads the other.
      const [seeds, guests] = await Promise.all([
        selected('cloud-init') ? runner.runStep(cloudInitIsoStep(inventory.stateDir, members, rendered.files, remote)) : [],
        selected('guest') ? runner.runStep(guest(pass, { askedAfterEveryChange: true })) : [],
      ]);
      return [...files, ...seeds, ...guests];
    },
  };

  /** Is every member's domain known not to run (from the libvirt facts; a hypervisor that does not answer says nothing)? */
  const noDomainRunning = async (): Promise<boolean> => {
    const states = await Promise.all(inventory.members.map((member) => remote.probe(member, { state: ownerQuestions(member).state }, { keep: true }).then(({ state }) => state, () => undefined)));
    return states.every((state) => state !== undefined && !/^running$/m.test(state.output));
  };

  /** Each member's domain UUID as libvirt has it now (null: no such domain; undefined: its hypervisor did not answer); asked once for members outside --limit. */
  const domainUuids = async (): Promise<SeenDomains> =>
    new Map(
      await Promise.all(
        inventory.members.map(async (member) => {
          const answer = await remote.probe(member, { info: domainQuestions(member).info }, { keep: true }).then(({ info }) => info, () => undefined);
          const seen = answer === undefined ? undefined : answer.code === 0 ? domainUuid(answer.output) : isNotFound(answer, 'domain') ? null : undefined;
          return [member.name, seen] as const;
        }),
      ),
    );
  const recordFormation = (unanswered?: Unanswered) => runner.runStep(formationStep(inventory.stateDir, inventory.members.map((member) => member.name), domainUuids, unanswered));

  /**
   * Members etcd lists whose OS or data volume is gone for certain (see judgeDisks): they are replaced.
   * What is less than certain replaces nothing and is said (`doubts`); the volumes step then stops at
   * that member. A hypervisor that does not answer says nothing here.
   */
  const disksGone = async (live: readonly LiveMember[]): Promise<{ gone: Map<string, string>; doubts: string[] }> => {
    const listed = members.filter((member) => live.some((l) => l.peerURLs.includes(peerUrl(inventory, member))));
    const verdicts = await Promise.all(
      listed.map(async (member) => {
        const { os, data } = volumeQuestions(member);
        const questions: Record<string, Question> = data ? { os: os!, data } : { os: os! };
        // Kept for the volumes step, which asks the same.
        const answers = await remote.probe(member, questions, { keep: true }).catch(() => undefined);
        if (!answers) return [member.name, { gone: false } as DiskVerdict] as const;
        return [member.name, await judgeDisks({ os: answers.os!, ...(answers.data ? { data: answers.data } : {}), etcdAnswers: () => etcdAnswers(clients, member) })] as const;
      }),
    );
    return {
      gone: new Map(verdicts.flatMap(([name, verdict]) => (verdict.gone ? [[name, verdict.why]] : []))),
      doubts: verdicts.flatMap(([name, verdict]) => (!verdict.gone && verdict.why ? [`${name}: ${verdict.why} (--replace ${name} replaces it on purpose)`] : [])),
    };
  };

  /**
   * Members whose domain carries the being-replaced mark: a replacement an earlier run began. A
   * hypervisor that does not answer says nothing here (its members' steps fail later, on their own).
   */
  const markedReplacing = async (): Promise<Set<string>> => {
    const marked = await Promise.all(
      members.map((member) =>
        remote.probe(member, { replacing: replacingQuestion(member) }, { keep: true }).then(
          ({ replacing }) => isMarkedReplacing(member.name, replacing),
          () => false,
        ),
      ),
    );
    return new Set(members.filter((_, i) => marked[i]).map((member) => member.name));
  };

  /**
   * Who is in the cluster: etcd's member list against the inventory, on the control node, so a
   * mismatch the tool will not resolve (a member the inventory lacks, an address changed) stops the run
   * before anything changes.
   */
  const membershipStep = (live: LiveMember[], gone: Map<string, string>, marked: Set<string>): Step<MembershipPlan, never> => ({
    name: 'members',
    targets: [CONTROL_NODE],
    check: async () => planMembership(inventory, live, { replace: new Set(options.replace ?? []), disksGone: gone, markedReplacing: marked }),
    plan(plan) {
      membership = plan;
      return [];
    },
    async apply() {
      // Never called: the plan is data for the passes below, not a change.
    },
  });

  /** One stage of the peer port's move: recorded, then rendered, seeded and rolled over the main pass's members, and health. */
  const peerTrustPass = (main: Pass, next: PeerTrustStage): Phase[] => [
    {
      title: 'peer trust',
      run: async () => {
        writePeerTrust(inventory.stateDir, next);
        return `every member runs the stage before; now ${next} (${PEER_STAGE_DOC[next]})`;
      },
    },
    renderPhase(() => main),
    ...onlySelected([{ title: 'cloud-init', run: () => runner.runStep(cloudInitIsoStep(inventory.stateDir, main.members, rendered.files, remote)) }]),
    {
      title: 'guest',
      run: () => {
        guestProbe.prefetch(main.members, (member) => guestQuestions(rendered.guests.get(member.name)!));
        return runner.runStep(guest(main, { askedAfterEveryChange: true }));
      },
    },
    healthPhase(main),
  ];

  /** A dry-run shows the first stage only (its changes need the record the pki step writes): it says what follows. */
  const peerTrustAhead = (): Phase[] => {
    const stage = peerStageOf(readPeerTrust(inventory.stateDir), membersDeployedBefore(inventory, readFacts(inventory, store)));
    const ahead = PEER_STAGES.slice(PEER_STAGES.indexOf(stage) + 1);
    return ahead.length === 0 ? [] : [{ title: 'peer trust', run: async () => `members run ${stage} after this pass; the run then moves them on to ${ahead.join(', then ')}, each rolled once every member runs the stage before` }];
  };

  let held: { release(): Promise<void> } | undefined;
  try {
    held = await options.hold?.({ connections: remote.connections, identities: identity });
    await runner.runPhases([
      { title: 'pki', run: () => runner.runStep(pkiStep(inventory, store, options.renewCerts ? runStarted : undefined)) },
      ...(options.renderOnly === undefined
        ? [
            {
              title: 'cluster',
              run: async () => {
                void preloadEtcdClient();
                // Asked while etcd answers.
                void gatherFacts(members, guestsOf(inventory, members, store));
                // No member's VM running (a first deploy): nothing can answer, so the probe's timeout is not waited for.
                const asking = formedCluster(clients, inventory.members);
                const formed = await Promise.race([asking, noDomainRunning().then((none) => (none ? undefined : asking))]);
                if (!formed) {
                  // Every etcd down, or a cluster not formed yet: is_initializing: false, or a VM the cluster formed on, says which.
                  let why = '';
                  const decided = (verdict: FormationVerdict) => {
                    clusterFormed = verdict.formed;
                    why = verdict.why;
                  };
                  const results = await recordFormation({ isInitializing: inventory.cluster.is_initializing, decided });
                  return results.some((result) => result.status === 'failed') ? results : why;
                }
                clusterFormed = true;
                const [disks, marked] = await Promise.all([disksGone(formed.members), markedReplacing()]);
                const membershipResults = await runner.runStep(membershipStep(formed.members, disks.gone, marked));
                if (membershipResults.some((result) => result.status === 'failed')) return membershipResults;
                await recordFormation();
                // etcd's users and roles, asked now from the member that manages them, while the other steps work.
                for (const step of ['auth', 'users'] as const) if (selected(step)) runner.checkEarly(accessSteps()[step]);
                const joining = membership.joiners.filter(({ member }) => members.includes(member)).map(({ member, stage }) => (stage === 'to-add' ? member.name : `${member.name} (${stage}, resumed)`));
                const notReplaced = disks.doubts.length ? `; not replaced, for want of certain evidence: ${disks.doubts.join('; ')}` : '';
                return `formed (leader ${formed.leader}): members join as existing${joining.length ? `; to join one after another: ${joining.join(', ')}` : ''}${notReplaced}`;
              },
            },
            ...(members.some((member) => networkIdsOf(member).length > 0) ? [{ title: 'networks', run: () => runner.runStep(networksStep(members, remote, networkNames)) }] : []),
          ]
        : []),
    ]);
    // The rest depends on who is in the cluster, known now.
    const main = mainPass();
    const joiners = membership.joiners.map(({ member }) => member).filter((member) => members.includes(member));
    const voting = [...membership.voting];
    const joins = joiners.flatMap((joiner) => {
      const phases = joinPhases(joiner, [...voting]);
      voting.push(joiner);
      return phases;
    });
    // Members to replace and members marked absent go first, one after another, before anything else
    // is checked against the members that stay.
    const replaced = membership.replacements.map(({ member }) => member).filter((member) => members.includes(member));
    const leaving = options.limit ? [] : membership.leavers.map(({ member }) => member);
    const departing = [...replaced, ...leaving];
    // A dry-run applies no departure: each one after the first is judged as if those before it were done.
    const depart = (departure: Departure, member: Member, before: readonly Member[]): Phase => ({
      title: `${departure} ${member.name}`,
      run: () => {
        // A departure deletes or undefines what was asked about the member.
        remote.forget(member);
        guestProbe.forget(member);
        return runner.runStep(departStep(inventory, clients, remote, { departure, member, staying: membership.voting, alsoDeparting: departing, assumedRemoved: options.dryRun ? before : [], owner: owner() }));
      },
    });
    // Members known to be down go first: a healthy one removed before them could leave a voting set
    // without a quorum (each departure refuses that too). Their health is asked now, once.
    const known = await departingHealth(clients, remote, departing);
    const ordered = orderDepartures([...replaced.map((member) => ({ departure: 'replace' as const, member })), ...leaving.map((member) => ({ departure: 'leave' as const, member }))], known);
    const departures: Phase[] = options.renderOnly !== undefined ? [] : ordered.map(({ departure, member }, i) => depart(departure, member, ordered.slice(0, i).map((earlier) => earlier.member)));
    const stepsNeededToJoin = ['volumes', 'cloud-init', 'domain', 'guest'];
    if (joins.length > 0 && !stepsNeededToJoin.every(selected)) {
      throw new InputError(`${joiners.map((m) => m.name).join(', ')} must join the cluster, which needs the steps ${stepsNeededToJoin.join(', ')}: run without --tags / --skip-tags leaving them out`);
    }
    await runner.runPhases([
      ...departures,
      renderPhase(() => main),
      ...(options.renderOnly === undefined
        ? [
            ...convergePhases(main),
            ...onlySelected([
              healthPhase(main),
              { title: 'auth', run: () => runner.runStep(accessSteps().auth) },
              { title: 'users', run: () => runner.runStep(accessSteps().users) },
            ]),
            ...joins,
            ...onlySelected([settlePhase]),
          ]
        : []),
    ]);
    // The peer port moves to the peer CA one stage per roll, each once every member runs the one before.
    const movesOn = () => options.renderOnly === undefined && !options.limit && !runner.failed && remote.connections.unreachable.size === 0 && selected('guest') && selected('health');
    if (options.dryRun && movesOn()) await runner.runPhases(peerTrustAhead());
    for (let next = peerStageAfter(readPeerTrust(inventory.stateDir)); !options.dryRun && next && movesOn(); next = peerStageAfter(readPeerTrust(inventory.stateDir))) {
      await runner.runPhases(peerTrustPass(main, next));
    }
  } finally {
    await held?.release();
    clients.close();
    await snapshots?.close();
    await memberSsh.closeAll();
    await remote.close();
  }
  const unreachable = [...remote.connections.unreachable].map(([hypervisor, why]) => ({ hypervisor, ...why, members: members.filter((member) => member.hypervisor.name === hypervisor).map((member) => member.name) }));
  return { written, unreachable, guestAgentUnanswered: [...guestProbe.agentFailures].map(([member, reason]) => ({ member, reason })) };
}
