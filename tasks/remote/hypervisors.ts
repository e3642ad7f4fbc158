import type { Hypervisor, SshHost } from '../inventory/model.ts';
import { ConnectionPool, PoolClosed } from './pool.ts';
import { SshConnection, whereOf, type SshTarget } from './ssh.ts';
import type { CommandTimes } from './command-times.ts';

/**
 * One SSH connection per hypervisor for the whole run: opened on first use by any step, shared by
 * all of them (concurrent callers wait for the same connection), closed once at the end. A hypervisor
 * behind bastions is reached as `ssh -J` does: a connection to the first bastion, each next hop's SSH
 * spoken over a channel the previous one forwards, every hop's host key checked against its own
 * known_hosts. A bastion shared by several hypervisors is one connection.
 */

/** One connection of a chain: its pool key (the names of the hops up to it) and where it goes. */
export interface Hop {
  key: string;
  target: Omit<SshTarget, 'via'>;
}

const targetOf = (kind: 'bastion' | 'hypervisor', host: SshHost): Hop['target'] => ({
  label: `${kind} ${host.name}`,
  host: host.address,
  port: host.port,
  user: host.user,
  ...(host.privateKey ? { privateKeyPath: host.privateKey } : {}),
  knownHostsPath: host.knownHosts,
  trustOnFirstUse: host.trustOnFirstUse,
});

/** Pure: the connections to open, in order, to reach a hypervisor; the last is the hypervisor's own. */
export function hopsTo(hypervisor: Hypervisor): Hop[] {
  const path: string[] = [];
  return [
    ...hypervisor.jump.map((bastion) => ({ kind: 'bastion' as const, host: bastion })),
    { kind: 'hypervisor' as const, host: hypervisor },
  ].map(({ kind, host }) => {
    path.push(host.name);
    return { key: path.join(' > '), target: targetOf(kind, host) };
  });
}

/**
 * Why a hypervisor could not be reached: the whole message, and without its own name and address when it is the hypervisor's own failure.
 */
export interface Unreachable {
  at: string;
  reason: string;
  detail?: string;
}

export class HypervisorConnections {
  // A failed hypervisor stays failed for the run: its members are skipped by the later steps anyway.
  readonly #pool = new ConnectionPool({ forgetFailures: false });
  /** Hypervisors this run could not reach, with why: for the recap. */
  readonly unreachable = new Map<string, Unreachable>();

  /** `connectTimes`: where each connection's handshake time is recorded (--profile); virsh's commands are not. */
  constructor(readonly connectTimes?: CommandTimes) {}

  get(hypervisor: Hypervisor): Promise<SshConnection> {
    const hops = hopsTo(hypervisor);
    return this.#open(hops, hops.length - 1).catch((error: Error) => {
      // Not a failure of the hypervisor: the run has ended.
      if (error instanceof PoolClosed) throw error;
      // The hypervisor's own failure says where it is once; a bastion's names the bastion.
      const own = `${whereOf(hops.at(-1)!.target)}: `;
      const { user, address, port } = hypervisor;
      this.unreachable.set(hypervisor.name, {
        at: `${user}@${address}:${port}`,
        reason: error.message,
        ...(error.message.startsWith(own) ? { detail: error.message.slice(own.length) } : {}),
      });
      throw error;
    });
  }

  #open(hops: readonly Hop[], index: number): Promise<SshConnection> {
    const hop = hops[index]!;
    const via = index > 0 ? { via: async () => (await this.#open(hops, index - 1)).forward(hop.target.host, hop.target.port) } : {};
    const times = this.connectTimes ? { connectTimes: this.connectTimes } : {};
    return this.#pool.get(hop.key, () => SshConnection.open({ ...hop.target, ...via, ...times }));
  }

  closeAll(): Promise<void> {
    return this.#pool.closeAll();
  }
}
