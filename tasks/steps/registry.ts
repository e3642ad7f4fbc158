import type { Member } from '../inventory/model.ts';
import { auth } from './auth.ts';
import { cloudInit } from './cloud-init-iso.ts';
import { clusterVersion } from './cluster-version.ts';
import { consistency } from './consistency.ts';
import { depart } from './depart.ts';
import type {
  ConvergeRule,
  DeployRun,
  DeployStep,
  FactKind,
  PassStepId,
  PhaseStep,
  PlannedPhase,
  Shown,
  StepEntry,
} from './deploy-step.ts';
import { domain } from './domains.ts';
import { formation } from './formation.ts';
import { formed } from './formed.ts';
import { cluster, members } from './gathered.ts';
import { guest } from './guest.ts';
import { health } from './health.ts';
import { join } from './join.ts';
import { networks } from './networks.ts';
import { peerTrust } from './peer-trust.ts';
import { caRotation } from './ca-rotation.ts';
import { pki } from './pki.ts';
import { rebuild } from './rebuild.ts';
import { render } from './rendered-files.ts';
import { restore } from './restore.ts';
import { owner } from './ownership.ts';
import { upgrade } from './upgrade.ts';
import { users } from './users.ts';
import { volumes } from './volumes.ts';

/**
 * The deploy's steps, in the order a run takes them: the table of contents `--tags`, `--help`, the
 * docs' step table, the plan (deploy/plan.ts) and its executor read. Each step is one module under
 * steps/ (its entry, the facts it asks ahead, how it runs its phases). A converge step (one phase per
 * pass, its entry's `converge`) is that module and its place here; a step with a new place in the run's
 * coordination is also placed by deploy/plan.ts. The plan's phases come in this order:
 * test/unit/deploy-plan.test.ts holds it against every plan of its decision table.
 */
export const DEPLOY_STEPS = [
  pki,
  // The gather stage, as deploy/gather.ts takes it: the cluster phase asks etcd, then who is in it (members) and
  // records the formation (formation); the networks' names after.
  cluster,
  members,
  formation,
  networks,
  upgrade,
  depart,
  render,
  owner,
  volumes,
  cloudInit,
  domain,
  restore,
  guest,
  health,
  clusterVersion,
  auth,
  users,
  rebuild,
  join,
  formed,
  peerTrust,
  caRotation,
  consistency,
] as const;

export type { FactKind, StepEntry };

export type StepId = (typeof DEPLOY_STEPS)[number]['id'];

/** A converge step of the registry: a pass step's (deployStep allows a converge rule on no other). */
export type ConvergeStep = Extract<(typeof DEPLOY_STEPS)[number], { id: PassStepId }> & { converge: ConvergeRule };

/** The converge steps, in the registry's order: each pass takes one phase of each (deploy/plan.ts convergePhases). */
export const CONVERGE_STEPS: readonly ConvergeStep[] = DEPLOY_STEPS.filter((step): step is ConvergeStep => step.converge !== undefined);

/** The steps `--tags` / `--skip-tags` choose among. */
export const SELECTABLE_STEPS: readonly StepId[] = DEPLOY_STEPS.filter((step) => step.selectable).map((step) => step.id);

/** The steps that always run, for messages about the selectable ones. */
export const ALWAYS_RUN: readonly StepId[] = DEPLOY_STEPS.filter((step) => !step.selectable).map((step) => step.id);

const byResultName = new Map<string, StepEntry>(
  DEPLOY_STEPS.flatMap((step: StepEntry) => (step.results ?? [step.id]).map((name) => [name, step] as const)),
);

/** The facts a step's changes make stale (none for a name the registry does not have: maintain's own steps). */
export const staleAfter = (step: string): readonly FactKind[] => byResultName.get(step)?.changes ?? [];

/** `--help`'s list of the steps `--tags` chooses among, one per line. */
export const tagsHelp = (indent: string): string =>
  DEPLOY_STEPS.filter((entry) => entry.selectable)
    .map((step) => `${indent}${step.id.padEnd(11)}${step.doc}`)
    .join('\n');

/** The step that runs each kind of planned phase (a step runs its own id's, or those it names). */
const byPhase = new Map<string, DeployStep>(
  DEPLOY_STEPS.flatMap((step: DeployStep) => (step.run ? (step.phases ?? [step.id]) : []).map((phase) => [phase, step] as const)),
);

/** The step that runs this kind of phase; every kind the plan makes has one (the registry test holds it). */
export function stepRunning(phase: PhaseStep): DeployStep {
  const step = byPhase.get(phase);
  if (!step) throw new Error(`no step runs the phase ${phase}`);
  return step;
}

/** Runs one planned phase with the step the registry pairs it with. */
export function runPhase(phase: PlannedPhase, run: DeployRun): Shown {
  // byPhase pairs each kind of phase with the step that names it, so the step takes this phase's shape.
  return stepRunning(phase.step).run!(phase as never, run);
}

/** Libvirt's questions about a member that the steps ask ahead, in one batch per hypervisor. */
export const hypervisorQuestionsAhead = (member: Member) => DEPLOY_STEPS.flatMap((step: DeployStep) => step.asksHypervisor?.(member) ?? []);

/** Every step's `prepare`, before the first phase. */
export const prepareSteps = (run: DeployRun): void => {
  for (const step of DEPLOY_STEPS as readonly DeployStep[]) step.prepare?.(run);
};
