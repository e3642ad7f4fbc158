import { Listr, type ListrTask } from 'listr2';
import { describeError } from './errors.ts';
import { Progress } from './progress.ts';
import { forDisplay } from './display.ts';
import { CONTROL_NODE, type AnyStep, type Change, type StepResult } from './step.ts';

export interface RunOptions {
  dryRun: boolean;
  /** Progress output; 'silent' for tests and --json runs that want a clean stdout. */
  renderer: 'default' | 'simple' | 'silent';
}

export interface Phase {
  title: string;
  run: () => Promise<StepResult[] | string | void>;
  /** Why this phase does not run at all (not selected by --tags). */
  skip?: string;
}

interface Planned {
  target: string;
  state: unknown;
  changes: Change<unknown>[];
  started: number;
  extra: Partial<StepResult>;
}

const summarise = (changes: readonly Change<unknown>[]) => ({ changes: changes.map(({ summary, diff }) => ({ summary, ...(diff ? { diff } : {}) })) });

function resultFactory(step: AnyStep, host: string, started: number) {
  return (status: StepResult['status'], extra: Partial<StepResult> = {}): StepResult => ({
    step: step.name,
    host,
    status,
    changes: [],
    durationMs: Math.round(performance.now() - started),
    ...extra,
  });
}

/**
 * Runs steps in order; within a step, every target in parallel, or in waves for a rolling step. A host
 * that fails is skipped by the steps after it, as Ansible removes a failed host from the rest of the play.
 */
export class Runner {
  readonly results: StepResult[] = [];
  /** Each phase's wall-clock time, in the order they ran: a phase's own work (facts asked ahead for later steps, waits between steps) counts here and in no step. */
  readonly phaseTimes: { phase: string; ms: number }[] = [];
  /** What hosts wait on in the running phase: shown under it (terminal) or as timestamped lines. */
  readonly progress = new Progress();
  readonly #failedHosts = new Set<string>();
  #interrupted: string | undefined;
  /** Checks started ahead of their step, per `step@target`, with how many results there were then. */
  readonly #early = new Map<string, { resultsBefore: number; state: Promise<{ state: unknown } | undefined> }>();

  constructor(readonly options: RunOptions) {}

  get failed(): boolean {
    return this.#failedHosts.size > 0;
  }

  /** Why the run was interrupted (a signal), if it was: no change starts after that. */
  get interrupted(): string | undefined {
    return this.#interrupted;
  }

  /** From now on no new change starts: the change in flight finishes, every later one is skipped. */
  interrupt(reason: string): void {
    this.#interrupted ??= reason;
  }

  /**
   * Starts a step's checks now, for when the step runs: a check only reads, so it may run while other
   * steps work (pyinfra gathers facts the same way). Only for steps whose facts nothing but a change on
   * the same target can alter (etcd's users and roles, asked from the member that manages them). An
   * early answer is used once, and only if no step has changed anything on that target since it was
   * asked; otherwise, or if it failed, the step checks again. Re-checks after an apply always ask.
   */
  checkEarly(step: AnyStep): void {
    for (const target of step.targets) {
      const state = step.check(target).then((state) => ({ state }), () => undefined);
      this.#early.set(`${step.name}@${target}`, { resultsBefore: this.results.length, state });
    }
  }

