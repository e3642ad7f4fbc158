#!/usr/bin/env -S npx tsx
import { humanStream, reportGoesTo, writeReport } from '../core/human-output.ts';
import { DEPLOY_HELP, deployExitCode, parseDeployOptions, type DeployOptions } from '../cli/options.ts';
import { describeError, EXIT, InputError, reportInputError } from '../core/errors.ts';
import { silenceKnownWarnings } from '../core/warnings.ts';
import { formatChanges, formatProfile, formatRecap, formatUnreachable, recapByHost } from '../core/report.ts';
import { forDisplay } from '../core/display.ts';
import { formatCommandTimes } from '../remote/command-times.ts';
import { deployTiming, formatOutside } from '../core/timing.ts';
import { placementWarnings } from '../inventory/placement.ts';
import { Runner } from '../core/runner.ts';
import { loadInventory } from '../inventory/load.ts';
import type { Inventory } from '../inventory/model.ts';
import { LockHeldError, RunLock } from '../core/lock.ts';
import { checkDeployInput, runDeploy, type PipelineOptions } from '../deploy/pipeline.ts';
import { describePlan, phaseTitle, type PlannedPhase } from '../deploy/plan.ts';
import { staleAfter } from '../steps/registry.ts';
import { lockBeforeFirstChange, onLockLoss } from '../etcd/run-lock.ts';
import { refuseAfterMismatch } from '../verify/consistency.ts';
import {
  inventoryDigest,
  PLAN_FORMAT,
  planDifferences,
  plannedChanges,
  planStale,
  readSavedPlan,
  stateDigest,
  writeSavedPlan,
  type SavedPlan,
} from '../deploy/saved-plan.ts';

async function deploy(given: DeployOptions): Promise<number> {
  const inventory = loadInventory(given.inventory);
  // A saved plan's own options (--limit, --tags, …) are the run's: the flags refused them beside --plan.
  const saved = given.plan === undefined ? undefined : readSavedPlan(given.plan);
  const options: DeployOptions = saved
    ? {
        ...given,
        ...saved.decisions,
        renewCerts: saved.decisions.renewCerts === true,
        acceptMismatch: saved.decisions.acceptMismatch === true,
      }
    : given;
  // Read now: what the plan is decided from is the file as it was loaded.
  const inventorySha256 = options.planOut === undefined ? undefined : inventoryDigest(inventory.path);
  // Before the state directory's lock: a run refused for bad input leaves nothing behind.
  checkDeployInput(inventory, options);
  // A dry-run writes nothing, so it takes no lock either.
  const lock = options.dryRun ? undefined : RunLock.acquire(inventory.stateDir);
  if (lock?.tookOverFrom)
    console.log(
      `lock: took over the lock of a run that is gone (PID ${lock.tookOverFrom.pid} ` +
        `on ${lock.tookOverFrom.host} since ${lock.tookOverFrom.since})`,
    );
  try {
    if (saved) {
      const refused = await refusedPlan(inventory, options, saved);
      if (refused !== undefined) return refused;
    }
    return await deployLocked(inventory, options, inventorySha256);
  } finally {
    lock?.release();
  }
}

/**
 * The first SIGINT/SIGTERM lets the change in flight finish and starts no other; connections and tunnels
 * close as the pipeline unwinds, and the recap says what was done. A second one ends at once.
 */
