import { briefError } from '../core/errors.ts';
import { TOOL_KEY_PREFIX } from '../inventory/reserved.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { ClusterSession } from '../etcd/session.ts';
import { memberAnswers, wholeCluster } from '../etcd/health.ts';
import { Virsh } from '../libvirt/virsh.ts';
import { gatherVerifyFacts } from '../verify/facts.ts';
import { verifyChecks } from '../verify/verdict.ts';
import { checkHistory, longestWriteGapMs, type HistoryVerdict, type Operation } from './history.ts';
import { DrillLoad, finalWrites } from './load.ts';
import { faultTarget, holdFor, sizeRefusal, type FaultAction, type FaultDefinition, type FaultKind } from './plan.ts';

/**
 * A fault drill carried out: the cluster checked first (healthy, three voters or more, verify passes),
 * the drill's own clients started, then each fault in turn on the member plan.ts picks, held, undone
 * (whatever happened), and the cluster waited for until it is healthy again and verify passes. At the
 * end the history is checked (history.ts) and everything the drill wrote is deleted.
 */

export interface DrillTiming {
  /** Load before the first fault, and between faults once the cluster settled. */
  quietMs: number;
  /** How long each fault is held before it is undone. */
  holdMs: number;
  /** How long the cluster may take to be healthy again after a fault (a reset member boots). */
  settleMs: number;
}

export interface FaultResult {
  kind: FaultKind;
  member: string;
  says: string;
  /** Milliseconds from the drill's start. */
  injectedMs: number;
  settledMs?: number;
  leaderBefore: string;
  leaderAfter?: string;
  /** Raft terms the cluster went through: an election each. */
  elections?: number;
  longestWriteGapMs: number;
  failedOperations: number;
  /** verify's failed checks once the cluster settled (none: it passed). */
  verifyFailed: string[];
  /** The fault could not be injected, undone, or the cluster did not settle: the drill stopped here. */
  error?: string;
}

export interface FaultDrillReport {
  started: string;
  faults: FaultResult[];
  history: HistoryVerdict;
  operations: Operation[];
  /** The drill's keys deleted at the end (or why not). */
  cleanup: string;
  passed: boolean;
}

interface ClusterState {
  leader: string;
  term: number;
  /** Why the cluster is not healthy (empty: it is). */
  unhealthy: string[];
}

async function clusterState(inventory: Inventory, session: ClusterSession): Promise<ClusterState> {
  const answers = await memberAnswers(inventory, session.clients);
  const { unwhole, leaderId } = wholeCluster(answers);
  const leader = answers.find(({ status }) => 'id' in status && status.id === leaderId)?.name ?? '';
  const terms = answers.flatMap(({ status }) => ('raftTerm' in status ? [Number(status.raftTerm)] : []));
  return { leader, term: Math.max(0, ...terms), unhealthy: unwhole };
}

async function verifyFailures(inventory: Inventory, session: ClusterSession): Promise<string[]> {
  const checks = verifyChecks(await gatherVerifyFacts(inventory, session.clients, session.root));
  return checks.filter((check) => !check.ok).map(({ check, member, detail }) => `${check}${member ? ` ${member}` : ''}: ${detail}`);
}

/** Why the drill would not start on this cluster now, or nothing. */
export async function drillRefusal(inventory: Inventory, session: ClusterSession): Promise<string | undefined> {
  const size = sizeRefusal(inventory.members.length);
  if (size) return size;
  const state = await clusterState(inventory, session);
  if (state.unhealthy.length > 0) return `the cluster is not healthy: ${state.unhealthy.join('; ')}`;
  const failed = await verifyFailures(inventory, session);
  return failed.length > 0 ? `verify does not pass: ${failed.join('; ')}` : undefined;
}

