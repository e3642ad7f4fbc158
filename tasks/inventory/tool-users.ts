import { Secret } from '../core/secret.ts';
import type { Inventory, UserSettings } from './model.ts';

/**
 * The etcd user of the members' backup agent (etcd-kvm-agent in the guest). etcd lets only its root
 * role take a snapshot, so the agent holds that role, under a name of its own: its certificate
 * (CN=etcd-kvm-agent, one for the cluster, on every member) is not the operator's root certificate,
 * shows as itself in etcd's logs, and goes (user and certificate) when backups are turned off.
 * The name is under the tool's reserved prefix: no inventory user can take it.
 */
export const AGENT_USER = 'etcd-kvm-agent';

/**
 * Whether the members run the agent with an etcd identity: while scheduled backups or scheduled
 * defragmentation are on (certificate mode only: in password mode the agent has no identity yet).
 */
export const agentInEtcd = (inventory: Pick<Inventory, 'backup' | 'maintenance' | 'etcd'>): boolean =>
  inventory.etcd.clientCertAuth && (inventory.backup.enabled || inventory.maintenance.defrag.enabled);

/** The users the tool adds for itself: the agent's, while it runs (agentInEtcd). */
export const toolUsers = (inventory: Inventory): Record<string, UserSettings> =>
  agentInEtcd(inventory) ? { [AGENT_USER]: { roles: ['root'], password: new Secret('') } } : {};

/** Every etcd user with a client certificate the tool issues, but root: the inventory's and the tool's own. */
export const certifiedUsers = (inventory: Inventory): string[] =>
  [...Object.keys(inventory.users), ...Object.keys(toolUsers(inventory))].sort();
