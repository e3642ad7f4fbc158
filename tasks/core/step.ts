/**
 * The units of work, three kinds (steps/registry.ts says which each of the deploy's is):
 * - a fact: a question and its parser, asked, never changing anything (`Fact`);
 * - a wait: ok or failed, with a deadline (`Wait`): etcd healthy, a first boot;
 * - an operation (`Step`): reads the current state without changing anything (`check`), computes
 *   the changes as data (`plan`, pure), and performs them (`apply`); after an apply the runner checks
 *   and plans again, and a step whose second plan is not empty did not converge.
 * Dry-run is the runner's alone: it stops operations after their plan, has waits look once, and
 * tells checks how long they may wait (`Patience`). No step takes a dry-run flag.
 */

/** The machine running the tool, as a step's target; steps on it (PKI, local state) gate everything after them. */
export const CONTROL_NODE = 'localhost';

/** Display-safe before/after text of one changed thing; secrets are already masked. */
export interface Diff {
  label: string;
  before: string;
  after: string;
}

export interface Change<Action> {
  /** One line an operator reads: "issue server certificate (new IP 10.0.0.5)". */
  summary: string;
  diff?: Diff;
  /** The data `apply` needs; never printed. */
  action: Action;
}

/**
 * How long a check may wait for what it needs to be ready (a first boot, SSH), and what an unready
 * end means: the runner's decision, the same for every step.
 */
export interface Patience {
  /** The window of a wait whose deadline is `deadlineMs`: all of it in a run; none in a dry-run, which looks once. */
  windowMs(deadlineMs: number): number;
  /** A wait ended unready: a run fails the step with `error` (thrown); a dry-run hands back why, and the step plans "once ready". */
  notReady(error: unknown): string;
}

export interface Step<State, Action> {
  /** Short name used in progress, errors and the recap: "pki", "cloud-init". */
  name: string;
  /** The hosts this step acts on: member names, or "localhost" for the control node. */
  targets: readonly string[];
  check(target: string, patience: Patience): Promise<State>;
  plan(state: State, target: string): Change<Action>[];
  apply(changes: Change<Action>[], target: string, state: State): Promise<void>;
  /**
   * Set for steps that must change one target at a time (a restart of etcd, a redefinition that
   * reboots a member): the runner checks and plans every target at once, then applies the targets
   * with changes in the waves this returns — the targets of one wave together, the waves strictly one
   * after another — and stops after the first wave with a failure, leaving the later ones untouched.
   */
  rollingOrder?(pending: readonly Pending<State, Action>[]): Promise<string[][]>;
  /** Things an operator should know about a target that are not changes (a first boot that ended in error). */
  warnings?(state: State, target: string): string[];
}

/** What a target's plan does in a roll: keeps the service running, starts it where it was down, or restarts it. */
export type RollKind = 'keeps-running' | 'starts' | 'restarts';

/** A target whose plan is not empty, waiting for its turn in a roll. */
export interface Pending<State, Action> {
  target: string;
  state: State;
  changes: Change<Action>[];
}

/**
 * A fact: a question per target and its parsed answer; it changes nothing. A target whose answer is
 * a refusal (a network_id no hypervisor knows, a member list the tool will not resolve) fails, and
 * with it the run's later steps there.
 */
export interface Fact<Value> {
  name: string;
  targets: readonly string[];
  ask(target: string): Promise<Value>;
}

/** One look of a wait: ready (with what it saw), or not yet and why; `final` when looking again cannot help. */
export type Look<Seen> = { ready: true; seen: Seen; warnings?: string[] } | { ready: false; reason: string; final?: boolean };

/**
 * A wait: ok once every target is ready, failed at its deadline. The runner looks every `pollMs`
 * until then (a dry-run looks once and reports what it would wait for) and shows what each target
 * waits on.
 */
export interface Wait<Seen> {
  name: string;
  targets: readonly string[];
  deadlineMs: number;
  pollMs: number;
  look(target: string): Promise<Look<Seen>>;
  /** What a dry-run reports for a target not ready yet: "wait for etcd to become healthy (now: …)". */
  pending(reason: string): string;
  /** What is shown while the target is waited for. */
  waiting(reason: string): string;
  /** The failure at the deadline (or a final answer): what was last seen, and where to look. */
  failure(target: string, reason: string): string;
}

// Steps are heterogeneous; the runner only moves State and Action between a step's own methods.
// biome-ignore lint/suspicious/noExplicitAny: a step's State and Action are its own; nothing outside it reads them.
export type AnyStep = Step<any, any>;

export type Status = 'ok' | 'changed' | 'failed' | 'skipped';

export interface StepResult {
  step: string;
  host: string;
  status: Status;
  /** What changed (or would change in dry-run), with display-safe diffs. */
  changes: { summary: string; diff?: Diff }[];
  durationMs: number;
  error?: string;
  warnings?: string[];
  /** The wave (1-based) of a roll this target changed in, for steps that change one target at a time. */
  rollPosition?: number;
}
