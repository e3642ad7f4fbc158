/**
 * Errors the tool expects and explains. Anything else is a bug and shows a stack trace only with --debug.
 */

/** The operator's input is wrong (inventory, flags): exit code 2, nothing was touched. */
export class InputError extends Error {
  constructor(
    message: string,
    readonly problems: readonly string[] = [],
  ) {
    super(message);
    this.name = 'InputError';
  }
}

export function describeError(error: unknown): string {
  if (error instanceof Error) return error.message;
  return String(error);
}
