import { Listr, type ListrTask } from 'listr2';
import { describeError } from './errors.ts';
import type { AnyStep, StepResult } from './step.ts';

/** The machine running the tool; steps on it (PKI, local state) gate everything after them. */
export const CONTROL_NODE = 'localhost';

export interface RunOptions {
  dryRun: boolean;
  /** Progress output; 'silent' for tests and --json runs that want a clean stdout. */
  renderer: 'default' | 'simple' | 'silent';
}

/**
 * Runs steps in order; within a step, every target in parallel. A host that fails is skipped by the
 * steps after it, as Ansible removes a failed host from the rest of the play.
 */
export class Runner {
  readonly results: StepResult[] = [];
  readonly #failedHosts = new Set<string>();

  constructor(readonly options: RunOptions) {}

  get failed(): boolean {
    return this.#failedHosts.size > 0;
  }

  async runTarget(step: AnyStep, target: string): Promise<StepResult> {
    const started = performance.now();
    const result = (status: StepResult['status'], extra: Partial<StepResult> = {}): StepResult => ({
      step: step.name,
      host: target,
      status,
      changes: [],
      durationMs: Math.round(performance.now() - started),
      ...extra,
    });
    if (this.#failedHosts.has(target)) return result('skipped', { error: 'an earlier step failed on this host' });
    try {
      const state = await step.check(target);
      const changes = step.plan(state, target);
      const summary = { changes: changes.map(({ summary, diff }) => ({ summary, ...(diff ? { diff } : {}) })) };
      if (changes.length === 0) return result('ok');
      if (this.options.dryRun) return result('changed', summary);
      await step.apply(changes, target, state);
      const remaining = step.plan(await step.check(target), target);
      if (remaining.length > 0) {
        throw new Error(`did not converge: after applying, it still plans ${remaining.map((change) => change.summary).join('; ')}`);
      }
      return result('changed', summary);
    } catch (error) {
      this.#failedHosts.add(target);
      return result('failed', { error: describeError(error) });
    }
  }

  /** Runs one step on all its targets concurrently and records the results. */
  async runStep(step: AnyStep): Promise<StepResult[]> {
    const results = await Promise.all(step.targets.map((target) => this.runTarget(step, target)));
    this.results.push(...results);
    return results;
  }

  /** Runs named phases in order with listr2 progress; a phase is usually one step. */
  async runPhases(phases: { title: string; run: () => Promise<StepResult[] | void> }[]): Promise<void> {
    const tasks: ListrTask[] = phases.map((phase) => ({
      title: phase.title,
      task: async (_ctx, task) => {
        if (this.#failedHosts.has(CONTROL_NODE)) {
          task.skip(`${phase.title}: skipped, a step on the control node failed`);
          return;
        }
        const results = (await phase.run()) ?? [];
        const failed = results.filter((r) => r.status === 'failed');
        const count = (status: StepResult['status']) => results.filter((r) => r.status === status).length;
        const verb = this.options.dryRun ? 'would change' : 'changed';
        const skipped = count('skipped');
        task.title = `${phase.title}: ${results.length ? `${count('changed')} ${verb}, ${count('ok')} ok` : 'done'}${failed.length ? `, ${failed.length} failed` : ''}${skipped ? `, ${skipped} skipped` : ''}`;
        if (failed.length > 0) throw new Error(failed.map((r) => `[${r.host}] ${r.step}: ${r.error}`).join('\n'));
      },
    }));
    const listr = new Listr(tasks, {
      exitOnError: false,
      renderer: this.options.renderer,
      fallbackRenderer: this.options.renderer === 'silent' ? 'silent' : 'simple',
      rendererOptions: { collapseErrors: false },
    });
    await listr.run();
  }
}
