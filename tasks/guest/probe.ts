import type { FactCache } from '../core/facts.ts';
import type { Member } from '../inventory/model.ts';
import { saysDomainMissing } from '../libvirt/virsh.ts';
import { OWNER_NAMESPACE } from '../render/domain.ts';
import type { VirshSessions } from '../libvirt/session.ts';
import type { MemberConnections } from '../remote/members.ts';
import type { SshConnection } from '../remote/ssh.ts';
import type { DigestMemory } from './digest-memory.ts';
import { sha256 } from '../core/digest.ts';
import {
  askThroughAgents,
  guestClocks,
  lookAtBoots,
  markedOurs,
  readThroughAgents,
  runThroughAgents,
  type BootLook,
  type FileRead,
} from './agent.ts';
import {
  agentProbeCommand,
  CLOUD_INIT_RESULT,
  CLOUD_INIT_STATUS,
  factsFromParts,
  guestProbeScript,
  parseAgentProbe,
  parseUnitState,
  partsFromScript,
  unitStateScript,
  type GuestFacts,
  type GuestQuestions,
  type ProbeParts,
  type StatEntry,
} from './facts.ts';

/** The kind of fact a guest's answers are, in the run's fact cache (steps/registry.ts says which changes make them stale). */
const GUEST = 'guest';

/** A script run as root inside a member, read-only; its output. */
type RunScript = (script: string) => Promise<string>;

// The script on stdin: sudo logs one short command line instead of the whole script on every run.
const overSsh =
  (ssh: Pick<SshConnection, 'run'>): RunScript =>
  (script) =>
    ssh.run(['sudo', 'sh', '-s'], { stdin: script, describe: 'guest probe', timeoutMs: 60_000 });

/** Long enough for emulated guests probed at once on a busy host (the lab's three: ~0.5 s in all, idle). */
const AGENT_PROBE_TIMEOUT_MS = 30_000;
/**
 * virsh sessions per hypervisor for the agents' calls, beside the one for libvirt's facts: members
 * take them in turn. Each agent call is a round trip into an emulated guest (3-30 ms), and one virsh
 * makes them one after another; a few sessions ask several guests at once, within the SSH
 * connection's channels (remote/ssh.ts MAX_CHANNELS) that the run's other commands need too.
 */
const AGENT_LANES = 3;

/** Where a probe takes a hypervisor's virsh sessions for the agents' calls: all it asks of VirshSessions. */
export type AgentSessions = Pick<VirshSessions, 'get'>;

/**
 * Asks members for their guest facts: through the QEMU guest agent (one process per member, a shell
 * that becomes stat, then file calls for what its answer leaves to read: guest/facts.ts,
 * guest/agent.ts; a managed file whose identity is unchanged since a run read it is not read
 * again: guest/digest-memory.ts), on virsh
 * sessions of the agents' own beside libvirt's (lanes); over SSH, in one script, for a member whose
 * agent does not answer (an image without qemu-guest-agent, a domain defined before the tool added
 * the agent's channel). The deploy starts every member's probe as the run starts, and keeps the
 * answer in the run's fact cache; the guest step takes it once, unless a step changed the member's
 * guest since (a restarted VM, a restore: the runner drops the answer then). Re-checks ask again.
 */
export class GuestProbe {
  /** Why a member's agent did not answer in this run (SSH was asked instead): --profile says it. */
  readonly agentFailures = new Map<string, string>();
  /** Each member's virsh session for its agent's calls, given in turn per hypervisor. */
  readonly #lanes = new Map<string, string>();
  readonly #lanesGiven = new Map<string, number>();

  constructor(
    readonly facts: FactCache,
    readonly connections: MemberConnections,
    readonly sessions: AgentSessions,
    /** This cluster's ID (read after the pki step makes it): the agent is asked only inside domains marked with it. */
    readonly clusterId: () => string | undefined,
    /** What files were read before: one whose identity has not changed since is not read again. */
    readonly digests: DigestMemory,
  ) {}

