import { join, resolve } from 'node:path';
import { upgradeStep } from '../steps/upgrade.ts';
import { PRIVATE_FILE_MODE, PUBLIC_FILE_MODE, writeFileAtomic } from '../core/files.ts';
import type { Phase, Runner } from '../core/runner.ts';
import type { AnyStep, StepResult } from '../core/step.ts';
import { preloadEtcdClient } from '../etcd/client.ts';
import { formedCluster } from '../etcd/health.ts';
import { inventoryOf, type MembershipPlan } from '../etcd/membership.ts';
import type { Inventory } from '../inventory/model.ts';
import { PEER_STAGE_DOC, writePeerTrust } from '../pki/peer-trust.ts';
import type { RenderedFile } from '../render/member.ts';
import { authStep } from '../steps/auth.ts';
import { cloudInitIsoStep } from '../steps/cloud-init-iso.ts';
import { clusterVersionWait } from '../steps/cluster-version.ts';
import { domainsStep } from '../steps/domains.ts';
import { formationStep } from '../steps/formation.ts';
import { guestQuestions, guestStep } from '../steps/guest.ts';
import { healthWait } from '../steps/health.ts';
import { addLearnerStep, departStep, promoteStep } from '../steps/membership.ts';
import { adoptionStep, ownershipStep } from '../steps/ownership.ts';
import { rebuildStep } from '../steps/rebuild.ts';
import { renderedFilesStep } from '../steps/rendered-files.ts';
import { restoreStep } from '../steps/restore.ts';
import { usersStep } from '../steps/users.ts';
import { volumesStep } from '../steps/volumes.ts';
import type { NetworkNames } from '../steps/networks.ts';
import { renderAll, type DeployContext, type Rendered } from './context.ts';
import { domainUuids, prefetchFacts } from './gather.ts';
import {
  clearMismatch,
  compareMembers,
  compareUntilDefinite,
  mismatchFailure,
  readMismatch,
  recordMismatch,
} from '../verify/consistency.ts';
import { phaseTitle, selectedBy, type Pass, type PlannedPhase, type PlanOptions } from './plan.ts';

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

export interface ExecuteOptions extends PlanOptions {
  diff?: boolean;
  /** --accept-mismatch: an operator looked at the members' recorded mismatch; the run compares them again whatever it changes. */
  acceptMismatch?: boolean;
}

type Shown = Promise<StepResult[] | string>;

/**
 * Runs a plan (deploy/plan.ts): each planned phase becomes the runner's phase, taking the steps it
 * names to the pass's members. What one phase makes for the next is kept here, by pass: the render
 * of a pass feeds its seeds, domains and guests.
 */
export class DeployExecution {
  /** Each pass's last render, by the pass it rendered. */
  readonly #rendered = new Map<string, Rendered>();
  /** Files --render-only wrote. */
  readonly written: string[] = [];
  readonly #access: { auth: AnyStep; users: AnyStep };

