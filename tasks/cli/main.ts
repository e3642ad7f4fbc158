import { readFileSync } from 'node:fs';
import { extname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { EXIT } from '../core/errors.ts';
import { PACKAGE_ROOT } from '../core/package-root.ts';
import { COMPLETION_SHELLS, completionScript, type CompletionShell } from './completion.ts';
import { COMMANDS, type Command } from './commands.ts';

/**
 * The `etcd-kvm` command: `etcd-kvm deploy -i inv.yaml` runs tasks/deploy.ts with `-i inv.yaml`, exactly
 * as `npx tsx tasks/deploy.ts -i inv.yaml` does. cli/commands.ts is the one list of commands: --help and
 * the shell completion are made from it.
 */

/** Built into this dispatcher rather than a script; listed by --help and completed like the others. */
export const COMPLETION = {
  name: 'completion',
  summary: 'print the completion script for bash, zsh or fish: source <(etcd-kvm completion bash)',
} as const;

/** `etcd-kvm help [COMMAND]` and `etcd-kvm version`, the words other tools take for --help and --version. */
export const HELP_COMMAND = { name: 'help', summary: "this text, or a command's own: etcd-kvm help COMMAND" } as const;
export const VERSION_COMMAND = { name: 'version', summary: 'print the version' } as const;

const NAMES = [...COMMANDS.map((command) => command.name), COMPLETION.name, HELP_COMMAND.name, VERSION_COMMAND.name];

export function helpText(): string {
  const width = Math.max(...NAMES.map((name) => name.length)) + 2;
  const line = (name: string, summary: string) => `  ${name.padEnd(width)}${summary}`;
  return [
    'Usage: etcd-kvm COMMAND [options]      (each command explains its options: etcd-kvm COMMAND --help)',
    '',
    'Commands:',
    ...COMMANDS.map((command) => line(command.name, command.summary)),
    line(COMPLETION.name, COMPLETION.summary),
    line(HELP_COMMAND.name, HELP_COMMAND.summary),
    line(VERSION_COMMAND.name, VERSION_COMMAND.summary),
    '',
    line('--version', 'print the version'),
    line('-h, --help', 'this text'),
  ].join('\n');
}

/** What a command line asks for: a script to run with the rest of the arguments, or text and an exit code. */
export type Dispatch =
  | { run: Command; rest: string[] }
  | { exit: number; stdout?: string; stderr?: string }
  | { completion: CompletionShell };

export function dispatch(argv: readonly string[], version: () => string): Dispatch {
  const [name, ...rest] = argv;
  if (name === undefined) return { exit: EXIT.badInput, stderr: `error: name a command\n\n${helpText()}` };
  if (name === '-h' || name === '--help') return { exit: EXIT.ok, stdout: helpText() };
  if (name === '--version' || name === VERSION_COMMAND.name) return { exit: EXIT.ok, stdout: version() };
  if (name === HELP_COMMAND.name) {
    // `etcd-kvm help deploy` is `etcd-kvm deploy --help`, as git, kubectl and talosctl take it.
    if (rest.length === 0) return { exit: EXIT.ok, stdout: helpText() };
    const asked = COMMANDS.find((candidate) => candidate.name === rest[0]);
    if (asked && rest.length === 1) return { run: asked, rest: ['--help'] };
    return { exit: EXIT.badInput, stderr: `error: help takes one command; commands are ${NAMES.join(', ')}` };
  }
  if (name === COMPLETION.name) {
    const shell = COMPLETION_SHELLS.find((known) => known === rest[0]);
    if (shell && rest.length === 1) return { completion: shell };
    return { exit: EXIT.badInput, stderr: `error: say the shell: etcd-kvm completion ${COMPLETION_SHELLS.join('|')}` };
  }
  const command = COMMANDS.find((candidate) => candidate.name === name);
  if (command) return { run: command, rest };
  return {
    exit: EXIT.badInput,
    stderr: `error: unknown command ${name}; commands are ${NAMES.join(', ')} (etcd-kvm --help says what each does)`,
  };
}

/** The command's script in tasks/commands/, with this file's extension. */
export function scriptPath(command: Command): string {
  const here = fileURLToPath(import.meta.url);
  return fileURLToPath(new URL(`../commands/${command.module}${extname(here)}`, import.meta.url));
}

function packageVersion(): string {
  const manifest = JSON.parse(readFileSync(join(PACKAGE_ROOT, 'package.json'), 'utf8')) as { version: string };
  return manifest.version;
}

export async function main(argv: readonly string[]): Promise<void> {
  const plan = dispatch(argv, packageVersion);
  if ('exit' in plan) {
    if (plan.stdout !== undefined) console.log(plan.stdout);
    if (plan.stderr !== undefined) console.error(plan.stderr);
    process.exitCode = plan.exit;
    return;
  }
  if ('completion' in plan) {
    // The step names come from the deploy's registry, which loads every step: only this command pays for it.
    const { SELECTABLE_STEPS } = await import('../steps/registry.ts');
    console.log(completionScript(plan.completion, { commands: COMMANDS, completion: COMPLETION.name, steps: SELECTABLE_STEPS }));
    return;
  }
  const script = scriptPath(plan.run);
  // The scripts read process.argv.slice(2) and run at import: they see the command line they would under tsx.
  const [node = process.execPath] = process.argv;
  process.argv = [node, script, ...plan.rest];
  await import(pathToFileURL(script).href);
}
