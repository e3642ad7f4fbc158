import { commandLine } from '../core/shell.ts';
import type { SshConnection, SshTarget } from '../remote/ssh.ts';
import type { VirshAsker, VirshReply } from './session.ts';

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

/** Questions per batch written to a session. */
const SESSION_BATCH = 8;

export const virshArgv = (uri: string, args: readonly string[]): string[] => ['virsh', '-q', '-c', uri, ...args];

/** What virsh asks of its hypervisor's connection: commands run there, and its name for errors. */
export type VirshHost = Pick<SshConnection, 'run' | 'exec'> & { readonly target: Pick<SshTarget, 'label'> };

export class Virsh {
  constructor(
    readonly ssh: VirshHost,
    readonly uri: string,
    /** The run's interactive virsh on this hypervisor, if it has one: questions asked there spawn no process. */
    readonly session?: VirshAsker,
  ) {}

  argv(args: readonly string[]): string[] {
    return virshArgv(this.uri, args);
  }

  /** These commands asked as a session asks them (guest/agent.ts takes either): through the session, or as one virsh batch. */
  async ask(commands: readonly (readonly string[])[]): Promise<VirshReply[]> {
    if (this.session) return this.session.ask(commands, { urgent: true });
    const answers = await this.#askVirsh(commands.map((args, i) => [String(i), args] as const));
    return commands.map((_, i) => ({ ok: answers[String(i)]!.code === 0, output: answers[String(i)]!.output }));
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
   * dozen). Pipelines run beside them, together in one exec.
   */
  async probe<K extends string>(questions: Record<K, Question>): Promise<Record<K, ProbeAnswer>> {
    const pending = this.probeEach(questions);
    const names = Object.keys(pending) as K[];
    const answers = await Promise.all(names.map((name) => pending[name]));
    return Object.fromEntries(names.map((name, i) => [name, answers[i]!])) as unknown as Record<K, ProbeAnswer>;
  }

  /** probe's answers, each as soon as it is in: the virsh questions' together, the pipelines' together. */
  probeEach<K extends string>(questions: Record<K, Question>): Record<K, Promise<ProbeAnswer>> {
    const names = Object.keys(questions) as K[];
    const batched = names.filter((name) => !('shell' in (questions[name] as Question)));
    const piped = names.filter((name) => 'shell' in (questions[name] as Question));
    const fromVirsh = this.#askVirsh(batched.map((name) => [name, questions[name] as readonly string[]] as const));
    // One exec for all of them: every exec costs the hypervisor's sshd a session (~0.15 s on the lab).
    const fromPipes =
      piped.length === 0
        ? Promise.resolve({})
        : this.#runPipelines(piped.map((name) => [name, (questions[name] as { shell: string }).shell] as const));
    return Object.fromEntries(
      names.map((name) => [
        name,
        (piped.includes(name) ? fromPipes : fromVirsh).then((answers: Record<string, ProbeAnswer>) => {
          if (!answers[name]) throw new Error(`probe on ${this.ssh.target.label} gave no answer for ${name}`);
          return answers[name];
        }),
      ]),
    ) as Record<K, Promise<ProbeAnswer>>;
  }

  async #runPipelines(pipelines: readonly (readonly [string, string])[]): Promise<Record<string, ProbeAnswer>> {
    const script = pipelines
      .map(([name, shell]) => `printf '%s\\n' ${MARK}${name}; ${shell} 2>&1; printf '\\n%s %s\\n' ${MARK}rc $?`)
      .join('\n');
    return parsePiped((await this.ssh.exec(['sh', '-c', script])).stdout);
  }

  async #askVirsh(asked: readonly (readonly [string, readonly string[]])[]): Promise<Record<string, ProbeAnswer>> {
    if (asked.length === 0) return {};
    if (this.session) {
      // In small batches: an urgent ask (a guest agent's) waits for one of them at most, not for all.
      const chunks = Array.from({ length: Math.ceil(asked.length / SESSION_BATCH) }, (_, i) =>
        asked.slice(i * SESSION_BATCH, (i + 1) * SESSION_BATCH),
      );
      const replies = (await Promise.all(chunks.map((chunk) => this.session!.ask(chunk.map(([, args]) => args))))).flat();
      return Object.fromEntries(asked.map(([name], i) => [name, { code: replies[i]!.ok ? 0 : 1, output: replies[i]!.output }]));
    }
    const result = await this.ssh.exec(['sh', '-c', `${commandLine(['virsh', '-c', this.uri, virshBatch(asked)])} 2>&1`]);
    const { answers } = parseVirshBatch(result.stdout);
    for (const [name] of asked) {
      if (!answers[name])
        throw new Error(
          `probe on ${this.ssh.target.label} gave no answer for ${name}: ` +
            `${result.stderr.trim() || result.stdout.trim().split('\n')[0] || `exit ${result.code}`}`,
        );
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

/** Pipelines' answers: `MARKname`, the output, then `MARKrc CODE`. */
function parsePiped(stdout: string): Record<string, ProbeAnswer> {
  const answers: Record<string, ProbeAnswer> = {};
  const sections = new RegExp(`^${MARK}([^\\n]+)\\n([\\s\\S]*?)\\n${MARK}rc (\\d+)$`, 'gm');
  for (const match of stdout.matchAll(sections)) answers[match[1]!] = { code: Number(match[3]), output: match[2]! };
  return answers;
}

/** Does virsh's message say the domain does not exist? */
export const saysDomainMissing = (text: string): boolean => /failed to get domain|domain not found|no domain/i.test(text);

/** The kinds of libvirt object a question can find missing. */
export type LibvirtObject = 'domain' | 'volume' | 'pool' | 'network';

/**
 * Which object a failed answer says does not exist, from libvirt's own words ("Storage pool not found:
 * no storage pool with matching name …"), or undefined for any other failure (a broken connection, a
 * pool not started). A volume question whose pool is missing answers `pool`: the volume's absence is
 * then unknown, and nothing may be decided from it (a mistyped volume_pool must never read as "disk gone").
 */
export function missingObject(answer: ProbeAnswer): LibvirtObject | undefined {
  if (answer.code === 0) return undefined;
  const text = answer.output;
  // The pool first: a volume question whose pool is missing fails with the pool's error alone.
  if (/failed to get pool|storage pool not found|no storage pool with matching/i.test(text)) return 'pool';
  if (/failed to get vol|storage volume not found|no storage vol with matching/i.test(text)) return 'volume';
  if (/failed to get network|network not found|no network with matching/i.test(text)) return 'network';
  if (saysDomainMissing(text)) return 'domain';
  return undefined;
}

/** Does this failed answer say that `object` (the one the question asked about) does not exist? */
export const isNotFound = (answer: ProbeAnswer, object: LibvirtObject): boolean => missingObject(answer) === object;

/** What a failed virsh said, its `error: ` prefixes dropped and its lines joined: for messages. */
export const virshSays = (answer: ProbeAnswer): string =>
  answer.output
    .trim()
    .split('\n')
    .map((line) => line.replace(/^error: /, ''))
    .join(': ') || `virsh exit ${answer.code}`;
