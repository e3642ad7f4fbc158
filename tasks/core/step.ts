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

/**
 * The machine running the tool, as a target of its own kind: not a host name, so no member's name can
 * be taken for it. Steps on it (PKI, local state) gate everything after them.
 */
export const CONTROL_NODE: unique symbol = Symbol('the control node');
export type ControlNode = typeof CONTROL_NODE;

/** Where a unit of work acts: a member, by its name, or the control node. */
export type Target = string | ControlNode;

/** A target as runs show and report it: the member's name, or `localhost` for the control node, as Ansible names it. */
export const targetName = (target: Target): string => (target === CONTROL_NODE ? 'localhost' : target);

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

export interface Step<State, Action, T extends Target = string> {
  /** Short name used in progress, errors and the recap: "pki", "cloud-init". */
  name: string;
  /** Where this step acts: members by name, or the control node. */
  targets: readonly T[];
  check(target: T, patience: Patience): Promise<State>;
  plan(state: State, target: T): Change<Action>[];
  apply(changes: Change<Action>[], target: T, state: State): Promise<void>;
  /**
   * Set for steps that must change one target at a time (a restart of etcd, a redefinition that
   * reboots a member): the runner checks and plans every target at once, then applies the targets
   * with changes in the waves this returns — the targets of one wave together, the waves strictly one
   * after another — and stops after the first wave with a failure, leaving the later ones untouched.
   */
  rollingOrder?(pending: readonly Pending<State, Action, T>[]): Promise<T[][]>;
  /** Things an operator should know about a target that are not changes (a first boot that ended in error). */
  warnings?(state: State, target: T): string[];
}

/** What a target's plan does in a roll: keeps the service running, starts it where it was down, or restarts it. */
export type RollKind = 'keeps-running' | 'starts' | 'restarts';

/** A target whose plan is not empty, waiting for its turn in a roll. */
export interface Pending<State, Action, T extends Target = string> {
  target: T;
  state: State;
  changes: Change<Action>[];
}

/**
 * A fact: a question per target and its parsed answer; it changes nothing. A target whose answer is
 * a refusal (a network_id no hypervisor knows, a member list the tool will not resolve) fails, and
 * with it the run's later steps there.
 */
export interface Fact<Value, T extends Target = string> {
  name: string;
  targets: readonly T[];
  ask(target: T): Promise<Value>;
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
export type AnyStep = Step<any, any, any>;

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
