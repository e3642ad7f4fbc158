import type { Duplex } from 'node:stream';
import type { Member } from '../inventory/model.ts';
import type { HypervisorConnections } from './hypervisors.ts';
import { SshConnection } from './ssh.ts';

/**
 * SSH into members themselves, as the admin user with the tool's own key, checking each member's
 * host key against the one the PKI step generated and pinned. Like etcd, a member is reached
 * through its hypervisor (a direct-tcpip channel on the connection the run already holds) or
 * directly when reach_via is direct (macvtap: the hypervisor cannot talk to its own guests).
 */
export class MemberConnections {
  readonly #opening = new Map<string, Promise<SshConnection>>();

  constructor(
    readonly hypervisors: HypervisorConnections,
    readonly identity: { privateKeyPath: string; knownHostsPath: string },
  ) {}

  get(member: Member): Promise<SshConnection> {
    let connection = this.#opening.get(member.name);
    if (!connection) {
      const via = member.reach === 'hypervisor' ? { via: () => this.#forward(member) } : {};
      connection = SshConnection.open({
        label: `member ${member.name}`,
        host: member.etcdIp,
        port: 22,
        user: member.admin.user,
        privateKeyPath: this.identity.privateKeyPath,
        knownHostsPath: this.identity.knownHostsPath,
        trustOnFirstUse: false,
        connectTimeoutMs: 30_000,
        ...via,
      });
      this.#opening.set(member.name, connection);
      connection.catch(() => this.#opening.delete(member.name));
    }
    return connection;
  }

  async #forward(member: Member): Promise<Duplex> {
    const hypervisor = await this.hypervisors.get(member.hypervisor);
    return new Promise((resolve, reject) => {
      hypervisor.client.forwardOut('127.0.0.1', 0, member.etcdIp, 22, (error, channel) => (error ? reject(new Error(`hypervisor ${member.hypervisor.name} cannot reach ${member.etcdIp}:22: ${error.message}`)) : resolve(channel)));
    });
  }

  async closeAll(): Promise<void> {
    const opened = await Promise.allSettled(this.#opening.values());
    for (const result of opened) if (result.status === 'fulfilled') result.value.close();
    this.#opening.clear();
  }
}
