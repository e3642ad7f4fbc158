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

/** A step failed on a host: carries the host and step so the message says where. */
export class StepError extends Error {
  constructor(
    readonly host: string,
    readonly step: string,
    message: string,
    readonly hint?: string,
  ) {
    super(`[${host}] ${step}: ${message}${hint ? ` — ${hint}` : ''}`);
    this.name = 'StepError';
  }
}

export function describeError(error: unknown): string {
  if (error instanceof Error) return error.message;
  return String(error);
}
