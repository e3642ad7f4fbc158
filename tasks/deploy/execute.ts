import type { Phase, Runner } from '../core/runner.ts';
import { inventoryOf, type MembershipPlan } from '../etcd/membership.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { DeployRun, DeployRunOptions, Pass, PlannedPhase, Rendered, Shown } from '../steps/deploy-step.ts';
import { guestQuestions } from '../steps/guest.ts';
import type { NetworkNames } from '../steps/networks.ts';
import { prepareSteps, runPhase } from '../steps/registry.ts';
import type { DesiredGuest } from '../render/guest/desired.ts';
import { renderAll, type DeployContext } from './context.ts';
import { prefetchFacts } from './gather.ts';
import { PKI_PHASE, phaseTitle, selectedBy, type PlanOptions } from './plan.ts';

/** The plan's options and those the steps read (--diff, --accept-mismatch, --renew-certs). */
export type ExecuteOptions = PlanOptions & DeployRunOptions;

/** What the gather stage hands the phases: who is in the cluster, the networks' names, and the plan made from them. */
export interface Planned {
  membership: MembershipPlan;
  networkNames: NetworkNames;
  plan: readonly PlannedPhase[];
}

/**
 * Runs a plan (deploy/plan.ts): each planned phase becomes the runner's phase, run by the step the
 * registry pairs it with (steps/registry.ts). What one phase makes for the next is kept here, by pass:
 * the render of a pass feeds its seeds, domains and guests. The pki phase runs before the gather
 * stage (the clients etcd is asked through need its certificates); the rest once the plan is made.
 */
export class DeployExecution implements DeployRun {
  /** Each pass's last render, by the pass it rendered. */
  readonly #rendered = new Map<string, Rendered>();
  readonly written: string[] = [];
  #planned: Planned | undefined;

  constructor(
    readonly resources: DeployContext,
    readonly runner: Runner,
    readonly options: ExecuteOptions,
    readonly started: Date,
  ) {}

  get membership(): MembershipPlan {
    return this.#gathered().membership;
  }

  get plan(): readonly PlannedPhase[] {
    return this.#gathered().plan;
  }

  #gathered(): Planned {
    if (!this.#planned) throw new Error('the plan is read before the gather stage made it');
    return this.#planned;
  }

  /** The plan's first phase, before the gather stage. */
  async runPki(): Promise<void> {
    await this.runner.runPhases([this.#phase(PKI_PHASE)]);
  }

  /** Every phase after pki in order; each step's early work (etcd's users and roles asked) starts first, while the others work. */
  async run(planned: Planned): Promise<void> {
    this.#planned = planned;
    prepareSteps(this);
    await this.runner.runPhases(planned.plan.filter((phase) => phase.step !== 'pki').map((phase) => this.#phase(phase)));
  }

  #phase(planned: PlannedPhase): Phase {
    const title = phaseTitle(planned);
    const { onlyIfClean, needsJoined } = planned;
    const skipIf = onlyIfClean ? () => this.#notClean() : needsJoined ? () => this.#notJoined(needsJoined) : undefined;
    const skip = 'skip' in planned ? planned.skip : undefined;
    const note = 'note' in planned ? planned.note : undefined;
    const run = (): Shown => runPhase(planned, this);
    return { title, run: note ? async () => note : run, ...(skip ? { skip } : {}), ...(skipIf ? { skipIf } : {}) };
  }

  /** Why the peer port does not move on in this run: an earlier failure, or a hypervisor that did not answer. */
  #notClean(): string | undefined {
    if (this.runner.failed) return 'a step failed earlier in this run';
    if (this.resources.remote.connections.unreachable.size > 0) return 'a hypervisor did not answer';
    return undefined;
  }

  /** Why a join's phase does not run: a joiner it needs failed earlier in this run. */
  #notJoined(joiners: readonly string[]): string | undefined {
    const failed = joiners.filter((name) => this.runner.hasFailed(name));
    return failed.length > 0 ? `${failed.join(', ')} did not join: a step failed on it earlier in this run` : undefined;
  }

  clusterOf(names: readonly string[]): Inventory {
    return inventoryOf(this.resources.inventory, this.resources.membersNamed(names));
  }

  renderedFor(pass: Pass): Rendered {
    const rendered = this.#rendered.get(JSON.stringify(pass));
    if (!rendered) throw new Error(`no render for the pass over ${pass.members.join(', ')}: the plan puts render first`);
    return rendered;
  }

  renderPass(pass: Pass): Rendered {
    const rendered = renderAll(
      this.clusterOf(pass.cluster),
      this.resources.membersNamed(pass.members),
      this.resources.store,
      pass.bootedAhead ? 'booted-ahead' : pass.formed ? 'existing' : 'new',
      this.#gathered().networkNames,
    );
    this.#rendered.set(JSON.stringify(pass), rendered);
    return rendered;
  }

  prefetchGuests(pass: Pass): void {
    const guests = this.renderedFor(pass).guests;
    this.resources.guestProbe.prefetch(this.resources.membersNamed(pass.members), (member) => guestQuestions(guests.get(member.name)!));
  }

  prefetchFacts(members: readonly Member[], guests: Map<string, DesiredGuest>): void {
    prefetchFacts(this.resources, members, selectedBy(this.options)('guest'), guests);
  }
}
