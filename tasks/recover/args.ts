/** recover's command line: --from-snapshot takes an optional timestamp, which parseArgs cannot say; an empty value stands for none. */
export function normalizeArgs(argv: readonly string[]): string[] {
  return argv.flatMap((arg, i) =>
    arg === '--from-snapshot' && (argv[i + 1] === undefined || argv[i + 1]!.startsWith('-')) ? [arg, ''] : [arg],
  );
}
