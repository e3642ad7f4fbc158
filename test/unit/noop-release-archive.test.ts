import test, { type ExecutionContext } from 'ava';
import { Etcd3, type IStatusResponse } from 'etcd3';
import { sha256 } from '../../tasks/core/digest.ts';
import { FactCache } from '../../tasks/core/facts.ts';
import { Runner } from '../../tasks/core/runner.ts';
import { EtcdClients, type ClientIdentity } from '../../tasks/etcd/client.ts';
import { inventoryOf, type MembershipPlan } from '../../tasks/etcd/membership.ts';
import { DigestMemory } from '../../tasks/guest/digest-memory.ts';
import type { GuestFacts } from '../../tasks/guest/facts.ts';
import { GuestProbe } from '../../tasks/guest/probe.ts';
import type { Inventory, Member } from '../../tasks/inventory/model.ts';
import { PkiStore } from '../../tasks/pki/store.ts';
import { MemberConnections } from '../../tasks/remote/members.ts';
import type { SshConnection } from '../../tasks/remote/ssh.ts';
import { parseEnvironmentFile } from '../../tasks/render/etcd.ts';
import { guestReleaseOf } from '../../tasks/render/etcd-release.ts';
import type { DesiredGuest } from '../../tasks/render/guest/desired.ts';
import type { DeployResources, DeployRun, Pass, PlannedPhase, Rendered } from '../../tasks/steps/deploy-step.ts';
import { runPhase } from '../../tasks/steps/registry.ts';
import type { Release } from '../../tasks/upgrade/release.ts';
import { formatVersion, parseVersion, type EtcdVersion } from '../../tasks/upgrade/version.ts';
import { baseDocument, load } from '../helpers/inventory.ts';
import { renderWithPki } from '../helpers/render.ts';
import { unconnected, unusedSshConnection } from '../helpers/unconnected.ts';

/**
 * With binaries: release, a deploy with nothing to install never asks for a release archive: the upgrade and guest
 * phases of a run where every member already runs the inventory's release, run by the registry's steps as a deploy
 * runs them (a real runner checking, planning and applying), through a DeployResources whose releaseArchive records
 * every call. Against it, the same guest phase with one member still on the release before: its install asks for
 * the inventory's release's archive, once. Nothing connects: etcd, the guests and SSH answer from the test.
 */

const TARGET = 'v3.5.30';
const release = guestReleaseOf(parseVersion(TARGET)!);
const previous = guestReleaseOf(parseVersion('v3.5.16')!);
const ALL = ['etcd-1', 'etcd-2', 'etcd-3'];
const main: Pass = { cluster: ALL, members: ALL, joining: false, formed: true };
const NOOP: PlannedPhase[] = [
  { step: 'upgrade', pass: main },
  { step: 'guest', pass: main },
];
const ROOT: ClientIdentity = { label: 'root', caCert: '' };
/** When etcd and the other services started, after their files were written. */
const STARTED = 1_000;

/** A member holding exactly what was rendered for it, every service running what its files say, the release installed. */
function convergedFacts(wanted: DesiredGuest): GuestFacts {
  const contentOf = (path: string) => wanted.files.find((file) => file.path === path)!.content;
  return {
    files: new Map(
      wanted.files.map((file) => [file.path, { digest: sha256(file.content), mode: file.mode, owner: file.owner, mtime: STARTED - 10 }]),
    ),
    units: new Map(
      wanted.services.map((service) => [
        service.unit,
        { loaded: true, enabled: 'enabled', active: 'active', sub: 'running', startedAt: STARTED, needsDaemonReload: false },
      ]),
    ),
    environments: new Map(
      wanted.services.flatMap((service) =>
        service.environment ? [[service.unit, parseEnvironmentFile(contentOf(service.environment.path))] as const] : [],
      ),
    ),
    dataDirInitialized: true,
    cloudInit: { state: 'done' },
    releaseInstalled: true,
    retiredFound: new Set(),
    packageFilesMissing: new Set(),
  };
}

/** The member as a deploy of the release before left it: its files and etcd naming that release, the inventory's not installed. */
function onPreviousRelease(wanted: DesiredGuest): GuestFacts {
  const files = wanted.files.map((file) => ({ ...file, content: file.content.replaceAll(release.dir, previous.dir) }));
  return { ...convergedFacts({ ...wanted, files }), releaseInstalled: false };
}

