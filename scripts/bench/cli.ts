/** What the bench scripts share: their command line's values, and the median they report. */

/** The word after `name` on the command line, or `fallback` when `name` is not there. */
export function argument(name: string, fallback: string): string {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1]! : fallback;
}

/** The middle value (the upper one of the two middle values of an even count). */
export const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
