import type { FactCache } from '../core/facts.ts';
import type { Member } from '../inventory/model.ts';
import { membersByHypervisor } from '../inventory/placement.ts';
import { VirshSessions } from './session.ts';
import { Virsh, type ProbeAnswer, type Question } from './virsh.ts';
import { HypervisorConnections } from '../remote/hypervisors.ts';
import type { CommandTimes } from '../remote/command-times.ts';

/** The kind of fact libvirt's answers are, in the run's fact cache: the steps that change them say so (steps/registry.ts). */
const LIBVIRT = 'libvirt';

/** A member's libvirt answers by the questions' names: what a step that only reads asks of RemoteContext (its probe). */
export interface LibvirtAnswers {
  probe(member: Member, questions: Record<string, Question>): Promise<Record<string, ProbeAnswer>>;
}

/**
 * What the remote steps share during one run: the hypervisor connections, and the answers of one
 * batched probe per member asked up front (like Ansible's fact gathering), so that a run where nothing
 * changed costs one round trip per member instead of one per step. The answers are kept in the run's
 * fact cache until a step changes that member's libvirt objects (the runner drops them then, before
 * the step's re-check).
 */
export class RemoteContext {
  readonly connections: HypervisorConnections;
  /** One interactive virsh per hypervisor: the probes' questions and the guest agents' polls, without a process each. */
  readonly sessions: VirshSessions;

  /** `connectTimes`: where each hypervisor connection's handshake time is recorded (--profile). */
  constructor(
    readonly facts: FactCache,
    connectTimes?: CommandTimes,
  ) {
    this.connections = new HypervisorConnections(connectTimes);
    this.sessions = new VirshSessions(this.connections);
  }

  async virshFor(member: Member): Promise<Virsh> {
    const [ssh, session] = await Promise.all([this.connections.get(member.hypervisor), this.sessions.get(member.hypervisor)]);
    return new Virsh(ssh, member.hypervisor.libvirtUri, session);
  }

  /**
   * Asks every member's questions up front, in one probe per hypervisor (through its virsh
   * session); a failure is left for the steps to meet and report, on their own hosts. A member with
   * answers kept, or on their way, is not asked again. Each answer is there for a step as soon as it
   * is in: the volumes' need not wait for the seed ISOs' digests.
   */
  async prefetch(members: readonly Member[], questionsOf: (member: Member) => Question[]): Promise<void> {
    for (const hosted of membersByHypervisor(members.filter((member) => !this.facts.has(member.name, LIBVIRT))).values()) {
      const asked = hosted.map((member, m) => ({
        member,
        questions: questionsOf(member).map((question, q) => ({ name: `m${m}q${q}`, question })),
      }));
      const answers = this.virshFor(hosted[0]!).then((virsh) =>
        virsh.probeEach(Object.fromEntries(asked.flatMap(({ questions }) => questions.map(({ name, question }) => [name, question])))),
      );
      // The step that needs an answer the prefetch could not get asks again, and fails with the reason on its own host.
      for (const { member, questions } of asked)
        for (const { name, question } of questions)
          this.facts.put(
            member.name,
            LIBVIRT,
            keyOf(question),
            answers.then((all) => all[name]).catch(() => undefined),
          );
    }
    await Promise.all(members.flatMap((member) => this.facts.answersOf(member.name, LIBVIRT)));
  }

  /** Answers kept in the fact cache where it has them, waiting for those on their way; the rest asked now, in one probe. */
  async probe<K extends string>(member: Member, questions: Record<K, Question>): Promise<Record<K, ProbeAnswer>> {
    const names = Object.keys(questions) as K[];
    const kept = await Promise.all(
      names.map((name) => this.facts.get<ProbeAnswer | undefined>(member.name, LIBVIRT, keyOf(questions[name]))),
    );
    const answers = {} as Record<K, ProbeAnswer>;
    const missing = {} as Record<K, Question>;
    names.forEach((name, i) => {
      const answer = kept[i];
      if (answer) answers[name] = answer;
      else missing[name] = questions[name];
    });
    if (Object.keys(missing).length > 0) Object.assign(answers, await (await this.virshFor(member)).probe(missing));
    return answers;
  }

  close(): Promise<void> {
    this.sessions.close();
    return this.connections.closeAll();
  }
}

const keyOf = (question: Question): string => JSON.stringify(question);
