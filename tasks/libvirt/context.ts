import type { Member } from '../inventory/model.ts';
import { membersByHypervisor } from '../inventory/placement.ts';
import { VirshSessions } from './session.ts';
import { Virsh, type ProbeAnswer, type Question } from './virsh.ts';
import { HypervisorConnections } from '../remote/hypervisors.ts';

/**
 * What the remote steps share during one run: the hypervisor connections, and the answers of one
 * batched probe per member asked up front (like Ansible's fact gathering), so that a run where nothing
 * changed costs one round trip per member instead of one per step. Each prefetched answer is used once:
 * the re-check after an apply always asks again. This is sound because every step reads only the
 * objects it owns (volumes, seed ISO, domain), which no earlier step changes.
 */
export class RemoteContext {
  readonly connections = new HypervisorConnections();
  /** One interactive virsh per hypervisor: the probes' questions and the guest agents' polls, without a process each. */
  readonly sessions = new VirshSessions(this.connections);
  /** Each member's prefetched answers by question, arrived or on their way (undefined: the prefetch could not ask it). */
  readonly #prefetched = new Map<string, Map<string, Promise<ProbeAnswer | undefined>>>();

  async virshFor(member: Member): Promise<Virsh> {
    const [ssh, session] = await Promise.all([this.connections.get(member.hypervisor), this.sessions.get(member.hypervisor)]);
    return new Virsh(ssh, member.hypervisor.libvirt_uri, session);
  }

  /**
   * Asks every member's questions up front, in one probe per hypervisor (through its virsh
   * session); a failure is left for the steps to meet and report, on their own hosts. A member asked
   * before, or being asked now, is not asked again: its remaining answers still stand. Each answer
   * is there for a step as soon as it is in: the volumes' need not wait for the seed ISOs' digests.
   */
  async prefetch(members: readonly Member[], questionsOf: (member: Member) => Question[]): Promise<void> {
    for (const hosted of membersByHypervisor(members.filter((member) => !this.#prefetched.has(member.name))).values()) {
      const asked = hosted.map((member, m) => ({ member, questions: questionsOf(member).map((question, q) => ({ name: `m${m}q${q}`, question })) }));
      const answers = this.virshFor(hosted[0]!).then((virsh) => virsh.probeEach(Object.fromEntries(asked.flatMap(({ questions }) => questions.map(({ name, question }) => [name, question])))));
      // The step that needs an answer the prefetch could not get asks again, and fails with the reason on its own host.
      for (const { member, questions } of asked) this.#prefetched.set(member.name, new Map(questions.map(({ name, question }) => [keyOf(question), answers.then((all) => all[name]).catch(() => undefined)])));
    }
    await Promise.all(members.flatMap((member) => [...(this.#prefetched.get(member.name)?.values() ?? [])]));
  }

  /**
   * Answers from the prefetch where it has them (each used once, unless `keep`: a look that changes
   * nothing and leaves them for the step they were asked for), waiting for those on their way; the
   * rest asked now, in one probe.
   */
  async probe<K extends string>(member: Member, questions: Record<K, Question>, { keep = false } = {}): Promise<Record<K, ProbeAnswer>> {
    const cache = this.#prefetched.get(member.name);
    const names = Object.keys(questions) as K[];
    const prefetched = await Promise.all(names.map((name) => cache?.get(keyOf(questions[name]))));
    const answers = {} as Record<K, ProbeAnswer>;
    const missing = {} as Record<K, Question>;
    names.forEach((name, i) => {
      const answer = prefetched[i];
      if (answer) {
        answers[name] = answer;
        if (!keep) cache!.delete(keyOf(questions[name]));
      } else missing[name] = questions[name];
    });
    if (Object.keys(missing).length > 0) Object.assign(answers, await (await this.virshFor(member)).probe(missing));
    return answers;
  }

  /** A member whose libvirt objects this run changes outside the steps that asked (a departure): its answers are stale. */
  forget(member: Member): void {
    this.#prefetched.delete(member.name);
  }

  close(): Promise<void> {
    this.sessions.close();
    return this.connections.closeAll();
  }
}

const keyOf = (question: Question): string => JSON.stringify(question);
