import type { Hypervisor } from '../inventory/model.ts';
import { SshConnection } from './ssh.ts';

/**
 * One SSH connection per hypervisor for the whole run: opened on first use by any step, shared by
 * all of them (concurrent callers wait for the same connection), closed once at the end.
 */
export class HypervisorConnections {
  readonly #opening = new Map<string, Promise<SshConnection>>();

  get(hypervisor: Hypervisor): Promise<SshConnection> {
    let connection = this.#opening.get(hypervisor.name);
    if (!connection) {
      connection = SshConnection.open({
        label: `hypervisor ${hypervisor.name}`,
        host: hypervisor.address,
        port: hypervisor.port,
        user: hypervisor.user,
        ...(hypervisor.private_key ? { privateKeyPath: hypervisor.private_key } : {}),
        knownHostsPath: hypervisor.known_hosts,
        trustOnFirstUse: hypervisor.trust_on_first_use,
      });
      this.#opening.set(hypervisor.name, connection);
    }
    return connection;
  }

  async closeAll(): Promise<void> {
    const opened = await Promise.allSettled(this.#opening.values());
    for (const result of opened) if (result.status === 'fulfilled') result.value.close();
    this.#opening.clear();
  }
}
