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
   * A question is either virsh arguments or, for pipelines, a full command built with commandLine().
   */
  async probe<K extends string>(questions: Record<K, Question>): Promise<Record<K, ProbeAnswer>> {
    const names = Object.keys(questions) as K[];
    const script = names
      .map((name) => {
        const question = questions[name] as Question;
        const command = 'shell' in question ? question.shell : commandLine(this.argv(question));
        return `printf '%s\\n' ${MARK}${name}; ${command} 2>&1; printf '\\n%s %s\\n' ${MARK}rc $?`;
      })
      .join('\n');
    const result = await this.ssh.exec(['sh', '-c', script]);
    const answers = {} as Record<K, ProbeAnswer>;
    const sections = result.stdout.split(`${MARK}`).slice(1);
    for (let i = 0; i + 1 < sections.length; i += 2) {
      const header = sections[i]!;
      const name = header.slice(0, header.indexOf('\n')) as K;
      const output = header.slice(header.indexOf('\n') + 1).replace(/\n$/, '');
      const code = Number.parseInt(sections[i + 1]!.replace(/^rc /, ''), 10);
      answers[name] = { code, output };
    }
    for (const name of names) {
      if (!answers[name]) throw new Error(`probe on ${this.ssh.target.label} gave no answer for ${name}: ${result.stderr.trim() || `exit ${result.code}`}`);
    }
    return answers;
  }
}

/** Is this virsh failure "no such object" (as opposed to a broken connection)? */
export const isNotFound = (answer: ProbeAnswer): boolean =>
  answer.code !== 0 && /(failed to get|not found|no storage vol|no domain|no network|no storage pool)/i.test(answer.output);
