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
  readonly #prefetched = new Map<string, Map<string, ProbeAnswer>>();
  /** Prefetches on their way, per member. */
  readonly #asking = new Map<string, { token: symbol; asking: Promise<void> }>();

  async virshFor(member: Member): Promise<Virsh> {
    const [ssh, session] = await Promise.all([this.connections.get(member.hypervisor), this.sessions.get(member.hypervisor)]);
    return new Virsh(ssh, member.hypervisor.libvirt_uri, session);
  }

  /**
   * Asks every member's questions up front, in one probe per hypervisor (through its virsh
   * session); a failure is left for the steps to meet and report, on their own hosts. A member asked
   * before, or being asked now, is not asked again: its remaining answers still stand.
   */
  async prefetch(members: readonly Member[], questionsOf: (member: Member) => Question[]): Promise<void> {
    const unasked = members.filter((member) => !this.#prefetched.has(member.name) && !this.#asking.has(member.name));
    for (const hosted of membersByHypervisor(unasked).values()) {
      const asked = hosted.map((member, m) => ({ member, questions: questionsOf(member).map((question, q) => ({ name: `m${m}q${q}`, question })) }));
      // Who asked: a member forgotten (or asked again) meanwhile no longer points at this token.
      const token = Symbol('prefetch');
      const asking = (async () => {
        try {
          const answers = await (await this.virshFor(hosted[0]!)).probe(Object.fromEntries(asked.flatMap(({ questions }) => questions.map(({ name, question }) => [name, question]))));
          // A member forgotten while its answers were on their way keeps none of them.
          for (const { member, questions } of asked) if (this.#asking.get(member.name)?.token === token) this.#prefetched.set(member.name, new Map(questions.map(({ name, question }) => [keyOf(question), answers[name]!])));
        } catch {
          // The step that needs an answer asks again and fails with the reason, on its own host.
        } finally {
          for (const member of hosted) if (this.#asking.get(member.name)?.token === token) this.#asking.delete(member.name);
        }
      })();
      for (const member of hosted) this.#asking.set(member.name, { token, asking });
    }
    await Promise.all(members.map((member) => this.#asking.get(member.name)?.asking));
  }

  /**
   * Answers from the prefetch where it has them (each used once, unless `keep`: a look that changes
   * nothing and leaves them for the step they were asked for); the rest asked now, in one probe.
   */
  async probe<K extends string>(member: Member, questions: Record<K, Question>, { keep = false } = {}): Promise<Record<K, ProbeAnswer>> {
    // Answers on their way are waited for rather than asked for a second time.
    await this.#asking.get(member.name)?.asking;
    const cache = this.#prefetched.get(member.name);
    const answers = {} as Record<K, ProbeAnswer>;
    const missing = {} as Record<K, Question>;
    for (const name of Object.keys(questions) as K[]) {
      const key = keyOf(questions[name]);
      const cached = cache?.get(key);
      if (cached) {
        answers[name] = cached;
        if (!keep) cache!.delete(key);
      } else missing[name] = questions[name];
    }
    if (Object.keys(missing).length > 0) Object.assign(answers, await (await this.virshFor(member)).probe(missing));
    return answers;
  }

  /** A member whose libvirt objects this run changes outside the steps that asked (a departure): its answers are stale. */
  forget(member: Member): void {
    this.#prefetched.delete(member.name);
    this.#asking.delete(member.name);
  }

  close(): Promise<void> {
    this.sessions.close();
    return this.connections.closeAll();
  }
}

const keyOf = (question: Question): string => JSON.stringify(question);
