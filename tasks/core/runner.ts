import { describeError } from './errors.ts';
import { Progress } from './progress.ts';
import { forDisplay } from './display.ts';
import { FactCache } from './facts.ts';
import { RunLog, type PhaseOutcome, type RunEvent, type RunListener } from './events.ts';
import type { TimedPart } from './timing.ts';
import { ListrView } from './listr-view.ts';
import {
  CONTROL_NODE,
  targetName,
  type AnyStep,
  type Change,
  type Fact,
  type Patience,
  type StepResult,
  type Target,
  type Wait,
} from './step.ts';

export interface RunOptions {
  dryRun: boolean;
  /** The kinds of facts a step's change makes stale on its target (the deploy's registry); none when not given. */
  staleAfter?: (step: string) => readonly string[];
  /** Progress output; 'silent' for tests and --json runs that want a clean stdout. */
  renderer: 'default' | 'simple' | 'silent';
}

export interface Phase {
  title: string;
  run: () => Promise<StepResult[] | string | undefined>;
  /** Why this phase does not run at all (not selected by --tags). */
  skip?: string;
  /** Asked when the phase's turn comes: why it does not run after all (an earlier failure), if so. */
  skipIf?: () => string | undefined;
}

/** A run waits out every deadline and fails what is not ready by it; a dry-run looks once and reports why. */
export const patienceOf = (dryRun: boolean): Patience =>
  dryRun
    ? { windowMs: () => 0, notReady: (error) => describeError(error) }
    : {
        windowMs: (deadlineMs) => deadlineMs,
        notReady: (error) => {
          throw error;
        },
      };

interface Planned {
  target: Target;
  state: unknown;
  changes: Change<unknown>[];
  started: number;
  extra: Partial<StepResult>;
}

const summarise = (changes: readonly Change<unknown>[]) => ({
  changes: changes.map(({ summary, diff }) => ({ summary, ...(diff ? { diff } : {}) })),
});

function resultFactory(step: { name: string }, target: Target, started: number) {
  return (status: StepResult['status'], extra: Partial<StepResult> = {}): StepResult => ({
    step: step.name,
    host: targetName(target),
    status,
    changes: [],
    durationMs: Math.round(performance.now() - started),
    ...extra,
  });
}

/**
 * Runs steps in order; within a step, every target in parallel, or in waves for a rolling step. A host
 * that fails is skipped by the steps after it, as Ansible removes a failed host from the rest of the play.
 * It shows nothing itself: it emits what happens (core/events.ts), and listr2 and the run's log listen.
 */
export class Runner {
  /** Every step's result and each phase's time, as the run's log heard them. */
  readonly log = new RunLog();
  readonly #listeners: RunListener[] = [this.log.listener];
  readonly #view: ListrView;
  /** What hosts wait on in the running phase: shown under it (terminal) or as timestamped lines. */
  readonly progress = new Progress();
  readonly #failedHosts = new Set<Target>();
  #interrupted: string | undefined;
  /** The facts asked ahead of the steps that take them; a change drops what it makes stale. */
  readonly facts = new FactCache();
  /** The kind of facts each early-checked step reads. */
  readonly #earlyReads = new Map<string, string>();
  /** Passed before the run's first change (the cluster's run lock); its answer, once asked. */
  #gate: (() => Promise<void>) | undefined;
  #gatePassed: Promise<void> | undefined;
  /** The gate refused the run's first change: no change starts. */
  #refused = false;

  /** How long checks may wait: the run's whole deadline, or (dry-run) one look. */
  readonly patience: Patience;

  constructor(readonly options: RunOptions) {
    this.patience = patienceOf(options.dryRun);
    this.#view = new ListrView(options.renderer, this.progress);
    this.#listeners.push(this.#view.listener);
  }

  /** Every step's result so far, in the order they were recorded. */
  get results(): readonly StepResult[] {
    return this.log.results;
  }

  get phaseTimes(): readonly { phase: string; ms: number }[] {
    return this.log.phaseTimes;
  }

  /** The run's work outside its phases that it waited for (timed), in order. */
  get spans(): readonly TimedPart[] {
    return this.log.spans;
  }

  /** Runs work the run waits for outside any phase, and records its wall-clock time under `name` (--profile, --json). */
  async timed<T>(name: string, work: () => Promise<T>): Promise<T> {
    const started = performance.now();
    try {
      return await work();
    } finally {
      this.#emit({ type: 'span', name, ms: performance.now() - started });
    }
  }

