/**
 * How long each command the run sent over SSH took, from its start to its exit: what --profile lists
 * after the steps' times, so that a slow step is traced to the command in the guest that made it slow
 * (every process there costs tenths of a second under emulation; a `systemctl daemon-reload`, seconds).
 */

export interface CommandTime {
  /** The connection's label: "member etcd-1". */
  host: string;
  /** What the command does, as its step described it, or the command itself in brief. */
  command: string;
  ms: number;
}

export class CommandTimes {
  readonly #times: CommandTime[] = [];

  record(time: CommandTime): void {
    this.#times.push(time);
  }

  /** The `count` slowest, slowest first. */
  slowest(count: number): CommandTime[] {
    return [...this.#times].sort((a, b) => b.ms - a.ms).slice(0, count);
  }
}

/** The first of --profile's lines for the slowest commands (bench:upgrade finds them by it). */
export const COMMAND_TIMES_HEADING = 'slowest commands over SSH (start to exit)';

/** --profile's lines for the slowest commands; none when no command ran over SSH. */
export function formatCommandTimes(times: readonly CommandTime[]): string[] {
  if (times.length === 0) return [];
  return [
    `${COMMAND_TIMES_HEADING}: ${times.length}`,
    ...times.map(({ host, command, ms }) => `  ${(ms / 1000).toFixed(2).padStart(6)} s  ${host}: ${command}`),
  ];
}
