import { InputError } from '../core/errors.ts';
import type { Runner } from '../core/runner.ts';
import type { Inventory } from '../inventory/model.ts';
import { checkRotationFlag, readCaRotation, type RotationTarget } from '../pki/ca-rotation.ts';
import { readPeerTrust } from '../pki/peer-trust.ts';
import { rotationRefusal } from '../pki/plan.ts';
import { requireLoginKeys } from '../inventory/login-keys.ts';
import type { ClientIdentities } from '../etcd/identities.ts';
import { preloadEtcdClient, type EtcdClients } from '../etcd/client.ts';
import type { RunLockGate } from '../etcd/run-lock.ts';
import type { HypervisorConnections, Unreachable } from '../remote/hypervisors.ts';
import { DeployContext } from './context.ts';
import { gather, prefetchFacts } from './gather.ts';
import { buildPlan, selectedBy, selectMembers, validateTags, type PlannedPhase } from './plan.ts';
import { DeployExecution } from './execute.ts';
import type { CommandTime } from '../remote/command-times.ts';

/**
 * The deploy: the pki step, then gather → plan → execute.
 *   gather   what the run starts from, asked before anything else changes (deploy/gather.ts): has the
 *            cluster formed, who is in it, who joins, leaves or is replaced, the networks' names
 *   plan     the ordered phases, as data (deploy/plan.ts): `deploy --list-phases` prints them
 *   execute  each phase's steps over its pass's members (deploy/execute.ts)
 * The steps and their order are in steps/registry.ts.
 */

export interface PipelineOptions {
  dryRun: boolean;
  renderOnly?: string;
  /** Gather, then print the plan instead of running it (as a dry-run would run it). */
  listPhases?: boolean;
  limit?: string[];
  /** Only these steps (besides the ones that always run). */
  tags?: string[];
  /** Not these steps. */
  skipTags?: string[];
  /** Re-issue every leaf certificate (members, root client) in this run. */
  renewCerts?: boolean;
  /** --rotate-ca: start a CA rotation, or move the one under way on (pki/ca-rotation.ts). */
  rotateCa?: RotationTarget;
  /** Members to replace (--replace): removed, their VM and volumes deleted, joined again empty. */
  replace?: string[];
  /** Members whose existing domains, without the tool's mark, are taken as this cluster's (--adopt). */
  adopt?: string[];
  /** --diff: the run shows its changes' diffs (a dry-run always does). */
  diff?: boolean;
  /** --accept-mismatch: the run goes on after a recorded mismatch of the members' data, and compares them again. */
  acceptMismatch?: boolean;
  /**
   * Asked before the run's first phase, through the run's own hypervisor connections and identities:
   * the cluster's run lock (etcd/run-lock.ts), looked at now (a throw stops the run) and taken before
   * the first change; released before the run's connections close.
   */
  hold?: (run: {
    connections: HypervisorConnections;
    identities: ClientIdentities;
    clients: EtcdClients;
  }) => Promise<RunLockGate | undefined>;
}

export interface DeployOutcome {
  /** Files --render-only wrote. */
  written: string[];
  /** --list-phases: the plan the run would take. */
  plan?: PlannedPhase[];
  /** Hypervisors the run could not reach, the selected members on each, and why. */
  unreachable: (Unreachable & { hypervisor: string; members: string[] })[];
  /** Members whose guest agent did not answer this run (their facts came over SSH), and why. */
  guestAgentUnanswered: { member: string; reason: string }[];
  /** The slowest commands sent into members (--profile). */
  slowestCommands: CommandTime[];
}

/** How many of the run's commands in members --profile lists. */
const SLOWEST_COMMANDS_SHOWN = 10;

/** Names in --replace / --adopt must be the inventory's present members. */
function validateNames(inventory: Inventory, options: PipelineOptions): void {
  for (const [flag, names] of [
    ['--replace', options.replace],
    ['--adopt', options.adopt],
  ] as const) {
    const unknown = (names ?? []).filter((name) => !inventory.members.some((member) => member.name === name));
    if (unknown.length > 0)
      throw new InputError(
        `${flag} names members the inventory does not have (present): ${unknown.join(', ')}; ` +
          `members are ${inventory.members.map((m) => m.name).join(', ')}`,
      );
  }
}

/**
 * --rotate-ca: over the whole cluster, with the steps that roll it, on a CA the tool can rotate, and the
 * rotation under way if there is one (pki/ca-rotation.ts).
 */