function interruptOnSignals(runner: Runner): void {
  let signalled = false;
  const onSignal = (signal: NodeJS.Signals) => {
    // Its own flag: a run interrupted by a lost lock still finishes its change in flight on a first signal.
    if (signalled) process.exit(EXIT.interrupted);
    signalled = true;
    console.error(`\n${signal}: finishing the change in flight, starting no other (again to stop at once)`);
    runner.interrupt(signal);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
}

/**
 * A run that changes the cluster holds its lock in etcd too, beside the state directory's: taken before its first
 * change. Under it, before the first change: no run goes on from members found holding different data until an
 * operator says so (--accept-mismatch).
 */
function clusterLockHold(inventory: Inventory, options: DeployOptions, onLost: (why: string) => void): PipelineOptions['hold'] {
  if (options.dryRun || options.renderOnly !== undefined) return undefined;
  return async ({ connections, identities, clients }) => {
    const gate = await lockBeforeFirstChange(
      inventory,
      { connections, identity: identities.root, clients },
      { command: ['deploy', ...process.argv.slice(2)].join(' '), say: (line) => console.log(line), onLost },
    );
    if (!gate || options.acceptMismatch) return gate;
    return {
      async beforeFirstChange() {
        await gate.beforeFirstChange();
        await refuseAfterMismatch(clients, inventory.members, identities.root());
      },
      release: () => gate.release(),
    };
  };
}

/** --profile's lines: each step's time, the time outside the phases, why facts took the slower way, the slowest commands. */
function printProfile(runner: Runner, timing: ReturnType<typeof deployTiming>, outcome: Awaited<ReturnType<typeof runDeploy>>): void {
  console.log(`\n${formatProfile(runner.results, runner.phaseTimes)}`);
  console.log(formatOutside(timing));
  // Why a member's facts took the slower way: an image without qemu-guest-agent, a domain without its channel.
  for (const { member, reason } of outcome.guestAgentUnanswered)
    console.log(`guest facts of ${member}: not through the guest agent (${reason})`);
  for (const line of formatCommandTimes(outcome.slowestCommands)) console.log(forDisplay(line));
}

async function deployLocked(inventory: Inventory, options: DeployOptions, inventorySha256?: string): Promise<number> {
  const started = performance.now();
  // Before the runner: the options, the inventory and the state directory's lock.
  const prelude = { name: "inventory and the state directory's lock", ms: started - MODULES_LOADED_AT_MS };
  const runner = new Runner({ dryRun: options.dryRun, renderer: humanStream().isTTY ? 'default' : 'simple', staleAfter });
  interruptOnSignals(runner);
  for (const warning of placementWarnings(inventory)) console.log(`warning: ${warning}`);
  const lockLoss = onLockLoss(runner);
  const outcome = await runDeploy(inventory, runner, { ...options, hold: clusterLockHold(inventory, options, lockLoss.onLost) });
  const { written, unreachable, plan } = outcome;
  if (plan) return listPhases(plan, runner, options.json);

  // Summaries, every one before any diff; the diffs where they are asked for (--diff), in a dry-run as in a real run.
  const changes = formatChanges(runner.results, { dryRun: options.dryRun, diffs: options.diff });
  if (changes) console.log(`\n${changes}`);
  if (written.length > 0) console.log(`\nwrote ${written.length} files:\n${written.map((path) => `  ${path}`).join('\n')}`);
  console.log(`\n${formatRecap(runner.results, options.dryRun, performance.now() - started)}`);
  if (unreachable.length > 0) console.log(`\n${formatUnreachable(unreachable)}`);
  // Where the time went (this process's own CPU too: the wall-clock mixes it with waits).
  const cpu = process.cpuUsage();
  const timing = deployTiming({
    modulesLoadedAtMs: MODULES_LOADED_AT_MS,
    workMs: performance.now() - MODULES_LOADED_AT_MS,
    cpuMs: (cpu.user + cpu.system) / 1000,
    phases: runner.phaseTimes,
    outside: [prelude, ...runner.spans],
  });
  if (options.profile) printProfile(runner, timing, outcome);
  if (options.json) {
    const recap = Object.fromEntries(recapByHost(runner.results));
    writeReport(options.json, { inventory: inventory.path, dryRun: options.dryRun, results: runner.results, recap, unreachable, timing });
  }
  const changed = runner.results.some((result) => result.status === 'changed');
  if (options.planOut !== undefined && inventorySha256 !== undefined && !runner.failed && runner.interrupted === undefined)
    savePlan(options.planOut, inventory, options, inventorySha256, runner);
  else if (options.planOut !== undefined) console.log(`\nno plan written to ${options.planOut}: the dry-run did not end cleanly`);
  return deployExitCode(
    { lockLost: lockLoss.lost, interrupted: runner.interrupted !== undefined, failed: runner.failed, changed },
    options.detailedExitcode,
  );
}

/** --plan-out: what the dry-run planned, the options it was planned with, and what it was decided from. */
function savePlan(path: string, inventory: Inventory, options: DeployOptions, inventorySha256: string, runner: Runner): void {
  const { limit, tags, skipTags, renewCerts, rotateCa, replace, adopt, acceptMismatch } = options;
  const decisions = { limit, tags, skipTags, renewCerts, rotateCa, replace, adopt, acceptMismatch };
  const plan: SavedPlan = {
    format: PLAN_FORMAT,
    created: new Date().toISOString(),
    inventory: { path: inventory.path, sha256: inventorySha256 },
    state: { sha256: stateDigest(inventory.stateDir) },
    decisions: JSON.parse(JSON.stringify(decisions)),
    changes: plannedChanges(runner.results),
  };
  writeSavedPlan(path, plan);
  const hosts = new Set(plan.changes.map((change) => change.host)).size;
  console.log(`\nplan written to ${path}: ${plan.changes.length} steps to change on ${hosts} hosts; deploy --plan ${path} runs it`);
}

/**
 * --plan: refused (exit 1, nothing changed) when the inventory or the state directory moved since the plan, or a
 * dry-run now plans other changes than it holds; undefined when the run may go on.
 */
async function refusedPlan(inventory: Inventory, options: DeployOptions, saved: SavedPlan): Promise<number | undefined> {
  const path = options.plan!;
  const stale = planStale(saved, inventory.path, inventory.stateDir);
  if (stale) {
    console.log(`refused: the plan ${path} is stale: ${stale}; nothing was changed (make a new one with --plan-out)`);
    return EXIT.failed;
  }
  console.log(`the plan ${path} (${saved.created}): a dry-run now, to see that the cluster has not moved since`);
  const runner = new Runner({ dryRun: true, renderer: 'silent', staleAfter });
  await runDeploy(inventory, runner, { ...options, dryRun: true });
  if (runner.failed) {
    const failed = runner.results.filter((result) => result.status === 'failed');
    console.log(`refused: the dry-run before the plan failed (${failed.map((r) => `${r.host} ${r.step}: ${r.error}`).join('; ')})`);
    return EXIT.failed;
  }
  const differences = planDifferences(saved.changes, plannedChanges(runner.results));
  if (differences.length) {
    console.log(
      `refused: the cluster moved since the plan ${path}; nothing was changed:\n${differences.map((line) => `  ${line}`).join('\n')}`,
    );
    return EXIT.failed;
  }
  console.log(`the plan holds: ${saved.changes.length} steps to change, as planned; running it`);
  return undefined;
}

/** --list-phases: the plan, one line per phase (and in the --json report, each phase's title and whether it runs). */
function listPhases(plan: PlannedPhase[], runner: Runner, json: string | undefined): number {
  const lines = describePlan(plan);
  console.log(
    `\nPLAN: the phases a run takes now, in order (${plan.length}; the facts above were gathered after pki, ` +
      `before the plan was made)\n${lines.map((line) => `  ${line}`).join('\n')}`,
  );
  if (json) {
    const phases = plan.map((phase, i) => ({ phase: phaseTitle(phase), runs: !('skip' in phase && phase.skip), line: lines[i] }));
    writeReport(json, { gathered: runner.phaseTimes.map(({ phase }) => phase), plan: phases });
  }
  return runner.failed ? EXIT.failed : EXIT.ok;
}

async function main(argv: string[]): Promise<number> {
  let options: DeployOptions | undefined;
  try {
    options = parseDeployOptions(argv);
    if (options.help) {
      console.log(DEPLOY_HELP);
      return EXIT.ok;
    }
    reportGoesTo(options.json);
    return await deploy(options);
  } catch (error) {
    if (error instanceof InputError) return reportInputError(error);
    if (error instanceof LockHeldError) {
      console.error(`error: ${error.message}`);
      return EXIT.failed;
    }
    console.error(`error: ${describeError(error)}`);
    if (options?.debug && error instanceof Error) console.error(error.stack);
    else console.error('(this is a bug in etcd-kvm; run again with --debug for the stack trace)');
    return EXIT.failed;
  }
}

/** Milliseconds from this process's start until every static import is loaded (performance.now() counts from the start). */
const MODULES_LOADED_AT_MS = performance.now();
silenceKnownWarnings();
process.exitCode = await main(process.argv.slice(2));
