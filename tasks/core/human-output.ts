import { Console } from 'node:console';
import { writeFileSync } from 'node:fs';

/**
 * `--json -`: the report on standard output alone, so a pipe reads JSON (as `terraform show -json` or
 * Ansible's json callback give it); everything a run says for people then goes to standard error.
 */
export const STANDARD_OUTPUT = '-';

let humanToStderr = false;

/** Where what a run says for people goes: standard output, unless the report took it. */
export const humanStream = (): NodeJS.WriteStream => (humanToStderr ? process.stderr : process.stdout);

/** Called once, before anything is said: `--json -` moves what is said for people (console and listr) to standard error. */
export function reportGoesTo(target: string | undefined): void {
  if (target !== STANDARD_OUTPUT) return;
  humanToStderr = true;
  globalThis.console = new Console({ stdout: process.stderr, stderr: process.stderr });
}

/** The report as JSON, into its file or onto standard output. */
export function writeReport(target: string, report: unknown): void {
  const text = `${JSON.stringify(report, null, 2)}\n`;
  if (target === STANDARD_OUTPUT) process.stdout.write(text);
  else writeFileSync(target, text);
}