function checkRotation(inventory: Inventory, options: PipelineOptions): void {
  const target = options.rotateCa;
  if (!target) return;
  if (options.limit || options.renderOnly !== undefined)
    throw new InputError(`--rotate-ca ${target} rolls every member: it excludes --limit and --render-only`);
  const unselected = (['guest', 'health'] as const).filter((step) => !selectedBy(options)(step));
  if (unselected.length > 0)
    throw new InputError(
      `--rotate-ca ${target} rolls members with the guest and health steps: --tags / --skip-tags leave out ${unselected.join(', ')}`,
    );
  checkRotationFlag(readCaRotation(inventory.stateDir), target);
  const refusal = rotationRefusal(inventory, { ...peerTrustOf(inventory.stateDir) }, target);
  if (refusal) throw new InputError(`--rotate-ca ${target}: ${refusal}`);
}

const peerTrustOf = (stateDir: string) => {
  const peerTrust = readPeerTrust(stateDir);
  return peerTrust ? { peerTrust } : {};
};

/** The options' and the inventory's bad input a run can find before it writes or asks anything: exit 2. */
export function checkDeployInput(inventory: Inventory, options: PipelineOptions): void {
  validateTags(options);
  validateNames(inventory, options);
  checkRotation(inventory, options);
  // --render-only asks no host.
  if (options.renderOnly === undefined) requireLoginKeys(inventory);
}

export async function runDeploy(inventory: Inventory, runner: Runner, options: PipelineOptions): Promise<DeployOutcome> {
  checkDeployInput(inventory, options);
  const members = selectMembers(inventory, options.limit);
  // Whole seconds: certificate times have no finer resolution, and one issued in this run must not look older than the run.
  const runStarted = new Date(Math.floor(Date.now() / 1000) * 1000);
  // Every run but --render-only asks etcd, the lock first: its client's modules (~0.15 s) load while SSH connects.
  if (options.renderOnly === undefined) void preloadEtcdClient();
  const context = await runner.timed('open the state directory', () => DeployContext.open(inventory, options.adopt ?? [], runner.facts));
  let held: RunLockGate | undefined;
  const outcome = (extra: Partial<DeployOutcome> = {}): DeployOutcome => ({
    written: [],
    unreachable: [...context.remote.connections.unreachable].map(([hypervisor, why]) => ({
      hypervisor,
      ...why,
      members: members.filter((member) => member.hypervisor.name === hypervisor).map((member) => member.name),
    })),
    guestAgentUnanswered: [...context.guestProbe.agentFailures].map(([member, reason]) => ({ member, reason })),
    slowestCommands: context.commandTimes.slowest(SLOWEST_COMMANDS_SHOWN),
    ...extra,
  });
  try {
    // Every fact the gather and the steps read, asked while the lock is looked at: libvirt's on each
    // hypervisor, and the guests' own (the longest wait of a run that changes nothing).
    if (options.renderOnly === undefined) prefetchFacts(context, members, selectedBy(options)('guest'));
    // The first connection to each hypervisor and tunnel into etcd are made here (the facts asked ahead share them).
    const { hold } = options;
    if (hold)
      held = await runner.timed('run lock: look (connecting)', () =>
        hold({ connections: context.remote.connections, identities: context.identities, clients: context.clients }),
      );
    const gate = held;
    if (gate) runner.gateChanges(() => gate.beforeFirstChange());
    const execution = new DeployExecution(context, runner, options, runStarted);
    await execution.runPki();
    if (runner.failed) return outcome();
    const gathered = await gather(context, runner, members, options);
    if (!gathered) return outcome();
    const plan = buildPlan(inventory, options, gathered.record);
    if (options.listPhases) return outcome({ plan });
    // Only for a run that asks auth or users: no guest pays a TLS handshake for a connection nothing reads.
    const asksAuth = (['auth', 'users'] as const).some(selectedBy(options));
    if (gathered.record.formed && options.renderOnly === undefined && asksAuth) context.warmAuthConnections();
    await execution.run({ membership: gathered.membership, networkNames: gathered.networkNames, plan });
    return outcome({ written: execution.written });
  } finally {
    // What the guests' files were read as, for the next run (a dry-run writes nothing).
    const unsaved = options.dryRun ? undefined : context.guestProbe.digests.save();
    if (unsaved) console.error(`warning: ${unsaved}`);
    const holding = held;
    if (holding) await runner.timed('run lock: release', () => holding.release());
    await runner.timed('close connections', () => context.close());
  }
}