  /**
   * Starts asking now; a member that cannot be reached either way leaves no answer (the step asks,
   * and waits, itself). A member with an early answer, or one on its way, is not asked again.
   */
  prefetch(members: readonly Member[], questionsOf: (member: Member) => GuestQuestions): void {
    // Before the pki step of a first deploy: no domain carries a mark yet, so no agent may be asked.
    if (this.clusterId() === undefined) return;
    const unasked = members.filter((member) => !this.facts.has(member.name, GUEST));
    const lanes = new Map<string, Member[]>();
    for (const member of unasked) {
      const key = `${member.hypervisor.name}\0${this.#laneOf(member)}`;
      lanes.set(key, [...(lanes.get(key) ?? []), member]);
    }
    for (const inLane of lanes.values()) {
      const asked = inLane.map((member) => ({ member, questions: questionsOf(member) }));
      const answers = this.#partsThroughAgents(asked);
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

  /**
   * Asks one member now: through its agent, or over SSH (`connect`, only then) when the agent does not answer (re-checks, the first boot).
   */
  async askNow(member: Member, questions: GuestQuestions, connect: () => Promise<Pick<SshConnection, 'run'>>): Promise<GuestFacts> {
    const ssh: RunScript = async (script) => overSsh(await connect())(script);
    const [answer] = await this.#partsThroughAgents([{ member, questions }]);
    return (
      (await this.#factsFrom(answer!, member, questions, ssh)) ??
      this.#complete(partsFromScript(await ssh(guestProbeScript(questions))), questions, ssh)
    );
  }

  /** The member's lane (its virsh session for agent calls): the next of its hypervisor's, the first time it is asked. */
  #laneOf(member: Member): string {
    let lane = this.#lanes.get(member.name);
    if (lane === undefined) {
      const given = this.#lanesGiven.get(member.hypervisor.name) ?? 0;
      this.#lanesGiven.set(member.hypervisor.name, given + 1);
      lane = `agents-${given % AGENT_LANES}`;
      this.#lanes.set(member.name, lane);
    }
    return lane;
  }

  /** One look at the member's boot through its agent, which starts no process in the guest (guest/boot.ts). */
  async lookAtBoot(member: Member): Promise<BootLook> {
    const id = this.clusterId();
    if (id === undefined) return { unanswered: 'the cluster has no ID yet: no domain can carry its mark' };
    try {
      const [look] = await lookAtBoots(
        await this.sessions.get(member.hypervisor, this.#laneOf(member)),
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
  async #factsFrom(
    answer: ProbeParts | { failed: string },
    member: Member,
    questions: GuestQuestions,
    ssh: RunScript,
  ): Promise<GuestFacts | undefined> {
    if (!('failed' in answer)) {
      try {
        return await this.#complete(answer, questions, (script) => this.#runInAgent(member, script, ssh));
      } catch (error) {
        this.agentFailures.set(member.name, (error as Error).message);
      }
    } else {
      this.agentFailures.set(member.name, answer.failed);
      // No domain yet (a first deploy, a joiner): no guest to ask over SSH either.
      if (saysDomainMissing(answer.failed)) return undefined;
    }
    return this.#complete(partsFromScript(await ssh(guestProbeScript(questions))), questions, ssh);
  }

  /** The facts in a probe's parts; what the files leave unsettled about the units is asked of systemd, the same way. */
  async #complete(parts: ProbeParts, questions: GuestQuestions, run: RunScript): Promise<GuestFacts> {
    const { facts, units } = factsFromParts(parts, questions);
    return { ...facts, units: units ?? parseUnitState(await run(unitStateScript(questions.units))) };
  }

  /** One script in one member: through its agent, else over SSH. */
  async #runInAgent(member: Member, script: string, ssh: RunScript): Promise<string> {
    const id = this.clusterId();
    const [answer] =
      id === undefined
        ? [undefined]
        : await askThroughAgents(
            await this.sessions.get(member.hypervisor, this.#laneOf(member)),
            [{ domain: member.name, script }],
            { namespace: OWNER_NAMESPACE, id },
            AGENT_PROBE_TIMEOUT_MS,
          ).catch(() => [undefined]);
    return answer?.ok ? answer.output : ssh(script);
  }

  /**
   * The probe's parts of members of one hypervisor and lane, through their agents, all at once: the
   * marks; one process per member (guest/facts.ts AGENT_PROBE_SCRIPT: cloud-init's result, the
   * units' processes, the secrets, then stat) and its clock; then, with file calls, what that leaves to read:
   * managed files whose identity changed since they were last read, and the environment of each
   * environment unit's process. The managed files' bytes are hashed as they arrive and kept no
   * longer. Why not, per member, when the agent cannot say.
   */
  async #partsThroughAgents(
    requests: readonly { member: Member; questions: GuestQuestions }[],
  ): Promise<(ProbeParts | { failed: string })[]> {
    const id = this.clusterId();
    if (id === undefined) return requests.map(() => ({ failed: 'the cluster has no ID yet: no domain can carry its mark' }));
    try {
      const virsh = await this.sessions.get(requests[0]!.member.hypervisor, this.#laneOf(requests[0]!.member));
      const verdicts = await markedOurs(
        virsh,
        requests.map(({ member }) => member.name),
        { namespace: OWNER_NAMESPACE, id },
      );
      const answers: (ProbeParts | { failed: string })[] = verdicts.map((verdict) =>
        verdict === 'ours' ? { failed: 'not asked' } : { failed: verdict.ok ? 'no answer' : verdict.reason },
      );
      const ours = requests.flatMap((request, i) => (verdicts[i] === 'ours' ? [{ ...request, i }] : []));
      const [probes, clocks] = await Promise.all([
        runThroughAgents(
          virsh,
          ours.map(({ member, questions }) => ({ domain: member.name, ...agentProbeCommand(questions), answersWith: [0, 1] })),
          AGENT_PROBE_TIMEOUT_MS,
        ),
        guestClocks(
          virsh,
          ours.map(({ member }) => member.name),
        ),
      ]);
      const looked = probes.map((probe) => {
        if (!probe.ok) return { failed: probe.reason };
        try {
          return parseAgentProbe(probe.output);
        } catch (error) {
          return { failed: (error as Error).message };
        }
      });
      const toRead = ours.map(({ member, questions }, n) => {
        const look = looked[n]!;
        return 'failed' in look ? undefined : this.#toRead(member, questions, look);
      });
      const files = await readThroughAgents(
        virsh,
        ours.map(({ member }, n) => ({ domain: member.name, paths: toRead[n]?.paths ?? [] })),
      );
      ours.forEach(({ member, questions, i }, n) => {
        const look = looked[n]!;
        if ('failed' in look) {
          answers[i] = { failed: `the probe: ${look.failed}` };
          return;
        }
        const read = this.#digestsRead(member, questions, look.stats, files[n]!, clocks[n]);
        answers[i] = 'failed' in read ? read : partsOf(questions, look, { ...read, known: toRead[n]!.known }, files[n]!);
      });
      return answers;
    } catch (error) {
      return requests.map(() => ({ failed: (error as Error).message }));
    }
  }

  /**
   * What is left to read after the probe: the managed files whose digest is not known (recalled, for
   * a file whose identity has not changed since it was read; taken from the probe's print, for a
   * secret), and each environment unit's environment.
   */
  #toRead(member: Member, questions: GuestQuestions, look: AgentLook): { paths: string[]; known: Map<string, string> } {
    const known = new Map<string, string>();
    const paths: string[] = [];
    for (const path of questions.paths) {
      const entry = look.stats.get(path);
      if (!entry || !isRegular(entry)) continue;
      const printed = look.texts.get(path);
      // A secret's digest as the plan takes the wanted content's (guest/plan.ts sha256): the same text, the same bytes.
      const digest = questions.secrets?.includes(path)
        ? printed === undefined
          ? undefined
          : sha256(printed)
        : this.digests.recall(member.name, path, entry.identity);
      if (digest === undefined) paths.push(path);
      else known.set(path, digest);
    }
    const environs = questions.environmentUnits.flatMap((unit) => {
      const pid = look.processes.get(unit);
      return pid === undefined ? [] : [environOf(pid)];
    });
    return { paths: [...paths, ...environs], known };
  }

  /** The digests of the managed files just read, remembered for the next run; why not, when a regular file could not be read. */
  #digestsRead(
    member: Member,
    questions: GuestQuestions,
    stats: ReadonlyMap<string, StatEntry>,
    files: ReadonlyMap<string, FileRead>,
    guestNowNs: bigint | undefined,
  ): { read: Map<string, string> } | { failed: string } {
    const read = new Map<string, string>();
    for (const path of questions.paths) {
      const file = files.get(path);
      const entry = stats.get(path);
      if (!file || !entry) continue;
      if (!('content' in file)) return { failed: `${path}: ${'unreadable' in file ? file.unreadable : 'gone between stat and read'}` };
      const digest = sha256(file.content);
      read.set(path, digest);
      // Without the guest's clock nothing is remembered: read again next time. Nor is a secret's digest.
      if (guestNowNs !== undefined && !questions.secrets?.includes(path))
        this.digests.remember(member.name, path, entry.identity, entry.changedAtNs, guestNowNs, digest);
    }
    return { read };
  }

  /** The early answer to the same questions, once, if the fact cache still has it; any other early answer goes with it. */
  async takeEarly(member: Member, questions: GuestQuestions): Promise<GuestFacts | undefined> {
    const early = this.facts.take<GuestFacts | undefined>(member.name, GUEST, JSON.stringify(questions));
    this.facts.invalidate(member.name, [GUEST]);
    return early;
  }
}

const environOf = (pid: string) => `/proc/${pid}/environ`;

/** What the agent's one process said (guest/facts.ts parseAgentProbe). */
type AgentLook = ReturnType<typeof parseAgentProbe>;

const textOf = (read: FileRead | undefined): string => (read && 'content' in read ? read.content.toString('utf8') : '');

const isRegular = (entry: StatEntry) => (entry.mode & 0o170000) === 0o100000;

/** One member's parts from its agents' answers: the probe's, the digests known and read, the environments read. */
function partsOf(
  questions: GuestQuestions,
  look: AgentLook,
  digests: { read: ReadonlyMap<string, string>; known: ReadonlyMap<string, string> },
  files: ReadonlyMap<string, FileRead>,
): ProbeParts {
  return {
    stats: look.stats,
    processes: look.processes,
    cloudInitResult: look.cloudInitResult,
    digests: new Map([...digests.known, ...digests.read]),
    environs: new Map(
      questions.environmentUnits.flatMap((unit) => {
        const pid = look.processes.get(unit);
        return pid === undefined ? [] : [[unit, textOf(files.get(environOf(pid)))] as const];
      }),
    ),
    cloudInitStatus: '',
  };
}
