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

/** The users the tool adds for itself: the agent's, while scheduled backups are on. */
export const toolUsers = (inventory: Inventory): Record<string, UserSettings> =>
  inventory.backup.enabled && inventory.etcd.client_cert_auth ? { [AGENT_USER]: { roles: ['root'], password: new Secret('') } } : {};

/** Every etcd user with a client certificate the tool issues, but root: the inventory's and the tool's own. */
export const certifiedUsers = (inventory: Inventory): string[] =>
  [...Object.keys(inventory.users), ...Object.keys(toolUsers(inventory))].sort();
