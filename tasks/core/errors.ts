/**
 * Errors the tool expects and explains. Anything else is a bug and shows a stack trace only with --debug.
 */

/** Exit codes of every command of the tool. */
/** `changes`: a deploy with --detailed-exitcode that changed something (or, dry, would); never 2, which is bad input here. */
export const EXIT = { ok: 0, failed: 1, badInput: 2, changes: 3, interrupted: 130 } as const;

/** The operator's input is wrong (inventory, flags): exit code 2, nothing was touched. */
export class InputError extends Error {
  /**
   * `locations[i]`, when there is one, says where problem i is written ("in FILE:LINE:COLUMN, found VALUE"),
   * printed on its own line below it.
   */
  constructor(
    message: string,
    readonly problems: readonly string[] = [],
    readonly locations: readonly (string | undefined)[] = [],
  ) {
    super(message);
    this.name = 'InputError';
  }
}

export function describeError(error: unknown): string {
  if (error instanceof Error) return error.message;
  return String(error);
}

/** An error's first line: the rest is a stack, or gRPC's detail. */
export const firstLineOf = (error: unknown): string => describeError(error).split('\n')[0]!;

/** The first line, cut to what fits a table cell or a list of members' failures. */
export const briefError = (error: unknown): string => firstLineOf(error).slice(0, 200);

/** Prints an input error with its problems, one per line, as every command does; returns exit code 2. */
export function reportInputError(error: InputError): number {
  console.error(`error: ${error.message}`);
  for (const [i, problem] of error.problems.entries()) {
    console.error(`  - ${problem}`);
    if (error.locations[i]) console.error(`    ${error.locations[i]}`);
  }
  return EXIT.badInput;
}
