import type { Duplex } from 'node:stream';
import type { Hypervisor, Member } from '../inventory/model.ts';
import { retryWhile } from '../core/retry.ts';
import type { CommandTimes } from './command-times.ts';
import { ConnectionPool } from './pool.ts';
import { SshConnection, SshError } from './ssh.ts';

/** The member's hypervisor itself cannot be reached: waiting for the member to boot would not help. */
export class HypervisorUnreachable extends SshError {}

/** How often a booting member's SSH is tried again. */
export const BOOTING_RETRY_MS = 2_000;

/** What member connections ask of the run's hypervisor connections: one to forward a member's SSH through. */
export interface ForwardingHypervisors {
  get(hypervisor: Hypervisor): Promise<Pick<SshConnection, 'forward'>>;
}

/**
 * SSH into members themselves, as the admin user with the tool's own key, checking each member's
 * host key against the one the PKI step generated and pinned. Like etcd, a member is reached
 * through its hypervisor (a direct-tcpip channel on the connection the run already holds) or
 * directly when reach_via is direct (macvtap: the hypervisor cannot talk to its own guests).
 */
export class MemberConnections {
  // A member that is still booting refuses SSH: the next attempt must really try again.
  readonly #pool = new ConnectionPool({ forgetFailures: true });

  constructor(
    readonly hypervisors: ForwardingHypervisors,
    readonly identity: { privateKey: () => string; knownHostsPath: string },
    readonly commandTimes?: CommandTimes,
  ) {}

  get(member: Member): Promise<SshConnection> {
    const via = member.reach === 'hypervisor' ? { via: () => this.#forward(member) } : {};
    return this.#pool.get(member.name, () =>
      SshConnection.open({
        label: `member ${member.name}`,
        host: member.etcdIp,
        port: 22,
        user: member.admin.user,
        privateKey: this.identity.privateKey,
        knownHostsPath: this.identity.knownHostsPath,
        trustOnFirstUse: false,
        connectTimeoutMs: 30_000,
        ...(this.commandTimes ? { commandTimes: this.commandTimes, connectTimes: this.commandTimes } : {}),
        ...via,
      }),
    );
  }

  /**
   * The member's SSH, tried again every 2 s while it boots, for at most `windowMs`; a window of 0 (a
   * dry-run's patience) asks once. A hypervisor that cannot be reached ends the wait at once: that is
   * no booting member.
   */
  reach(member: Member, { windowMs }: { windowMs: number }): Promise<SshConnection> {
    const booting = (error: unknown) => windowMs > 0 && !(error instanceof HypervisorUnreachable);
    return retryWhile(() => this.get(member), booting, { windowMs, pauseMs: BOOTING_RETRY_MS });
  }

  async #forward(member: Member): Promise<Duplex> {
    const hypervisor = await this.hypervisors.get(member.hypervisor).catch((error: Error) => {
      throw new HypervisorUnreachable(error.message);
    });
    return hypervisor.forward(member.etcdIp, 22);
  }

  /** A member that was restarted: its old connection, if any, is dead or about to be. */
  forget(member: Member): void {
    this.#pool.forget(member.name);
  }

  closeAll(): Promise<void> {
    return this.#pool.closeAll();
  }
}
