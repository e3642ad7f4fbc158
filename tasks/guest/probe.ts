import type { Member } from '../inventory/model.ts';
import type { MemberConnections } from '../remote/members.ts';
import type { SshConnection } from '../remote/ssh.ts';
import { guestProbeScript, parseGuestProbe, type GuestFacts, type GuestQuestions } from './facts.ts';

/**
 * Asks members for their guest facts: one SSH exec each. The pipeline starts every member's probe
 * early, while the hypervisor steps run, and the guest step takes each answer once — unless an
 * earlier step changed that member (a restarted VM), when it asks again. Re-checks after an apply
 * always ask again.
 */
export class GuestProbe {
  readonly #early = new Map<string, Promise<GuestFacts | undefined>>();

  constructor(readonly connections: MemberConnections) {}

  static async ask(ssh: SshConnection, questions: GuestQuestions): Promise<GuestFacts> {
    // The script on stdin: sudo logs one short command line instead of the whole script on every run.
    const output = await ssh.run(['sudo', 'sh', '-s'], { stdin: guestProbeScript(questions), describe: 'guest probe', timeoutMs: 60_000 });
    return parseGuestProbe(output, questions);
  }

  /** Opens the members' SSH connections now (a handshake with an emulated guest takes ~0.5-1 s), to be used later. */
  warmUp(members: readonly Member[]): void {
    for (const member of members) this.connections.get(member).catch(() => undefined);
  }

  /** Starts asking now; a member that cannot be reached yet leaves no answer (the step asks, and waits, itself). */
  prefetch(member: Member, questions: GuestQuestions): void {
    this.#early.set(member.name, this.connections.get(member).then((ssh) => GuestProbe.ask(ssh, questions)).catch(() => undefined));
  }

  /** The early answer, once, if there is one and it is still worth using. */
  async takeEarly(member: Member, stillValid: boolean): Promise<GuestFacts | undefined> {
    const early = this.#early.get(member.name);
    this.#early.delete(member.name);
    return stillValid ? early : undefined;
  }
}
