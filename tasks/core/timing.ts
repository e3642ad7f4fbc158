/**
 * Where a run's time went, every second of it: the phases (each step's own time is in the results), the work outside
 * them that the run waited for (opening the state directory, looking at the run lock while the first connections are
 * made, releasing it, closing the connections), and what is left, which nothing names. --profile prints it and
 * --json's report carries it (`timing`); the bench scripts read it (scripts/bench.ts, scripts/bench/).
 */

export interface TimedPart {
  name: string;
  ms: number;
}

/** The `timing` of `--json`'s report, in ms. */
export interface DeployTiming {
  /** When main began: every static import loaded. */
  modulesLoadedAtMs: number;
  /** From then to the report. */
  workMs: number;
  /** This process's own CPU, user and system, start-up included. */
  cpuMs: number;
  phases: { phase: string; ms: number }[];
  /** The work outside the phases that the run waited for, in order. */
  outside: TimedPart[];
  /** workMs less the phases and the work outside them: what no name accounts for. */
  unaccountedMs: number;
}

/** The report's timing from the run's measures, rounded to the millisecond. */
export function deployTiming(measured: {
  modulesLoadedAtMs: number;
  workMs: number;
  cpuMs: number;
  phases: readonly { phase: string; ms: number }[];
  outside: readonly TimedPart[];
}): DeployTiming {
  const named = [...measured.phases.map(({ ms }) => ms), ...measured.outside.map(({ ms }) => ms)].reduce((sum, ms) => sum + ms, 0);
  return {
    modulesLoadedAtMs: Math.round(measured.modulesLoadedAtMs),
    workMs: Math.round(measured.workMs),
    cpuMs: Math.round(measured.cpuMs),
    phases: measured.phases.map(({ phase, ms }) => ({ phase, ms: Math.round(ms) })),
    outside: measured.outside.map(({ name, ms }) => ({ name, ms: Math.round(ms) })),
    unaccountedMs: Math.round(measured.workMs - named),
  };
}

/** --profile's line for the time outside the phases. */
export function formatOutside(timing: Pick<DeployTiming, 'outside' | 'unaccountedMs'>): string {
  const seconds = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
  const parts = timing.outside.map(({ name, ms }) => `${name} ${seconds(ms)}`);
  return `outside the phases (wall-clock, in order): ${[...parts, `unaccounted ${seconds(timing.unaccountedMs)}`].join(', ')}`;
}
