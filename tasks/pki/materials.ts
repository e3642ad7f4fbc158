import { readIfExists } from '../core/files.ts';
import { Secret } from '../core/secret.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import { readIdentity, type ClusterIdentity } from './identity.ts';
import { applicationUsers, caOf, identityOf, type PkiFacts } from './plan.ts';
import type { PkiStore } from './store.ts';

/** One member's TLS files as they go into its cloud-init; absent while not yet issued (dry-run). */
export interface MemberTls {
  caCert?: string;
  cert?: string;
  key?: Secret;
  /** The member's SSH host key (ECDSA), absent while not yet generated. */
  sshHostKey?: { privateKey: Secret; publicLine: string };
}

/** What rendering needs from the PKI: certificates are public, keys stay Secrets. */
export interface PkiMaterials {
  caCert?: string;
  members: Map<string, MemberTls>;
  adminSshPublicKey?: string;
  /** Marks the domains as this cluster's (no ID yet in a dry-run of a new cluster). */
  identity: ClusterIdentity;
}

export function readFacts(inventory: Inventory, store: PkiStore): PkiFacts {
  const leaves: PkiFacts['leaves'] = new Map();
  for (const member of inventory.members) leaves.set(`member/${member.name}`, store.read(`member/${member.name}`));
  leaves.set('client/root', store.read('client/root'));
  for (const user of applicationUsers(inventory)) leaves.set(`client/${user}`, store.read(`client/${user}`));
  const hostKeys = new Map(inventory.members.map((member) => [member.name, store.read(`ssh-host/${member.name}`)]));
  const knownHosts = readIfExists(store.knownHostsPath);
  const identity = readIdentity(store.stateDir, inventory.cluster.name);
  return { ca: store.read('ca'), intermediate: store.read('intermediate'), leaves, clientNames: store.clientNames(), plainKeys: store.cipher ? store.plainKeyFiles() : [], adminSsh: store.read('ssh/admin'), hostKeys, ...(knownHosts !== undefined ? { knownHosts } : {}), ...(identity ? { identity } : {}) };
}

export function materialsFrom(inventory: Inventory, facts: PkiFacts): PkiMaterials {
  const caCert = caOf(inventory, facts.ca).public;
  const members = new Map<string, MemberTls>();
  for (const member of inventory.members) {
    const host = facts.hostKeys.get(member.name);
    const sshHostKey = host?.public && host.privateKey ? { sshHostKey: { privateKey: new Secret(host.privateKey), publicLine: host.public.trim() } } : {};
    if (member.suppliedTls) {
      members.set(member.name, { caCert: member.suppliedTls.caCert, cert: member.suppliedTls.serverCert, key: member.suppliedTls.serverKey, ...sshHostKey });
      continue;
    }
    const stored = facts.leaves.get(`member/${member.name}`) ?? {};
    members.set(member.name, {
      ...sshHostKey,
      ...(caCert ? { caCert } : {}),
      ...(stored.public ? { cert: stored.public } : {}),
      ...(stored.privateKey ? { key: new Secret(stored.privateKey) } : {}),
    });
  }
  return { ...(caCert ? { caCert } : {}), members, identity: identityOf(inventory, facts), ...(facts.adminSsh.public ? { adminSshPublicKey: facts.adminSsh.public.trim() } : {}) };
}
