import test from 'ava';
import { Runner } from '../../tasks/core/runner.ts';
import { type CONTROL_NODE, targetName, type AnyStep, type StepResult, type Wait } from '../../tasks/core/step.ts';
import { DeployContext } from '../../tasks/deploy/context.ts';
import { DeployExecution } from '../../tasks/deploy/execute.ts';
import type { MembershipPlan } from '../../tasks/etcd/membership.ts';
import type { Inventory } from '../../tasks/inventory/model.ts';
import type { Pass, PlannedPhase } from '../../tasks/steps/deploy-step.ts';
import { baseDocument, load } from '../helpers/inventory.ts';

/**
 * Each deploy step's module, run by the executor as a real deploy runs it (the registry's pairing, the pass's
 * render, the connections of a DeployContext), with a runner that records the steps and waits it is handed
 * instead of running them: the step's name and its targets, by phase. Nothing connects (the hypervisor's port
 * refuses): what is tested is that each phase builds its step from the run it is given.
 */

/** The steps and waits handed to the runner, as `name@targets`; none of them runs. */
class RecordingRunner extends Runner {
  readonly handed: string[] = [];

  constructor() {
    super({ dryRun: true, renderer: 'silent' });
  }

  #hand(name: string, targets: readonly (string | typeof CONTROL_NODE)[]): StepResult[] {
    this.handed.push(`${name}@${targets.map(targetName).join(',')}`);
    return [];
  }

  override async runStep(step: AnyStep): Promise<StepResult[]> {
    return this.#hand(step.name, step.targets);
  }

  override async runWait<Seen>(wait: Wait<Seen>): Promise<StepResult[]> {
    return this.#hand(`wait:${wait.name}`, wait.targets);
  }
}

function threeMembers(): Inventory {
  const doc = baseDocument();
  doc.hypervisors = { hv: { address: '127.0.0.1', port: 1 } };
  return load(doc);
}

const ALL = ['etcd-1', 'etcd-2', 'etcd-3'];
const main: Pass = { cluster: ALL, members: ALL, joining: false, formed: true };
const everyoneVotes = (inventory: Inventory): MembershipPlan => ({ voting: inventory.members, joiners: [], leavers: [], replacements: [] });

/** Runs the plan's phases (after its pki, which the test does not hand over) through a DeployExecution: what was handed, in order, and whether a phase failed. */
async function handedBy(
  phases: PlannedPhase[],
  inventory = threeMembers(),
  membership = everyoneVotes(inventory),
): Promise<{ handed: string[]; failed: boolean }> {
  const runner = new RecordingRunner();
  const context = await DeployContext.open(inventory, [], runner.facts);
  try {
    const execution = new DeployExecution(context, runner, { dryRun: true }, new Date());
    // The pki phase for real, once: the render reads the certificates it makes.
    await new DeployExecution(context, new Runner({ dryRun: false, renderer: 'silent' }), { dryRun: false }, new Date()).runPki();
    await execution.run({ membership, networkNames: new Map(), plan: [{ step: 'pki' }, ...phases] });
    return { handed: runner.handed, failed: runner.failed };
  } finally {
    await context.close();
  }
}

const render: PlannedPhase = { step: 'render', pass: main };

const rows: { phase: PlannedPhase; handed: string[] }[] = [
  { phase: { step: 'owner', pass: main }, handed: ['owner@etcd-1,etcd-2,etcd-3'] },
  { phase: { step: 'volumes', pass: main }, handed: ['volumes@etcd-1,etcd-2,etcd-3'] },
  { phase: { step: 'cloud-init', pass: main }, handed: ['cloud-init@etcd-1,etcd-2,etcd-3'] },
  { phase: { step: 'domain', pass: main }, handed: ['domain@etcd-1,etcd-2,etcd-3'] },
  { phase: { step: 'guest', pass: main }, handed: ['guest@etcd-1,etcd-2,etcd-3'] },
  { phase: { step: 'health', pass: main }, handed: ['wait:health@etcd-1,etcd-2,etcd-3'] },
  { phase: { step: 'cluster-version', pass: main }, handed: ['wait:cluster-version@etcd-1,etcd-2,etcd-3'] },
  // From the member that bootstraps auth only.
  { phase: { step: 'auth', pass: { ...main, members: ['etcd-1'] } }, handed: ['auth@etcd-1'] },
  { phase: { step: 'upgrade', pass: main }, handed: ['upgrade@localhost'] },
  { phase: { step: 'rebuild', member: 'etcd-3', from: 'a.qcow2', to: 'b.qcow2', how: 'rebuild' }, handed: ['rebuild@etcd-3'] },
  { phase: { step: 'join', member: 'etcd-3', before: ['etcd-1', 'etcd-2'] }, handed: ['add@etcd-3'] },
  { phase: { step: 'promote', member: 'etcd-3', before: ['etcd-1', 'etcd-2'] }, handed: ['promote@etcd-3'] },
  // Formed before the run: the record, the files, the seeds and the guests again, with no etcd asked.
  {
    phase: { step: 'formed', pass: main, seeds: true, guests: true, formedBefore: true },
    handed: ['formation@localhost', 'render@etcd-1,etcd-2,etcd-3', 'cloud-init@etcd-1,etcd-2,etcd-3', 'guest@etcd-1,etcd-2,etcd-3'],
  },
];

for (const row of rows) {
  test.serial(`the ${row.phase.step} phase hands the runner its step over the phase's members`, async (t) => {
    t.deepEqual(await handedBy([render, row.phase]), { handed: ['render@etcd-1,etcd-2,etcd-3', ...row.handed], failed: false });
  });
}

test.serial('a phase the plan marks with a note runs no step: the note is its outcome', async (t) => {
  t.deepEqual(await handedBy([{ step: 'peer-trust', stage: 'peer-only', note: 'members run trust-both after this pass' }]), {
    handed: [],
    failed: false,
  });
});

test.serial('the consistency phase after a run that changed nothing compares nothing and hands no step', async (t) => {
  t.deepEqual(await handedBy([{ step: 'consistency' }]), { handed: [], failed: false });
});

test.serial('a departure is handed over for the member leaving, judged beside the members that stay', async (t) => {
  const inventory = threeMembers();
  const [one, two, three] = inventory.members;
  const membership: MembershipPlan = { voting: [one!, two!], joiners: [], leavers: [{ member: three!, id: '3' }], replacements: [] };
  const leave: PlannedPhase = { step: 'depart', departure: 'leave', member: 'etcd-3', assumedRemoved: [] };
  t.deepEqual(await handedBy([leave], inventory, membership), { handed: ['leave@etcd-3'], failed: false });
});