  constructor(
    readonly context: DeployContext,
    readonly runner: Runner,
    readonly options: ExecuteOptions,
    readonly membership: MembershipPlan,
    readonly networkNames: NetworkNames,
    readonly plan: readonly PlannedPhase[],
  ) {
    const main = this.clusterOf(membership.voting.map((member) => member.name));
    const members = context.membersNamed(plan.flatMap((phase) => (phase.step === 'auth' ? phase.pass.members : [])));
    this.#access = {
      auth: authStep(main, members, context.clients, context.identities),
      users: usersStep(main, members, context.clients, context.identities),
    };
  }

  /** Runs every phase in order; etcd's users and roles are asked first, while the other steps work. */
  async run(): Promise<void> {
    // Only in a formed cluster: in one forming, etcd cannot answer before the domains start.
    const asked = (step: 'auth' | 'users') => this.plan.some((phase) => phase.step === step && !phase.skip && phase.pass.formed);
    for (const step of ['auth', 'users'] as const) if (asked(step)) this.runner.checkEarly(this.#access[step], 'etcd-access');
    await this.runner.runPhases(this.plan.map((phase) => this.#phase(phase)));
  }

  #phase(planned: PlannedPhase): Phase {
    const title = phaseTitle(planned);
    const { onlyIfClean, needsJoined } = planned;
    const skipIf = onlyIfClean ? () => this.#notClean() : needsJoined ? () => this.#notJoined(needsJoined) : undefined;
    const skip = 'skip' in planned ? planned.skip : undefined;
    const note = 'note' in planned ? planned.note : undefined;
    return { title, run: note ? async () => note : () => this.#run(planned), ...(skip ? { skip } : {}), ...(skipIf ? { skipIf } : {}) };
  }

  /** Why the peer port does not move on in this run: an earlier failure, or a hypervisor that did not answer. */
  #notClean(): string | undefined {
    if (this.runner.failed) return 'a step failed earlier in this run';
    if (this.context.remote.connections.unreachable.size > 0) return 'a hypervisor did not answer';
    return undefined;
  }

  /** Why a join's phase does not run: a joiner it needs failed earlier in this run. */
  #notJoined(joiners: readonly string[]): string | undefined {
    const failed = joiners.filter((name) => this.runner.hasFailed(name));
    return failed.length > 0 ? `${failed.join(', ')} did not join: a step failed on it earlier in this run` : undefined;
  }

  clusterOf(names: readonly string[]): Inventory {
    return inventoryOf(this.context.inventory, this.context.membersNamed(names));
  }

  #renderedFor(pass: Pass): Rendered {
    const rendered = this.#rendered.get(JSON.stringify(pass));
    if (!rendered) throw new Error(`no render for the pass over ${pass.members.join(', ')}: the plan puts render first`);
    return rendered;
  }

  #run(planned: PlannedPhase): Shown {
    switch (planned.step) {
      case 'depart':
        return this.#depart(planned);
      case 'join':
        return this.runner.runStep(
          addLearnerStep(
            this.context.inventory,
            this.context.clients,
            this.context.membersNamed(planned.before),
            this.#member(planned.member),
          ),
        );
      case 'promote':
        return this.runner.runStep(
          promoteStep(
            this.context.inventory,
            this.context.clients,
            this.context.membersNamed(planned.before),
            this.#member(planned.member),
            this.context.inventory.cluster.health_timeout * 1000,
          ),
        );
      case 'formed':
        return this.#settle(planned.pass, planned);
      case 'peer-trust':
        // A change of the run's (the stage the next phases render), under the cluster's lock as any other.
        return this.runner.passGate().then(() => {
          writePeerTrust(this.context.inventory.stateDir, planned.stage);
          return `every member runs the stage before; now ${planned.stage} (${PEER_STAGE_DOC[planned.stage]})`;
        });
      case 'render':
        return this.#render(planned.pass);
      case 'owner':
        return this.#owner(planned.pass);
      case 'health':
        return this.runner.runWait(
          healthWait(this.clusterOf(planned.pass.cluster), this.context.membersNamed(planned.pass.members), this.context.clients, {
            caughtUp: planned.caughtUp === true,
          }),
        );
      case 'cluster-version':
        return this.runner.runWait(
          clusterVersionWait(
            this.clusterOf(planned.pass.cluster),
            this.context.membersNamed(planned.pass.members),
            this.context.clients,
            this.context.identities.root,
          ),
        );
      case 'rebuild':
        return this.runner.runStep(
          rebuildStep(
            this.clusterOf(this.membership.voting.map((member) => member.name)),
            this.#member(planned.member),
            this.context.remote,
            this.context.clients,
          ),
        );
      case 'auth':
      case 'users':
        return this.runner.runStep(this.#access[planned.step]);
      case 'upgrade':
        return this.runner.runStep(
          upgradeStep({
            inventory: this.clusterOf(planned.pass.cluster),
            clients: this.context.clients,
            root: this.context.identities.root,
            inMember: async (member, argv) => (await this.context.memberSsh.get(member)).exec(argv),
          }),
        );
      case 'consistency':
        return this.#consistency();
      case 'guest':
        // Asked in one batch per hypervisor, for the members whose answers the run does not hold already.
        this.#prefetchGuests(planned.pass);
        return this.runner.runStep(this.#converge('guest', planned.pass));
      default:
        return this.runner.runStep(this.#converge(planned.step, planned.pass));
    }
  }

  /**
   * After a run that changed a member: the voting members' data compared (verify/consistency.ts). A difference is
   * recorded in etcd and fails the run; an agreement found with --accept-mismatch removes the record.
   */
  async #consistency(): Shown {
    const { clients, inventory } = this.context;
    const members = inventory.members;
    const root = this.context.identities.root();
    const changed = new Set(this.runner.results.flatMap((result) => (result.status === 'changed' ? [result.host] : [])));
    const touched = members.filter((member) => changed.has(member.name)).map((member) => member.name);
    if (touched.length === 0 && !this.options.acceptMismatch) return 'no member changed in this run: nothing to compare';
    const comparison = await compareUntilDefinite(() => compareMembers(clients, members, root));
    const after = touched.length > 0 ? `after changes on ${touched.join(', ')}` : 'with --accept-mismatch';
    if (comparison.kind === 'unknown')
      throw new Error(`could not compare the members' data ${after}: ${comparison.detail}; run etcd-kvm verify`);
    if (comparison.kind === 'differ') {
      await this.runner.passGate();
      await recordMismatch(clients, members, root, { at: new Date().toISOString(), detail: comparison.detail });
      throw new Error(mismatchFailure(comparison.detail));
    }
    const recorded = this.options.acceptMismatch ? await readMismatch(clients, members, root) : undefined;
    if (recorded) {
      await this.runner.passGate();
      await clearMismatch(clients, members, root);
    }
    return `the members agree ${after}: ${comparison.detail}${recorded ? `; the mismatch recorded at ${recorded.at} is removed` : ''}`;
  }

  #member(name: string) {
    return this.context.membersNamed([name])[0]!;
  }

  /** The steps of a pass that act on its members' VMs and guests. */
  #converge(step: 'volumes' | 'cloud-init' | 'domain' | 'restore' | 'guest', pass: Pass): AnyStep {
    const { inventory, remote, clients, memberSsh, guestProbe, snapshots } = this.context;
    const cluster = this.clusterOf(pass.cluster);
    const members = this.context.membersNamed(pass.members);
    const rendered = this.#renderedFor(pass);
    switch (step) {
      case 'volumes':
        return volumesStep(cluster, members, remote, { joining: pass.joining, formed: pass.formed });
      case 'cloud-init':
        return cloudInitIsoStep(inventory.stateDir, members, rendered.files, remote);
      case 'domain':
        return domainsStep({ inventory: cluster, members, rendered: rendered.files, context: remote, clients });
      case 'restore':
        return restoreStep(cluster, members, memberSsh, snapshots!, (version) => this.context.releaseArchive(version));
      case 'guest': {
        const diffs = this.options.dryRun || this.options.diff === true;
        return guestStep({
          inventory: cluster,
          members,
          desired: rendered.guests,
          ssh: memberSsh,
          probe: guestProbe,
          clients,
          clusterFormed: pass.formed && !pass.joining,
          joining: pass.joining,
          diffs,
          progress: this.runner.progress,
          releaseArchive: (version) => this.context.releaseArchive(version),
        });
      }
    }
  }

  #prefetchGuests(pass: Pass): void {
    const guests = this.#renderedFor(pass).guests;
    this.context.guestProbe.prefetch(this.context.membersNamed(pass.members), (member) => guestQuestions(guests.get(member.name)!));
  }

  /** What the pass deploys, rendered with the cluster as it is during the pass, and kept for the pass's later phases. */
  #renderPass(pass: Pass): Rendered {
    const rendered = renderAll(
      this.clusterOf(pass.cluster),
      this.context.membersNamed(pass.members),
      this.context.store,
      pass.bootedAhead ? 'booted-ahead' : pass.formed ? 'existing' : 'new',
      this.networkNames,
    );
    this.#rendered.set(JSON.stringify(pass), rendered);
    return rendered;
  }

  /** Render what the pass deploys and record it in the state directory (or write it for review: --render-only). */
  async #render(pass: Pass): Shown {
    const rendered = this.#renderPass(pass);
    if (this.options.renderOnly !== undefined) {
      this.written.push(...writeRendered(this.options.renderOnly, rendered.files));
      return [];
    }
    return this.runner.runStep(renderedFilesStep(this.context.inventory.stateDir, rendered.files));
  }

  /** Always: whatever else a run does on a member's VM, it does only to this cluster's. */
  async #owner(pass: Pass): Shown {
    const { inventory, remote } = this.context;
    void preloadEtcdClient();
    // Asked now for members the cluster phase did not ask (a joiner); each step waits for the answers it takes.
    const members = this.context.membersNamed(pass.members);
    prefetchFacts(this.context, members, selectedBy(this.options)('guest'), this.#renderedFor(pass).guests);
    const owner = this.context.owner();
    const results = await this.runner.runStep(ownershipStep(members, remote, owner));
    // Every member's domain marked in this pass: a migrated state directory stops adopting unmarked ones.
    if (
      !owner.identity.adoptsUnmarked ||
      owner.identity.id === undefined ||
      pass.joining ||
      pass.members.length !== inventory.members.length
    )
      return results;
    const everyDomainMarked = () => results.every((result) => result.status === 'ok' || result.status === 'changed');
    return [...results, ...(await this.runner.runStep(adoptionStep(inventory.stateDir, inventory.cluster.name, everyDomainMarked)))];
  }

  /** One member replaced or leaving (its change drops what the run knew of its VM and guest). */
  async #depart(planned: Extract<PlannedPhase, { step: 'depart' }>): Shown {
    const { inventory, clients, remote } = this.context;
    // The gather stage's departures are judged together; a replacement onto a new image, alone (each
    // one after the member before it has joined again).
    const member = planned.image ? this.#member(planned.member) : this.#departing([planned.member])[0]!;
    const departing = planned.image
      ? [member]
      : this.#departing(this.plan.flatMap((phase) => (phase.step === 'depart' && !phase.image ? [phase.member] : [])));
    return this.runner.runStep(
      departStep(inventory, clients, remote, {
        departure: planned.departure,
        member,
        // A member replaced on a new image is still among the voters the gather stage saw.
        staying: this.membership.voting.filter((voter) => voter.name !== member.name),
        alsoDeparting: departing,
        assumedRemoved: this.#departing(planned.assumedRemoved),
        owner: this.context.owner(),
      }),
    );
  }

  /** Members leaving or replaced, by name: a member marked absent is no longer among the inventory's members. */
  #departing(names: readonly string[]) {
    const all = [...this.membership.replacements, ...this.membership.leavers].map(({ member }) => member);
    return names.map((name) => {
      const member = all.find((m) => m.name === name);
      if (!member) throw new Error(`${name} is not among the members to replace or leave`);
      return member;
    });
  }

  /**
   * Once the cluster has formed in this run, or members have joined: every member's files again with
   * the whole cluster (ETCD_INITIAL_CLUSTER_STATE=existing, the full ETCD_INITIAL_CLUSTER); etcd reads
   * either only when it first starts, so nothing restarts.
   */
  async #settle(pass: Pass, { seeds, guests, formedBefore }: { seeds: boolean; guests: boolean; formedBefore: boolean }): Shown {
    const { inventory, clients, remote } = this.context;
    if (!formedBefore && (await formedCluster(clients, inventory.members)) === undefined)
      return 'the cluster has not formed: members stay `new`';
    const members = this.context.membersNamed(pass.members);
    const rendered = this.#renderPass(pass);
    // The guests asked again now, after every change of this run, and answering while the seeds are rewritten.
    if (guests) this.#prefetchGuests(pass);
    const recorded = await this.runner.runStep(
      formationStep(
        inventory.stateDir,
        inventory.members.map((member) => member.name),
        domainUuids(this.context),
      ),
    );
    const files = [...recorded, ...(await this.runner.runStep(renderedFilesStep(inventory.stateDir, rendered.files)))];
    // The seeds on the hypervisors and the files in the guests at the same time: neither reads the other.
    const [seeded, converged] = await Promise.all([
      seeds ? this.runner.runStep(cloudInitIsoStep(inventory.stateDir, members, rendered.files, remote)) : [],
      guests ? this.runner.runStep(this.#converge('guest', pass)) : [],
    ]);
    return [...files, ...seeded, ...converged];
  }
}
