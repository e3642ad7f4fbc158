import type { FactCache } from '../core/facts.ts';
import type { Member } from '../inventory/model.ts';
import { membersByHypervisor } from '../inventory/placement.ts';
import { saysDomainMissing } from '../libvirt/virsh.ts';
import { OWNER_NAMESPACE } from '../render/domain.ts';
import type { VirshSessions } from '../libvirt/session.ts';
import type { MemberConnections } from '../remote/members.ts';
import type { SshConnection } from '../remote/ssh.ts';
import { askThroughAgents, lookAtBoots, type AgentAnswer, type BootLook } from './agent.ts';
import {
  CLOUD_INIT_RESULT,
  CLOUD_INIT_STATUS,
  guestProbeScript,
  parseGuestProbe,
  parseUnitState,
  unitStateScript,
  type GuestFacts,
  type GuestQuestions,
} from './facts.ts';

/** The kind of fact a guest's answers are, in the run's fact cache (steps/registry.ts says which changes make them stale). */
const GUEST = 'guest';

/** A script run as root inside a member, read-only; its output. */
type RunScript = (script: string) => Promise<string>;

// The script on stdin: sudo logs one short command line instead of the whole script on every run.
const overSsh =
  (ssh: SshConnection): RunScript =>
  (script) =>
    ssh.run(['sudo', 'sh', '-s'], { stdin: script, describe: 'guest probe', timeoutMs: 60_000 });

/** Long enough for three emulated guests probed at once on a busy host (one probe: ~0.5 s idle). */
const AGENT_PROBE_TIMEOUT_MS = 30_000;

/**
 * Asks members for their guest facts: through the QEMU guest agent, over the run's virsh session on
 * each hypervisor, all its members at once (guest/agent.ts), and over SSH to a member whose agent
 * does not answer (an image without qemu-guest-agent, a domain defined before the tool added the
 * agent's channel). The deploy starts every member's probe early, while other steps work, and keeps
 * the answer in the run's fact cache; the guest step takes it once, unless a step changed the member's
 * guest since (a restarted VM, a restore: the runner drops the answer then). Re-checks ask again.
 */
export class GuestProbe {
  /** Why a member's agent did not answer in this run (SSH was asked instead): --profile says it. */
  readonly agentFailures = new Map<string, string>();

  constructor(
    readonly facts: FactCache,
    readonly connections: MemberConnections,
    readonly sessions: VirshSessions,
    /** This cluster's ID (read after the pki step makes it): the agent is asked only inside domains marked with it. */
    readonly clusterId: () => string | undefined,
  ) {}

  /**
   * Starts asking now; a member that cannot be reached either way leaves no answer (the step asks,
   * and waits, itself). A member with an early answer, or one on its way, is not asked again.
   */
  prefetch(members: readonly Member[], questionsOf: (member: Member) => GuestQuestions): void {
    // Before the pki step of a first deploy: no domain carries a mark yet, so no agent may be asked.
    if (this.clusterId() === undefined) return;
    for (const hosted of membersByHypervisor(members.filter((member) => !this.facts.has(member.name, GUEST))).values()) {
      const asked = hosted.map((member) => ({ member, questions: questionsOf(member) }));
      const answers = this.#runInAgents(asked.map(({ member, questions }) => ({ member, script: guestProbeScript(questions) })));
      asked.forEach(({ member, questions }, i) => {
        const facts = answers.then((all) =>
          this.#factsFrom(all[i]!, member, questions, async (script) => overSsh(await this.connections.get(member))(script)),
        );
        this.facts.put(
          member.name,
          GUEST,
          JSON.stringify(questions),
          facts.catch(() => undefined),
        );
      });
    }
  }

  /** Asks one member now: through its agent, or over SSH (`connect`, only then) when the agent does not answer (re-checks, the first boot). */
  async askNow(member: Member, questions: GuestQuestions, connect: () => Promise<SshConnection>): Promise<GuestFacts> {
    const ssh: RunScript = async (script) => overSsh(await connect())(script);
    const [answer] = await this.#runInAgents([{ member, script: guestProbeScript(questions) }]);
    return (
      (await this.#factsFrom(answer!, member, questions, ssh)) ?? this.#complete(await ssh(guestProbeScript(questions)), questions, ssh)
    );
  }

  /** One look at the member's boot through its agent, which starts no process in the guest (guest/boot.ts). */
  async lookAtBoot(member: Member): Promise<BootLook> {
    const id = this.clusterId();
    if (id === undefined) return { unanswered: 'the cluster has no ID yet: no domain can carry its mark' };
    try {
      const [look] = await lookAtBoots(
        await this.sessions.get(member.hypervisor),
        [member.name],
        { namespace: OWNER_NAMESPACE, id },
        CLOUD_INIT_RESULT,
        CLOUD_INIT_STATUS,
      );
      return look!;
    } catch (error) {
      return { unanswered: (error as Error).message };
    }
  }

  /** The facts in an agent's answer; over SSH when there are none (undefined: no domain, so no guest). */
  async #factsFrom(answer: AgentAnswer, member: Member, questions: GuestQuestions, ssh: RunScript): Promise<GuestFacts | undefined> {
    if (answer.ok) {
      try {
        return await this.#complete(answer.output, questions, (script) => this.#runInAgent(member, script, ssh));
      } catch (error) {
        this.agentFailures.set(member.name, (error as Error).message);
      }
    } else {
      this.agentFailures.set(member.name, answer.reason);
      // No domain yet (a first deploy, a joiner): no guest to ask over SSH either.
      if (saysDomainMissing(answer.reason)) return undefined;
    }
    return this.#complete(await ssh(guestProbeScript(questions)), questions, ssh);
  }

  /** The facts in a probe's output; what the files leave unsettled about the units is asked of systemd, the same way. */
  async #complete(output: string, questions: GuestQuestions, run: RunScript): Promise<GuestFacts> {
    const { facts, units } = parseGuestProbe(output, questions);
    return { ...facts, units: units ?? parseUnitState(await run(unitStateScript(questions.units))) };
  }

  /** One script in one member: through its agent, else over SSH. */
  async #runInAgent(member: Member, script: string, ssh: RunScript): Promise<string> {
    const [answer] = await this.#runInAgents([{ member, script }]);
    return answer!.ok ? answer!.output : ssh(script);
  }

  /** Scripts in members of one hypervisor, all at once. */
  async #runInAgents(requests: readonly { member: Member; script: string }[]): Promise<AgentAnswer[]> {
    const { hypervisor } = requests[0]!.member;
    const id = this.clusterId();
    if (id === undefined) return requests.map(() => ({ ok: false, reason: 'the cluster has no ID yet: no domain can carry its mark' }));
    try {
      return await askThroughAgents(
        await this.sessions.get(hypervisor),
        requests.map(({ member, script }) => ({ domain: member.name, script })),
        { namespace: OWNER_NAMESPACE, id },
        AGENT_PROBE_TIMEOUT_MS,
      );
    } catch (error) {
      return requests.map(() => ({ ok: false, reason: (error as Error).message }));
    }
  }

  /** The early answer to the same questions, once, if the fact cache still has it; any other early answer goes with it. */
  async takeEarly(member: Member, questions: GuestQuestions): Promise<GuestFacts | undefined> {
    const early = this.facts.take<GuestFacts | undefined>(member.name, GUEST, JSON.stringify(questions));
    this.facts.invalidate(member.name, [GUEST]);
    return early;
  }
}
