/**
 * The unit of work. A step reads the current state without changing anything (`check`),
 * computes the changes as data (`plan`, pure), and performs them (`apply`).
 * Dry-run is check + plan; after an apply the runner checks and plans again, and a step
 * whose second plan is not empty did not converge.
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

export interface Step<State, Action> {
  /** Short name used in progress, errors and the recap: "pki", "cloud-init". */
  name: string;
  /** The hosts this step acts on: member names, or "localhost" for the control node. */
  targets: readonly string[];
  check(target: string): Promise<State>;
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

// Steps are heterogeneous; the runner only moves State and Action between a step's own methods.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
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