  /** `listener` hears everything the run does from now on. */
  on(listener: RunListener): void {
    this.#listeners.push(listener);
  }

  #emit(event: RunEvent): void {
    for (const listener of this.#listeners) listener(event);
  }

  #record(results: readonly StepResult[]): void {
    for (const result of results) this.#emit({ type: 'result', result });
  }

  get failed(): boolean {
    return this.#failedHosts.size > 0 || this.#phaseThrew;
  }

  #phaseThrew = false;

  /** Has a step failed on this host in this run (the later steps skip it)? */
  hasFailed(host: Target): boolean {
    return this.#failedHosts.has(host);
  }

  /** Why the run was interrupted (a signal), if it was: no change starts after that. */
  get interrupted(): string | undefined {
    return this.#interrupted;
  }

  /** Why no change starts any more, if so: a signal, or the gate's refusal. */
  get #halted(): string | undefined {
    if (this.#interrupted) return `interrupted (${this.#interrupted})`;
    return this.#refused ? 'the run may change nothing (its first change was refused)' : undefined;
  }

  /** From now on no new change starts: the change in flight finishes, every later one is skipped. */
  interrupt(reason: string): void {
    this.#interrupted ??= reason;
  }

  /**
   * Starts a step's checks now, for when the step runs: a check only reads, so it may run while other
   * steps work (pyinfra gathers facts the same way). For steps whose facts (of kind `reads`) only a
   * change of that kind on the same target can alter (etcd's users and roles, asked from the member
   * that manages them). An early answer is used once, and only if no such change came since (the fact
   * cache drops it then); otherwise, or if it failed, the step checks again. Re-checks always ask.
   */
  checkEarly(step: AnyStep, reads: string): void {
    this.#earlyReads.set(step.name, reads);
    for (const target of step.targets)
      this.facts.put(
        target,
        reads,
        `check:${step.name}`,
        step.check(target, this.patience).then(
          (state) => ({ state }),
          () => undefined,
        ),
      );
  }

  /**
   * `gate` is awaited once, before the first change of the run is applied (a run that changes nothing
   * never asks it); every later change awaits the same answer. A gate that throws fails the changes
   * waiting on it, and no other change or phase starts (not an interrupt: the run fails, exit 1).
   */
  gateChanges(gate: () => Promise<void>): void {
    this.#gate = gate;
  }

  /** Passes the gate (see gateChanges): for a change made outside a step (a record written by a phase). */
  passGate(): Promise<void> {
    this.#gatePassed ??= (this.#gate?.() ?? Promise.resolve()).catch((error: unknown) => {
      this.#refused = true;
      throw error;
    });
    return this.#gatePassed;
  }

  async #takeEarly(step: AnyStep, target: Target): Promise<{ state: unknown } | undefined> {
    const reads = this.#earlyReads.get(step.name);
    return reads === undefined ? undefined : this.facts.take<{ state: unknown } | undefined>(target, reads, `check:${step.name}`);
  }

  async runTarget(step: AnyStep, target: Target): Promise<StepResult> {
    const planned = await this.#checkAndPlan(step, target);
    return 'result' in planned ? planned.result : this.#applyPlanned(step, planned);
  }

  /** Check and plan: a result when there is nothing to apply (ok, failed, skipped), otherwise what to apply. */
  async #checkAndPlan(step: AnyStep, target: Target): Promise<{ result: StepResult } | Planned> {
    const started = performance.now();
    const finish = resultFactory(step, target, started);
    if (this.#failedHosts.has(target)) return { result: finish('skipped', { error: 'an earlier step failed on this host' }) };
    if (this.#halted) return { result: finish('skipped', { error: `${this.#halted}: not started` }) };
    try {
      const state = ((await this.#takeEarly(step, target)) ?? { state: await step.check(target, this.patience) }).state;
      const changes = step.plan(state, target);
      const warnings = step.warnings?.(state, target) ?? [];
      const extra = warnings.length > 0 ? { warnings } : {};
      if (changes.length === 0) return { result: finish('ok', extra) };
      return { target, state, changes, started, extra };
    } catch (error) {
      this.#failedHosts.add(target);
      return { result: finish('failed', { error: describeError(error) }) };
    }
  }

  /** Applies a plan and checks again (a dry-run stops before applying). */
  async #applyPlanned(step: AnyStep, { target, state, changes, started, extra }: Planned): Promise<StepResult> {
    const finish = resultFactory(step, target, started);
    if (this.options.dryRun) return finish('changed', { ...summarise(changes), ...extra });
    if (this.#halted) return finish('skipped', { ...summarise(changes), ...extra, error: `${this.#halted}: not applied` });
    try {
      await this.passGate();
      // Passing the gate can take seconds (the lock's acquisition): a signal meanwhile still stops this change.
      if (this.#halted) return finish('skipped', { ...summarise(changes), ...extra, error: `${this.#halted}: not applied` });
      await step.apply(changes, target, state).finally(() => this.facts.invalidate(target, this.options.staleAfter?.(step.name) ?? []));
      const remaining = step.plan(await step.check(target, this.patience), target);
      if (remaining.length > 0) {
        throw new Error(`did not converge: after applying, it still plans ${remaining.map((change) => change.summary).join('; ')}`);
      }
      return finish('changed', { ...summarise(changes), ...extra });
    } catch (error) {
      this.#failedHosts.add(target);
      return finish('failed', { ...summarise(changes), ...extra, error: describeError(error) });
    }
  }

  /** Runs one step on all its targets (concurrently, or as a roll) and records the results. */
  async runStep(step: AnyStep): Promise<StepResult[]> {
    const results = step.rollingOrder
      ? await this.#roll(step, step.rollingOrder.bind(step))
      : await Promise.all(step.targets.map((target) => this.runTarget(step, target)));
    this.#record(results);
    return results;
  }

  /** A fact asked of every target at once: each answer, and an ok or failed result per target. */
  async runFact<Value, T extends Target>(fact: Fact<Value, T>): Promise<{ answers: Map<T, Value>; results: StepResult[] }> {
    const answers = new Map<T, Value>();
    const results = await Promise.all(
      fact.targets.map(async (target): Promise<StepResult> => {
        const finish = resultFactory(fact, target, performance.now());
        if (this.#failedHosts.has(target)) return finish('skipped', { error: 'an earlier step failed on this host' });
        try {
          answers.set(target, await fact.ask(target));
          return finish('ok');
        } catch (error) {
          this.#failedHosts.add(target);
          return finish('failed', { error: describeError(error) });
        }
      }),
    );
    this.#record(results);
    return { answers, results };
  }

  /**
   * A wait on every target at once: each looked at every `pollMs` until ready (ok) or the deadline
   * (failed, saying what was last seen); a dry-run looks once and reports a target not ready yet as a
   * change it would wait for. A host that failed earlier is skipped, as by a step.
   */
  async runWait<Seen>(wait: Wait<Seen>): Promise<StepResult[]> {
    const results = await Promise.all(wait.targets.map((target) => this.#waitFor(wait, target)));
    this.#record(results);
    return results;
  }

  async #waitFor<Seen>(wait: Wait<Seen>, target: string): Promise<StepResult> {
    const finish = resultFactory(wait, target, performance.now());
    if (this.#failedHosts.has(target)) return finish('skipped', { error: 'an earlier step failed on this host' });
    const deadline = Date.now() + this.patience.windowMs(wait.deadlineMs);
    try {
      for (;;) {
        const look = await wait.look(target);
        if (look.ready) return finish('ok', look.warnings?.length ? { warnings: look.warnings } : {});
        if (this.options.dryRun) return finish('changed', { changes: [{ summary: wait.pending(look.reason) }] });
        if (look.final) throw new Error(look.reason);
        if (Date.now() >= deadline) throw new Error(wait.failure(target, look.reason));
        this.progress.update(target, wait.waiting(look.reason));
        await new Promise((resolve) => setTimeout(resolve, Math.min(wait.pollMs, Math.max(0, deadline - Date.now()))));
      }
    } catch (error) {
      this.#failedHosts.add(target);
      return finish('failed', { error: describeError(error) });
    } finally {
      this.progress.done(target);
    }
  }

  /**
   * Every target checked and planned at once; then the targets with changes wave by wave, in the
   * step's order, each re-checked before the next wave starts. After a failure the later waves are
   * left as they are and reported skipped. A dry-run reports the order it would follow.
   */
  async #roll(step: AnyStep, order: NonNullable<AnyStep['rollingOrder']>): Promise<StepResult[]> {
    const planned = await Promise.all(step.targets.map((target) => this.#checkAndPlan(step, target)));
    const results = planned.flatMap((p) => ('result' in p ? [p.result] : []));
    const pending = planned.flatMap((p) => ('result' in p ? [] : [p]));
    const waves = pending.length > 1 ? await order(pending) : [pending.map((p) => p.target)];
    const ordered = waves.flat();
    if (ordered.length !== pending.length || pending.some((p) => !ordered.includes(p.target))) {
      throw new Error(
        `${step.name}: its roll order (${ordered.join(', ')}) does not name each ` +
          `target with changes (${pending.map((p) => p.target).join(', ')}) once`,
      );
    }
    let stoppedAt: string[] = [];
    for (const [index, wave] of waves.entries()) {
      const planned = wave.map((target) => pending.find((p) => p.target === target)!);
      if (stoppedAt.length > 0) {
        for (const next of planned)
          results.push(
            resultFactory(
              step,
              next.target,
              performance.now(),
            )('skipped', { ...summarise(next.changes), error: `not changed: the roll stopped at ${stoppedAt.join(', ')}` }),
          );
        continue;
      }
      const applied = await Promise.all(planned.map((next) => this.#applyPlanned(step, next)));
      for (const result of applied) result.rollPosition = index + 1;
      stoppedAt = applied.filter((result) => result.status === 'failed').map((result) => result.host);
      results.push(...applied);
    }
    const position = new Map(step.targets.map((target, i) => [target, i]));
    return results.sort((a, b) => (position.get(a.host) ?? 0) - (position.get(b.host) ?? 0));
  }

  /**
   * One phase that establishes something the run goes on from (a fact): `run` says what to show (a
   * line, or results) and hands back its value; undefined when the phase failed or did not run.
   */
  async runPhaseFor<T>(title: string, run: () => Promise<{ shown: StepResult[] | string; value?: T }>): Promise<T | undefined> {
    const outcome: { value?: T } = {};
    await this.runPhases([
      {
        title,
        run: async () => {
          const { shown, value } = await run();
          if (value !== undefined) outcome.value = value;
          return shown;
        },
      },
    ]);
    return outcome.value;
  }

  /**
   * Runs named phases in order; a phase is usually one step. A phase may answer with a line for its
   * title instead of results (a fact it established), or be skipped. Each phase's start and end are
   * emitted for whoever shows the run; an exception in a phase fails that phase, and the next ones run.
   */
  async runPhases(phases: Phase[]): Promise<void> {
    this.#emit({ type: 'phases', titles: phases.map((phase) => phase.title) });
    for (const [index, phase] of phases.entries()) {
      const skipped = this.#skipReason(phase);
      if (skipped) {
        this.#emit({ type: 'phase-ended', index, title: phase.title, outcome: { kind: 'skipped', reason: skipped } });
        continue;
      }
      this.#emit({ type: 'phase-started', index, title: phase.title });
      const started = performance.now();
      const outcome = await this.#phaseOutcome(phase);
      this.progress.clear();
      this.#emit({ type: 'phase-ended', index, title: phase.title, outcome, ms: performance.now() - started });
    }
    await this.#view.settled();
  }

  #skipReason(phase: Phase): string | undefined {
    if (this.#failedHosts.has(CONTROL_NODE)) return 'a step on the control node failed';
    if (this.#halted) return this.#halted;
    return phase.skip ?? phase.skipIf?.();
  }

  /** The phase run: its title line, and its failures (each with its host and step) to show under it. */
  async #phaseOutcome(phase: Phase): Promise<PhaseOutcome> {
    let answer: StepResult[] | string | undefined;
    try {
      answer = await phase.run();
    } catch (error) {
      // A phase that threw did not do its work: the run fails (exit 1), even though no step on a host did.
      this.#phaseThrew = true;
      return { kind: 'failed', line: phase.title, error: describeError(error) };
    }
    if (typeof answer === 'string') return { kind: 'done', line: `${phase.title}: ${answer}` };
    const results = answer ?? [];
    const failed = results.filter((r) => r.status === 'failed');
    const count = (status: StepResult['status']) => results.filter((r) => r.status === status).length;
    const verb = this.options.dryRun ? 'would change' : 'changed';
    const skipped = count('skipped');
    const counts = results.length ? `${count('changed')} ${verb}, ${count('ok')} ok` : 'done';
    const failures = failed.length ? `, ${failed.length} failed` : '';
    const skips = skipped ? `, ${skipped} skipped` : '';
    const line = `${phase.title}: ${counts}${failures}${skips}`;
    // Errors can carry a guest's words (journal lines): shown without its terminal control sequences.
    if (failed.length > 0)
      return { kind: 'failed', line, error: failed.map((r) => `[${r.host}] ${r.step}: ${forDisplay(r.error ?? '')}`).join('\n') };
    return { kind: 'done', line };
  }
}
