/**
 * Commands for a remote POSIX `sh`, built from argument arrays. Every argument is single-quoted
 * (a quote inside becomes '\''), which every POSIX shell reads literally: no expansion, no globbing,
 * no word splitting. zx's quote() emits bash-only $'…' strings, which dash (Debian's sh) does not read.
 */

const SAFE = /^[A-Za-z0-9_@%+=:,./-]+$/;

export function quote(arg: string): string {
  if (arg === '') return "''";
  if (SAFE.test(arg)) return arg;
  return `'${arg.replace(/'/g, `'\\''`)}'`;
}

/** One command line from a program and its arguments. */
export function commandLine(argv: readonly string[]): string {
  if (argv.length === 0) throw new Error('commandLine needs at least the program');
  return argv.map(quote).join(' ');
}
