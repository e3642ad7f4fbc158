/**
 * Flags whose value may be left out (`recover --from-snapshot [TIMESTAMP]`, `backup --verify [TIMESTAMP]`),
 * which parseArgs cannot say: a flag with no value after it (the end, or another flag) gets an empty one,
 * which stands for none.
 */
export function withOptionalValues(argv: readonly string[], flags: readonly string[]): string[] {
  return argv.flatMap((arg, i) => (flags.includes(arg) && (argv[i + 1] === undefined || argv[i + 1]!.startsWith('-')) ? [arg, ''] : [arg]));
}
