import type { Hypervisor } from '../inventory/model.ts';
import { ConnectionPool } from './pool.ts';
import { SshConnection } from './ssh.ts';

/**
 * One SSH connection per hypervisor for the whole run: opened on first use by any step, shared by
 * all of them (concurrent callers wait for the same connection), closed once at the end.
 */
export class HypervisorConnections {
  // A failed hypervisor stays failed for the run: its members are skipped by the later steps anyway.
  readonly #pool = new ConnectionPool({ forgetFailures: false });

  get(hypervisor: Hypervisor): Promise<SshConnection> {
    return this.#pool.get(hypervisor.name, () =>
      SshConnection.open({
        label: `hypervisor ${hypervisor.name}`,
        host: hypervisor.address,
        port: hypervisor.port,
        user: hypervisor.user,
        ...(hypervisor.private_key ? { privateKeyPath: hypervisor.private_key } : {}),
        knownHostsPath: hypervisor.known_hosts,
        trustOnFirstUse: hypervisor.trust_on_first_use,
      }),
    );
  }

  closeAll(): Promise<void> {
    return this.#pool.closeAll();
  }
}
