import type { FactCache } from '../core/facts.ts';
import { join } from 'node:path';
import { obtainRelease, type Release } from '../upgrade/release.ts';
import { releaseTag, sameVersion, type EtcdVersion } from '../upgrade/version.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import { clientIdentities, type ClientIdentities } from '../etcd/identities.ts';
import { EtcdClients } from '../etcd/client.ts';
import { GuestProbe } from '../guest/probe.ts';
import { DigestMemory } from '../guest/digest-memory.ts';
import { RemoteContext } from '../libvirt/context.ts';
import { identityFrom, materialsFrom, readFacts } from '../pki/materials.ts';
import { PkiStore } from '../pki/store.ts';
import { MemberConnections } from '../remote/members.ts';
import type { SnapshotSource } from '../backup/source.ts';
import { renderGuest, renderMemberAndGuest } from '../render/member.ts';
import type { DesiredGuest } from '../render/guest/desired.ts';
import type { FirstStart } from '../render/etcd.ts';
import type { NetworkNames } from '../steps/networks.ts';
import type { Rendered } from '../steps/deploy-step.ts';
import { CommandTimes } from '../remote/command-times.ts';

const renderContext = (inventory: Inventory, store: PkiStore, firstStart: FirstStart, networkNames?: NetworkNames) => ({
  inventory,
  pki: materialsFrom(inventory, readFacts(inventory, store)),
  firstStart,
  ...(networkNames ? { networkNames } : {}),
});

export function renderAll(
  inventory: Inventory,
  members: readonly Member[],
  store: PkiStore,
  firstStart: FirstStart,
  networkNames?: NetworkNames,
): Rendered {
  const context = renderContext(inventory, store, firstStart, networkNames);
  const rendered = members.map((member) => [member.name, renderMemberAndGuest(context, member)] as const);
  return {
    files: new Map(rendered.map(([name, { files }]) => [name, files])),
    guests: new Map(rendered.map(([name, { guest }]) => [name, guest])),
  };
}

/** What each member's guest holds, before the cluster's state is known: which files and units there are does not depend on it. */
export function guestsOf(inventory: Inventory, members: readonly Member[], store: PkiStore): Map<string, DesiredGuest> {
  const context = renderContext(inventory, store, 'existing');
  return new Map(members.map((member) => [member.name, renderGuest(context, member)]));
}

/**
 * The connections and stores one deploy works through, opened once and closed once: hypervisor
 * sessions (libvirt's facts and virsh), etcd clients through them, SSH to the members, the guest
 * agents, the PKI store and (with restore.enabled) the snapshot source.
 */
export class DeployContext {
  readonly remote: RemoteContext;
  readonly identities: ClientIdentities;
  readonly clients: EtcdClients;
  readonly memberSsh: MemberConnections;
  /** Each command sent into a member and how long it took (--profile). */
  readonly commandTimes = new CommandTimes();
  readonly guestProbe: GuestProbe;

  private constructor(
    readonly inventory: Inventory,
    readonly store: PkiStore,
    readonly snapshots: SnapshotSource | undefined,
    readonly adopt: ReadonlySet<string>,
    facts: FactCache,
  ) {
    this.remote = new RemoteContext(facts, this.commandTimes);
    this.identities = clientIdentities(inventory, store);
    this.clients = new EtcdClients(this.remote.connections, inventory.etcd.clientPort, this.identities.health);
    this.memberSsh = new MemberConnections(this.remote.connections, store.adminSsh, this.commandTimes);
    this.guestProbe = new GuestProbe(
      facts,
      this.memberSsh,
      this.remote.sessions,
      () => this.owner().identity.id,
      DigestMemory.load(inventory.stateDir),
    );
    // A VM a step restarted (or undefined) drops the connection into it: the next step connects anew.
    facts.onStale('vm', (name) => {
      const member = inventory.members.find((m) => m.name === name);
      if (member) this.memberSsh.forget(member);
    });
  }

  static async open(inventory: Inventory, adopt: readonly string[], facts: FactCache): Promise<DeployContext> {
    const store = await PkiStore.open(inventory.stateDir);
    // Loaded only when needed: importing the S3 SDK costs ~120 ms at every start otherwise.
    const snapshots = inventory.restore.enabled
      ? new (await import('../backup/source.ts')).SnapshotSource(
          inventory.restore,
          inventory.etcd.spaceQuota,
          // Read when the snapshot is chosen: a run on a new state directory makes the ID in its pki step.
          () => identityFrom(inventory, store).id,
        )
      : undefined;
    return new DeployContext(inventory, store, snapshots, new Set(adopt), facts);
  }

  /** Whose domains this run may touch: read when asked, as the pki step makes the ID and the adoption step changes it. */
  owner() {
    return { identity: identityFrom(this.inventory, this.store), adopt: this.adopt };
  }

  /**
   * Connects, as no user, to the member that bootstraps auth: the auth and users steps ask it so first,
   * through a TLS connection of its own (a handshake in an emulated guest: ~0.1 s). Opened while the
   * phases before them run; any answer, or none, is left to those steps.
   */
  warmAuthConnections(): void {
    for (const member of this.inventory.members.filter((m) => m.bootstrapsAuth))
      void this.clients
        .for(member, this.identities.nonUser(member))
        .then((client) => client.maintenance.status({}))
        .catch(() => undefined);
  }

  #releases = new Map<string, Promise<Release>>();

  /**
   * With binaries: release, a release's archive in the state directory (etcd.version's, or
   * etcd.stage_version's): downloaded (or found and checked again) once per run, when the first member
   * needs it; a failed attempt is tried again. etcd.sha256 pins etcd.version's archive only.
   */
  releaseArchive(version: EtcdVersion): Promise<Release> {
    const { etcd } = this.inventory;
    const tag = releaseTag(version);
    const pinned = etcd.sha256 && etcd.version && sameVersion(etcd.version, version) ? { pinnedSha256: etcd.sha256 } : {};
    let archive = this.#releases.get(tag);
    if (!archive) {
      archive = obtainRelease({ baseUrl: etcd.releaseUrl, version, ...pinned }, join(this.inventory.stateDir, 'releases')).catch(
        (error: unknown) => {
          this.#releases.delete(tag);
          throw error;
        },
      );
      this.#releases.set(tag, archive);
    }
    return archive;
  }

  /** The inventory's members of these names, in the inventory's order (bound: the steps take it apart from the context). */
  readonly membersNamed = (names: readonly string[]): Member[] => this.inventory.members.filter((member) => names.includes(member.name));

  async close(): Promise<void> {
    this.clients.close();
    await this.snapshots?.close();
    await this.memberSsh.closeAll();
    await this.remote.close();
  }
}