/** The guests' agents, answering every question with the facts the test holds for the member. */
class AnsweringGuests extends GuestProbe {
  constructor(
    inventory: Inventory,
    memberSsh: MemberConnections,
    readonly answers: ReadonlyMap<string, GuestFacts>,
  ) {
    super(new FactCache(), memberSsh, unconnected(inventory).remote.sessions, () => undefined, DigestMemory.load(inventory.stateDir));
  }

  #answer(member: Member): GuestFacts {
    return structuredClone(this.answers.get(member.name)!);
  }

  override prefetch(): void {}

  override async takeEarly(member: Member): Promise<GuestFacts> {
    return this.#answer(member);
  }

  override async askNow(member: Member): Promise<GuestFacts> {
    return this.#answer(member);
  }
}

/** SSH into the members, recorded: a connection that does not connect (a command through it would fail at once). */
class RecordedSsh extends MemberConnections {
  readonly reached: string[] = [];

  constructor(inventory: Inventory) {
    super(unconnected(inventory).remote.connections, { privateKey: () => 'unused', knownHostsPath: '/nonexistent/known_hosts' });
  }

  override async reach(member: Member): Promise<SshConnection> {
    this.reached.push(member.name);
    return unusedSshConnection();
  }

  override get(member: Member): Promise<SshConnection> {
    return this.reach(member);
  }
}

/** etcd as its members answer Status, each running its version; /version answers nothing (the cluster version is unknown). */
class AnsweringEtcd extends EtcdClients {
  readonly #opened: Etcd3[] = [];

  constructor(
    inventory: Inventory,
    readonly versions: ReadonlyMap<string, string>,
  ) {
    super(unconnected(inventory).remote.connections, inventory.etcd.clientPort, () => ROOT);
  }

  override async for(member: Member): Promise<Etcd3> {
    // A client that never dials (gRPC connects on a call): its Status is the test's.
    const client = new Etcd3({ hosts: '127.0.0.1:1' });
    this.#opened.push(client);
    const id = String(11 + ALL.indexOf(member.name));
    const status: IStatusResponse = {
      header: { cluster_id: '1', member_id: id, revision: '40', raft_term: '2' },
      version: this.versions.get(member.name)!,
      dbSize: '20480',
      leader: '11',
      raftIndex: '50',
      raftTerm: '2',
      raftAppliedIndex: '50',
      errors: [],
      dbSizeInUse: '16384',
      isLearner: false,
    };
    client.maintenance.status = async () => status;
    return client;
  }

  override async endpoint(): Promise<never> {
    throw new Error("/version: not answered in this test (the pre-flight asks it for the cluster's version)");
  }

  override close(): void {
    for (const client of this.#opened) client.close();
    super.close();
  }
}

/** One deploy's run as the steps see it: the test's resources, the pass rendered once, a real runner that applies. */
class StepsRun implements DeployRun {
  readonly runner = new Runner({ dryRun: false, renderer: 'silent' });
  readonly options = { dryRun: false };
  readonly started = new Date();
  readonly written: string[] = [];
  readonly membership: MembershipPlan;

  constructor(
    readonly resources: DeployResources,
    readonly rendered: Rendered,
    readonly plan: readonly PlannedPhase[],
  ) {
    this.membership = { voting: resources.inventory.members, joiners: [], leavers: [], replacements: [] };
  }

  clusterOf(names: readonly string[]): Inventory {
    return inventoryOf(this.resources.inventory, this.resources.membersNamed(names));
  }

  renderPass(): Rendered {
    return this.rendered;
  }

  renderedFor(): Rendered {
    return this.rendered;
  }

  // The probe answers from the test's facts: nothing to ask ahead.
  prefetchGuests(): void {}

