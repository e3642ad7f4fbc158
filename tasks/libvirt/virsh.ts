import { commandLine } from '../core/shell.ts';
import type { SshConnection } from '../remote/ssh.ts';
import type { VirshAsker } from './session.ts';

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
    /** The run's interactive virsh on this hypervisor, if it has one: questions asked there spawn no process. */
    readonly session?: VirshAsker,
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
   * Asks several questions at once. Each answer is the command's exit code and its output (stdout
   * and stderr together, since a failing virsh explains itself on stderr). The virsh questions go to
   * the session when there is one, otherwise to one virsh process as a batch: one connection to
   * libvirtd instead of one per question (each costs ~20-90 ms on a busy host, and a member has a
   * dozen). Pipelines run beside them, each in its own exec.
   */
  async probe<K extends string>(questions: Record<K, Question>): Promise<Record<K, ProbeAnswer>> {
    const names = Object.keys(questions) as K[];
    const batched = names.filter((name) => !('shell' in (questions[name] as Question)));
    const piped = names.filter((name) => 'shell' in (questions[name] as Question));
    const [fromVirsh, ...fromPipes] = await Promise.all([
      this.#askVirsh(batched.map((name) => [name, questions[name] as readonly string[]] as const)),
      ...piped.map(async (name) => {
        const result = await this.ssh.exec(['sh', '-c', `${(questions[name] as { shell: string }).shell} 2>&1`]);
        return { [name]: { code: result.code, output: result.stdout.replace(/\n$/, '') } };
      }),
    ]);
    return Object.assign({}, fromVirsh, ...fromPipes) as Record<K, ProbeAnswer>;
  }

  async #askVirsh(asked: readonly (readonly [string, readonly string[]])[]): Promise<Record<string, ProbeAnswer>> {
    if (asked.length === 0) return {};
    if (this.session) {
      const replies = await this.session.ask(asked.map(([, args]) => args));
      return Object.fromEntries(asked.map(([name], i) => [name, { code: replies[i]!.ok ? 0 : 1, output: replies[i]!.output }]));
    }
    const result = await this.ssh.exec(['sh', '-c', `${commandLine(['virsh', '-c', this.uri, virshBatch(asked)])} 2>&1`]);
    const { answers } = parseVirshBatch(result.stdout);
    for (const [name] of asked) {
      if (!answers[name]) throw new Error(`probe on ${this.ssh.target.label} gave no answer for ${name}: ${result.stderr.trim() || result.stdout.trim().split('\n')[0] || `exit ${result.code}`}`);
    }
    return answers;
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

/** Does virsh's message say the domain does not exist? */
export const saysDomainMissing = (text: string): boolean => /failed to get domain|domain not found|no domain/i.test(text);

/** Is this virsh failure "no such object" (as opposed to a broken connection)? */
export const isNotFound = (answer: ProbeAnswer): boolean =>
  answer.code !== 0 && /(failed to get|not found|no storage vol|no domain|no network|no storage pool)/i.test(answer.output);
