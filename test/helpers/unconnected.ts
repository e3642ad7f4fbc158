import { FactCache } from '../../tasks/core/facts.ts';
import { EtcdClients, type ClientIdentity } from '../../tasks/etcd/client.ts';
import type { ClientIdentities } from '../../tasks/etcd/identities.ts';
import type { Inventory } from '../../tasks/inventory/model.ts';
import { RemoteContext } from '../../tasks/libvirt/context.ts';
import { MemberConnections } from '../../tasks/remote/members.ts';
import { SshConnection } from '../../tasks/remote/ssh.ts';

/**
 * The connections a step is built with, real and unconnected: for tests of what a step plans, which
 * asks no host. Anything that does connect fails at once, saying the test asked for it.
 */
export function unconnected(inventory: Inventory): {
  remote: RemoteContext;
  clients: EtcdClients;
  memberSsh: MemberConnections;
  identities: ClientIdentities;
} {
  const remote = new RemoteContext(new FactCache());
  const refuse = (what: string) => (): never => {
    throw new Error(`${what}: this test's connections are not for use`);
  };
  const identity: () => ClientIdentity = refuse('an etcd client identity');
  const identities: ClientIdentities = { health: identity, beforeAuth: identity, root: identity, nonUser: identity };
  return {
    remote,
    clients: new EtcdClients(remote.connections, inventory.etcd.clientPort, identity),
    memberSsh: new MemberConnections(remote.connections, {
      privateKey: refuse('the admin key'),
      knownHostsPath: '/nonexistent/known_hosts',
    }),
    identities,
  };
}

/**
 * An SshConnection no test connects or forwards through, for code that only passes one on: an instance of the
 * class with no client behind it, so any use of it fails at once.
 */
export const unusedSshConnection = (): SshConnection => Object.create(SshConnection.prototype);