  prefetchFacts(): void {}
}

/** The inventory (binaries: release, at TARGET) with its PKI, rendered for a formed cluster once: both tests read it, none changes it. */
let rendering: ReturnType<typeof renderWithPki> | undefined;
function renderedOnce(): ReturnType<typeof renderWithPki> {
  if (!rendering) {
    const doc = baseDocument();
    doc.etcd = { version: TARGET, binaries: 'release' };
    rendering = renderWithPki(load(doc), 'existing');
  }
  return rendering;
}

/**
 * The phases run in order through the registry's steps, over members whose guests answer `guestFacts` and whose etcd
 * runs `versions`: each step's result per target, the versions whose archive was asked for, and the members SSH reached.
 */
async function deployed(
  t: ExecutionContext,
  phases: readonly PlannedPhase[],
  situation: (guests: ReadonlyMap<string, DesiredGuest>) => { guestFacts: Map<string, GuestFacts>; versions: Map<string, string> },
) {
  const { inventory, rendered: files, guests } = await renderedOnce();
  const { guestFacts, versions } = situation(guests);
  const memberSsh = new RecordedSsh(inventory);
  const clients = new AnsweringEtcd(inventory, versions);
  t.teardown(() => clients.close());
  const archivesAsked: string[] = [];
  const resources: DeployResources = {
    inventory,
    store: new PkiStore(inventory.stateDir),
    remote: unconnected(inventory).remote,
    clients,
    identities: { ...unconnected(inventory).identities, root: () => ROOT },
    memberSsh,
    guestProbe: new AnsweringGuests(inventory, memberSsh, guestFacts),
    snapshots: undefined,
    owner: () => {
      throw new Error("the domains' owner: not read by these steps");
    },
    async releaseArchive(version: EtcdVersion): Promise<Release> {
      archivesAsked.push(formatVersion(version));
      throw new Error(`the archive of etcd ${formatVersion(version)}: none in this test`);
    },
    membersNamed: (names) => inventory.members.filter((member) => names.includes(member.name)),
  };
  const run = new StepsRun(resources, { files, guests }, phases);
  for (const phase of phases) await runPhase(phase, run);
  return {
    results: run.runner.results.map((result) => `${result.step}@${result.host}: ${result.status}`),
    errors: run.runner.results.flatMap((result) => (result.error ? [`${result.host}: ${result.error}`] : [])),
    changes: run.runner.results.flatMap((result) => result.changes.map((change) => `${result.host}: ${change.summary}`)),
    archivesAsked,
    reached: memberSsh.reached,
  };
}

const everyMember = <T>(value: (name: string) => T) => new Map(ALL.map((name) => [name, value(name)]));

test('a no-op (every member already runs the inventory release): the upgrade and guest steps ask for no release archive', async (t) => {
  const outcome = await deployed(t, NOOP, (guests) => ({
    guestFacts: everyMember((name) => convergedFacts(guests.get(name)!)),
    versions: everyMember(() => formatVersion(release.version)),
  }));
  // Every target checked and planned nothing: a no-op, not a step that failed before it could ask.
  t.deepEqual(outcome.results, ['upgrade@localhost: ok', 'guest@etcd-1: ok', 'guest@etcd-2: ok', 'guest@etcd-3: ok']);
  t.deepEqual(outcome.errors, []);
  t.deepEqual(outcome.changes, []);
  t.deepEqual(outcome.archivesAsked, [], 'no archive hashed, no checksum list read');
  t.deepEqual(outcome.reached, [], 'a run that changes nothing opens no SSH connection either');
});

test("one member still on the release before: the guest step's install asks for the inventory release's archive, once", async (t) => {
  // The guest phase alone: the upgrade step's pre-flight of a move compares the members' HashKV, which this etcd
  // does not answer; and the upgrade step installs nothing (the guest step's roll does).
  const outcome = await deployed(t, [{ step: 'guest', pass: main }], (guests) => ({
    guestFacts: everyMember((name) => (name === 'etcd-3' ? onPreviousRelease : convergedFacts)(guests.get(name)!)),
    versions: everyMember((name) => (name === 'etcd-3' ? formatVersion(previous.version) : formatVersion(release.version))),
  }));
  t.deepEqual(outcome.results, ['guest@etcd-1: ok', 'guest@etcd-2: ok', 'guest@etcd-3: failed']);
  t.deepEqual(outcome.changes, [
    `etcd-3: install etcd 3.5.30 into ${release.dir} (its release archive, verified on the control node and again in the guest)`,
    'etcd-3: keep the current /etc/etcd/etcd.env for a rollback',
    'etcd-3: update /etc/etcd/etcd.env',
    'etcd-3: restart etcd.service (one member at a time): running with other ETCDKVM_BINARY',
  ]);
  // The install is etcd-3's first change: the archive is asked for before anything is sent into the member.
  t.deepEqual(outcome.errors, ['etcd-3: the archive of etcd 3.5.30: none in this test']);
  t.deepEqual(outcome.archivesAsked, ['3.5.30']);
  t.deepEqual(outcome.reached, ['etcd-3']);
});