async function act(session: ClusterSession, member: Member, action: FaultAction): Promise<void> {
  if (action.on === 'hypervisor') {
    const virsh = new Virsh(await session.connections.get(member.hypervisor), member.hypervisor.libvirtUri);
    await virsh.run(action.virsh);
  } else await (await session.members.get(member)).run(action.argv, { describe: `drill: ${action.argv.slice(0, 3).join(' ')}` });
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Healthy again, and verify passing, within the deadline; the state it settled in, or why not. */
async function settled(inventory: Inventory, session: ClusterSession, deadlineMs: number): Promise<ClusterState> {
  for (;;) {
    const state = await clusterState(inventory, session);
    if (state.unhealthy.length === 0) return state;
    if (performance.now() > deadlineMs) throw new Error(`the cluster was not healthy again in time: ${state.unhealthy.join('; ')}`);
    await pause(2_000);
  }
}

/**
 * verify's failed checks once it passes or the deadline is past: a member healthy again may still be catching
 * up on its raft log for a moment, which verify's bound on it sees.
 */
async function verifiedBy(inventory: Inventory, session: ClusterSession, deadlineMs: number): Promise<string[]> {
  for (;;) {
    const failed = await verifyFailures(inventory, session);
    if (failed.length === 0 || performance.now() > deadlineMs) return failed;
    await pause(2_000);
  }
}

interface DrillContext {
  inventory: Inventory;
  session: ClusterSession;
  load: DrillLoad;
  timing: DrillTiming;
  clock: () => number;
  say: (line: string) => void;
}

/** One fault: injected, held, undone whatever happened, the cluster waited for; what clients saw meanwhile. */
async function runFault(context: DrillContext, fault: FaultDefinition, turn: number): Promise<FaultResult> {
  const { inventory, session, load, timing, clock, say } = context;
  const before = await clusterState(inventory, session);
  const name = faultTarget(
    fault,
    inventory.members.map((member) => member.name),
    before.leader,
    turn,
  );
  const member = inventory.members.find((candidate) => candidate.name === name)!;
  const injectedMs = clock();
  const result: FaultResult = {
    kind: fault.kind,
    member: name,
    says: fault.says,
    injectedMs,
    leaderBefore: before.leader,
    longestWriteGapMs: 0,
    failedOperations: 0,
    verifyFailed: [],
  };
  say(`fault ${fault.kind} on ${name}: ${fault.says}`);
  try {
    try {
      await act(session, member, fault.inject(member));
      await pause(holdFor(fault, inventory, timing.holdMs));
    } finally {
      if (fault.heal) await act(session, member, fault.heal(member));
    }
    const deadlineMs = performance.now() + timing.settleMs;
    const after = await settled(inventory, session, deadlineMs);
    result.settledMs = clock();
    Object.assign(result, { leaderAfter: after.leader, elections: Math.max(0, after.term - before.term) });
    result.verifyFailed = await verifiedBy(inventory, session, deadlineMs);
  } catch (error) {
    result.error = briefError(error);
  }
  const windowEnd = result.settledMs ?? clock();
  result.longestWriteGapMs = longestWriteGapMs(load.ops, injectedMs, windowEnd);
  result.failedOperations = load.ops.filter((op) => !op.ok && op.invokedMs >= injectedMs && op.invokedMs <= windowEnd).length;
  return result;
}

/** The drill, on a cluster drillRefusal passed: every fault in turn (stopping at one that went wrong), then the history's check. */
export async function faultDrill(
  inventory: Inventory,
  session: ClusterSession,
  faults: readonly FaultDefinition[],
  timing: DrillTiming,
  say: (line: string) => void,
  /** Asked between faults: an interrupted drill undoes the fault in place and stops. */
  interrupted: () => boolean = () => false,
): Promise<FaultDrillReport> {
  const started = new Date();
  const origin = performance.now();
  const clock = () => Math.round(performance.now() - origin);
  const prefix = `${TOOL_KEY_PREFIX}drill/${started.toISOString()}/`;
  const load = new DrillLoad(session.clients, inventory.members, prefix, clock);
  const context: DrillContext = { inventory, session, load, timing, clock, say };
  const results: FaultResult[] = [];
  load.start();
  try {
    await pause(timing.quietMs);
    for (const [turn, fault] of faults.entries()) {
      const result = await runFault(context, fault, turn);
      results.push(result);
      if (result.error || interrupted()) break;
      await pause(timing.quietMs);
    }
  } finally {
    await load.stop();
  }
  const history = checkHistory(load.ops, await finalWrites(session.clients, inventory.members, prefix));
  const cleanup = await removeDrillKeys(inventory, session, prefix);
  const passed = history.problems.length === 0 && results.every((result) => !result.error && result.verifyFailed.length === 0);
  return { started: started.toISOString(), faults: results, history, operations: load.ops, cleanup, passed };
}

async function removeDrillKeys(inventory: Inventory, session: ClusterSession, prefix: string): Promise<string> {
  for (const member of inventory.members) {
    try {
      const deleted = await (await session.clients.for(member)).delete().prefix(prefix).exec();
      return `deleted the drill's ${deleted.deleted} keys (${prefix}*)`;
    } catch {
      // The next member.
    }
  }
  return `could not delete the drill's keys: delete ${prefix}* by hand`;
}
