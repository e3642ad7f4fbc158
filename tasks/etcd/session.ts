import { requireLoginKeys } from '../inventory/login-keys.ts';
import type { Inventory } from '../inventory/model.ts';
import { PkiStore } from '../pki/store.ts';
import { HypervisorConnections } from '../remote/hypervisors.ts';
import { MemberConnections } from '../remote/members.ts';
import { EtcdClients, type ClientIdentity } from './client.ts';
import { clientIdentities } from './identities.ts';

/** What a tool beside deploy needs to talk to a cluster as root: hypervisor connections and etcd clients. */
export interface ClusterSession {
  connections: HypervisorConnections;
  /** SSH into the members themselves (opened when first asked). */
  members: MemberConnections;
  clients: EtcdClients;
  root: ClientIdentity;
  store: PkiStore;
}

/** Opens on demand, closes everything when `use` is done, whatever it did. */
export async function withClusterSession<T>(inventory: Inventory, use: (session: ClusterSession) => Promise<T>): Promise<T> {
  requireLoginKeys(inventory);
  const store = await PkiStore.open(inventory.stateDir);
  const identities = clientIdentities(inventory, store);
  const connections = new HypervisorConnections();
  const clients = new EtcdClients(connections, inventory.etcd.clientPort, identities.root);
  const members = new MemberConnections(connections, store.adminSsh);
  try {
    return await use({ connections, members, clients, root: identities.root(), store });
  } finally {
    clients.close();
    await members.closeAll();
    await connections.closeAll();
  }
}
