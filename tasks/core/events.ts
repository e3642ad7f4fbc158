import type { StepResult } from './step.ts';
import type { TimedPart } from './timing.ts';

/**
 * What a run emits as it goes: the runner executes, and what shows it listens — listr2 on a
 * terminal or as plain lines (core/listr-view.ts), the run's log of results and phase times that the
 * recap and the JSON report read (`RunLog`).
 */
export type RunEvent =
  /** A list of phases starts, in this order. */
  | { type: 'phases'; titles: readonly string[] }
  | { type: 'phase-started'; index: number; title: string }
  /** How a phase ended: its title line, or why it was skipped, or the failures to show under it. */
  | { type: 'phase-ended'; index: number; title: string; outcome: PhaseOutcome; ms?: number }
  | { type: 'result'; result: StepResult }
  /** Work of the run outside its phases, on its critical path (the run waited for it): opening, the run lock, closing. */
  | { type: 'span'; name: string; ms: number };

export type PhaseOutcome =
  | { kind: 'done'; line: string }
  | { kind: 'skipped'; reason: string }
  | { kind: 'failed'; line: string; error: string };

export type RunListener = (event: RunEvent) => void;

/** The run's record, kept by listening: every step's result and each phase's wall-clock time, in order. */
export class RunLog {
  readonly results: StepResult[] = [];
  /**
   * Each phase's wall-clock time, in the order they ran: a phase's own work (facts
   * asked ahead for later steps, waits between steps) counts here and in no step.
   */
  readonly phaseTimes: { phase: string; ms: number }[] = [];
  /** The run's work outside its phases that it waited for, in order (Runner.timed). */
  readonly spans: TimedPart[] = [];

  readonly listener: RunListener = (event) => {
    if (event.type === 'result') this.results.push(event.result);
    if (event.type === 'phase-ended' && event.ms !== undefined) this.phaseTimes.push({ phase: event.title, ms: event.ms });
    if (event.type === 'span') this.spans.push({ name: event.name, ms: event.ms });
  };
}