  async #takeEarly(step: AnyStep, target: string): Promise<{ state: unknown } | undefined> {
    const key = `${step.name}@${target}`;
    const early = this.#early.get(key);
    this.#early.delete(key);
    if (!early || this.results.slice(early.resultsBefore).some((result) => result.host === target && result.status === 'changed')) return undefined;
    return early.state;
  }

  async runTarget(step: AnyStep, target: string): Promise<StepResult> {
    const planned = await this.#checkAndPlan(step, target);
    return 'result' in planned ? planned.result : this.#applyPlanned(step, planned);
  }

  /** Check and plan: a result when there is nothing to apply (ok, failed, skipped), otherwise what to apply. */
  async #checkAndPlan(step: AnyStep, target: string): Promise<{ result: StepResult } | Planned> {
    const started = performance.now();
    const finish = resultFactory(step, target, started);
    if (this.#failedHosts.has(target)) return { result: finish('skipped', { error: 'an earlier step failed on this host' }) };
    if (this.#interrupted) return { result: finish('skipped', { error: `interrupted (${this.#interrupted}): not started` }) };
    try {
      const state = ((await this.#takeEarly(step, target)) ?? { state: await step.check(target) }).state;
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
    if (this.#interrupted) return finish('skipped', { ...summarise(changes), ...extra, error: `interrupted (${this.#interrupted}): not applied` });
    try {
      await step.apply(changes, target, state);
      const remaining = step.plan(await step.check(target), target);
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
    const results = step.rollingOrder ? await this.#roll(step, step.rollingOrder.bind(step)) : await Promise.all(step.targets.map((target) => this.runTarget(step, target)));
    this.results.push(...results);
    return results;
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
      throw new Error(`${step.name}: its roll order (${ordered.join(', ')}) does not name each target with changes (${pending.map((p) => p.target).join(', ')}) once`);
    }
    let stoppedAt: string[] = [];
    for (const [index, wave] of waves.entries()) {
      const planned = wave.map((target) => pending.find((p) => p.target === target)!);
      if (stoppedAt.length > 0) {
        for (const next of planned) results.push(resultFactory(step, next.target, performance.now())('skipped', { ...summarise(next.changes), error: `not changed: the roll stopped at ${stoppedAt.join(', ')}` }));
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
   * While `run` runs: on a terminal the waiting hosts' summary under the phase, refreshed every
   * second; otherwise a timestamped line each time a host's state changes (a log reads them in order).
   */
  async #showingProgress<T>(task: { output?: string }, run: () => Promise<T>): Promise<T> {
    const onTerminal = this.options.renderer === 'default';
    const show = () => {
      const summary = this.progress.summary();
      if (summary) task.output = summary;
    };
    const timer = onTerminal ? setInterval(show, 1_000) : undefined;
    const stop = onTerminal ? () => undefined : this.progress.onChange((host, what) => (task.output = `${new Date().toISOString().slice(11, 19)} ${host}: ${what}`));
    try {
      return await run();
    } finally {
      clearInterval(timer);
      stop();
      this.progress.clear();
    }
  }

  /**
   * Runs named phases in order with listr2 progress; a phase is usually one step. A phase may answer
   * with a line for its title instead of results (a fact it established), or be skipped up front.
   */
  async runPhases(phases: Phase[]): Promise<void> {
    const tasks: ListrTask[] = phases.map((phase) => ({
      title: phase.title,
      task: async (_ctx, task) => {
        if (this.#failedHosts.has(CONTROL_NODE)) {
          task.skip(`${phase.title}: skipped, a step on the control node failed`);
          return;
        }
        if (this.#interrupted) {
          task.skip(`${phase.title}: skipped, interrupted (${this.#interrupted})`);
          return;
        }
        if (phase.skip) {
          task.skip(`${phase.title}: skipped, ${phase.skip}`);
          return;
        }
        const started = performance.now();
        const answer = await this.#showingProgress(task, () => phase.run()).finally(() => this.phaseTimes.push({ phase: phase.title, ms: performance.now() - started }));
        if (typeof answer === 'string') {
          task.title = `${phase.title}: ${answer}`;
          return;
        }
        const results = answer ?? [];
        const failed = results.filter((r) => r.status === 'failed');
        const count = (status: StepResult['status']) => results.filter((r) => r.status === status).length;
        const verb = this.options.dryRun ? 'would change' : 'changed';
        const skipped = count('skipped');
        task.title = `${phase.title}: ${results.length ? `${count('changed')} ${verb}, ${count('ok')} ok` : 'done'}${failed.length ? `, ${failed.length} failed` : ''}${skipped ? `, ${skipped} skipped` : ''}`;
        // Errors can carry a guest's words (journal lines): shown without its terminal control sequences.
        if (failed.length > 0) throw new Error(failed.map((r) => `[${r.host}] ${r.step}: ${forDisplay(r.error ?? '')}`).join('\n'));
      },
    }));
    const listr = new Listr(tasks, {
      exitOnError: false,
      renderer: this.options.renderer,
      fallbackRenderer: this.options.renderer === 'silent' ? 'silent' : 'simple',
      rendererOptions: { collapseErrors: false },
      // listr2 would answer SIGINT with process.exit(127) in the middle of a change; the CLIs handle
      // signals themselves (the change in flight finishes, the recap is printed, exit 130).
      registerSignalListeners: false,
    });
    await listr.run();
  }
}
