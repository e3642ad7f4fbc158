import { Listr, ListrLogger, ProcessOutput, type ListrTask } from 'listr2';
import { humanStream } from './human-output.ts';
import type { PhaseOutcome, RunEvent, RunListener } from './events.ts';
import type { Progress } from './progress.ts';

/** One promise per phase, settled when the runner says the phase ended. */
interface Awaited {
  promise: Promise<PhaseOutcome>;
  settle(outcome: PhaseOutcome): void;
}

const awaiting = (): Awaited => {
  let settle: (outcome: PhaseOutcome) => void = () => undefined;
  const promise = new Promise<PhaseOutcome>((resolve) => (settle = resolve));
  return { promise, settle };
};

/** listr2 writes to standard output (its failures to standard error), unless `--json -` gave standard output to the report. */
const toStderrWhenAsked = () =>
  humanStream() === process.stderr
    ? { logger: new ListrLogger({ useIcons: true, processOutput: new ProcessOutput(process.stderr, process.stderr) }) }
    : {};

/**
 * The run shown with listr2: a task per phase that follows the runner's events — on a terminal the
 * waiting hosts' summary under the running phase, refreshed every second; otherwise a timestamped
 * line each time a host's state changes (a log reads them in order).
 */
export class ListrView {
  #phases: Awaited[] = [];
  #shown: Promise<void> = Promise.resolve();

  constructor(
    readonly renderer: 'default' | 'simple' | 'silent',
    readonly progress: Progress,
  ) {}

  readonly listener: RunListener = (event: RunEvent) => {
    if (event.type === 'phases') this.#start(event.titles);
    if (event.type === 'phase-ended') this.#phases[event.index]?.settle(event.outcome);
  };

  /** Done once every phase shown so far is. */
  settled(): Promise<void> {
    return this.#shown;
  }

  #start(titles: readonly string[]): void {
    this.#phases = titles.map(() => awaiting());
    const tasks: ListrTask[] = titles.map((title, i) => ({
      title,
      task: async (_ctx, task) => {
        const outcome = await this.#showingProgress(task, this.#phases[i]!.promise);
        if (outcome.kind === 'skipped') return task.skip(`${title}: skipped, ${outcome.reason}`);
        task.title = outcome.line;
        if (outcome.kind === 'failed') throw new Error(outcome.error);
      },
    }));
    const listr = new Listr(tasks, {
      exitOnError: false,
      renderer: this.renderer,
      fallbackRenderer: this.renderer === 'silent' ? 'silent' : 'simple',
      rendererOptions: { collapseErrors: false, ...toStderrWhenAsked() },
      // listr2 would answer SIGINT with process.exit(127) in the middle of a change; the CLIs handle
      // signals themselves (the change in flight finishes, the recap is printed, exit 130).
      registerSignalListeners: false,
    });
    const previous = this.#shown;
    this.#shown = previous.then(() => listr.run()).then(() => undefined);
  }

  async #showingProgress<T>(task: { output?: string }, until: Promise<T>): Promise<T> {
    const onTerminal = this.renderer === 'default';
    const show = () => {
      const summary = this.progress.summary();
      if (summary) task.output = summary;
    };
    const timer = onTerminal ? setInterval(show, 1_000) : undefined;
    const stop = onTerminal
      ? () => undefined
      : this.progress.onChange((host, what) => (task.output = `${new Date().toISOString().slice(11, 19)} ${host}: ${what}`));
    try {
      return await until;
    } finally {
      clearInterval(timer);
      stop();
    }
  }
}
