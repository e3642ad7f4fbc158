import { commandLine } from '../core/shell.ts';
import type { SshConnection } from '../remote/ssh.ts';

/**
 * virsh on a hypervisor, over its SSH connection. Commands are argument arrays; read-only probes
 * are batched into one remote shell so a check costs one round trip, not one per question.
 */

export interface ProbeAnswer {
  code: number;
  output: string;
}

const MARK = '@@etcd-kvm@@';

/** A read-only question: virsh arguments, or a full shell pipeline built with commandLine(). */
export type Question = readonly string[] | { shell: string };

export const virshArgv = (uri: string, args: readonly string[]): string[] => ['virsh', '-q', '-c', uri, ...args];

export class Virsh {
  constructor(
    readonly ssh: SshConnection,
    readonly uri: string,
  ) {}

  argv(args: readonly string[]): string[] {
    return virshArgv(this.uri, args);
  }

  /** Runs a virsh command that must succeed; returns its stdout. */
  run(args: readonly string[], options: { stdin?: string | Buffer; timeoutMs?: number } = {}): Promise<string> {
    // Named without the URI and never with stdin (which may carry a domain definition or an ISO).
    return this.ssh.run(this.argv(args), { ...options, describe: `virsh ${args.slice(0, 2).join(' ')}` });
  }

  /**
   * Asks several questions in one remote shell. Each answer is the command's exit code and its
   * output (stdout and stderr together, since a failing virsh explains itself on stderr).
   * The virsh questions run in one virsh process, as a batch: one connection to libvirtd instead of
   * one per question (each costs ~20-90 ms on a busy host, and a member has a dozen). Pipelines run after it.
   */
  async probe<K extends string>(questions: Record<K, Question>): Promise<Record<K, ProbeAnswer>> {
    const names = Object.keys(questions) as K[];
    const batched = names.filter((name) => !('shell' in (questions[name] as Question)));
    const piped = names.filter((name) => 'shell' in (questions[name] as Question));
    const script = [
      ...(batched.length > 0 ? [`${commandLine(['virsh', '-c', this.uri, virshBatch(batched.map((name) => [name, questions[name] as readonly string[]]))])} 2>&1`] : []),
      ...piped.map((name) => `printf '%s\\n' ${MARK}${name}; ${(questions[name] as { shell: string }).shell} 2>&1; printf '\\n%s %s\\n' ${MARK}rc $?`),
    ].join('\n');
    const result = await this.ssh.exec(['sh', '-c', script]);
    const batch = batched.length > 0 ? parseVirshBatch(result.stdout) : { answers: {}, rest: result.stdout };
    const answers = { ...batch.answers, ...parsePiped(batch.rest) } as Partial<Record<K, ProbeAnswer>>;
    for (const name of names) {
      if (!answers[name]) throw new Error(`probe on ${this.ssh.target.label} gave no answer for ${name}: ${result.stderr.trim() || result.stdout.trim().split('\n')[0] || `exit ${result.code}`}`);
    }
    return answers as Record<K, ProbeAnswer>;
  }
}

/**
 * One virsh invocation running several commands (virsh's own `;`-separated syntax, words quoted as
 * for sh, which virsh's parser reads the same way), each announced by an `echo` marker. virsh goes on
 * after a failed command, prints every error as `error: …` in order with the output (it flushes stdout
 * first), and, without -q, ends each command's output with one newline.
 */
export function virshBatch(commands: readonly (readonly [string, readonly string[]])[]): string {
  return [...commands.flatMap(([name, args]) => [`echo ${MARK}${name}`, commandLine(args)]), `echo ${MARK}`].join('; ');
}

/**
 * The answers of virshBatch, by name (a command failed when it printed an `error:` line), and what
 * followed the batch. Only a complete batch answers: a virsh that died half-way says nothing for certain.
 */
export function parseVirshBatch(stdout: string): { answers: Record<string, ProbeAnswer>; rest: string } {
  const answers: Record<string, ProbeAnswer> = {};
  const end = stdout.indexOf(`${MARK}\n`);
  if (end < 0) return { answers, rest: '' };
  for (const part of stdout.slice(0, end).split(MARK).slice(1)) {
    const newline = part.indexOf('\n');
    if (newline <= 0) continue;
    const output = part.slice(newline + 1).replace(/\n$/, '');
    answers[part.slice(0, newline)] = { code: /^error: /m.test(output) ? 1 : 0, output };
  }
  return { answers, rest: stdout.slice(end + MARK.length + 1) };
}

/** Pipelines' answers: `MARKname`, the output, then `MARKrc CODE`. */
function parsePiped(stdout: string): Record<string, ProbeAnswer> {
  const answers: Record<string, ProbeAnswer> = {};
  const sections = new RegExp(`^${MARK}([^\\n]+)\\n([\\s\\S]*?)\\n${MARK}rc (\\d+)$`, 'gm');
  for (const match of stdout.matchAll(sections)) answers[match[1]!] = { code: Number(match[3]), output: match[2]! };
  return answers;
}

/** Does virsh's message say the domain does not exist? */
export const saysDomainMissing = (text: string): boolean => /failed to get domain|domain not found|no domain/i.test(text);

/** Is this virsh failure "no such object" (as opposed to a broken connection)? */
export const isNotFound = (answer: ProbeAnswer): boolean =>
  answer.code !== 0 && /(failed to get|not found|no storage vol|no domain|no network|no storage pool)/i.test(answer.output);
