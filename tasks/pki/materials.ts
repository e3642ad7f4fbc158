import { readIfExists } from '../core/files.ts';
import { Secret } from '../core/secret.ts';
import type { ClientIdentity } from '../etcd/client.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import { caOf, type PkiFacts } from './plan.ts';
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
}

export function readFacts(inventory: Inventory, store: PkiStore): PkiFacts {
  const leaves: PkiFacts['leaves'] = new Map();
  for (const member of inventory.members) leaves.set(`member/${member.name}`, store.read(`member/${member.name}`));
  leaves.set('client/root', store.read('client/root'));
  const hostKeys = new Map(inventory.members.map((member) => [member.name, store.read(`ssh-host/${member.name}`)]));
  const knownHosts = readIfExists(store.knownHostsPath);
  return { ca: store.read('ca'), leaves, adminSsh: store.read('ssh/admin'), hostKeys, ...(knownHosts !== undefined ? { knownHosts } : {}) };
}

export function materialsFrom(inventory: Inventory, facts: PkiFacts): PkiMaterials {
  const caCert = caOf(inventory, facts).public;
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
  return { ...(caCert ? { caCert } : {}), members, ...(facts.adminSsh.public ? { adminSshPublicKey: facts.adminSsh.public.trim() } : {}) };
}

/**
 * Who the tool is towards etcd. Certificate mode: the root client certificate (CN=root) for
 * everything, a member's own certificate (CN is no user) to probe whether auth is on. Password
 * mode: no client certificate at all (etcd does not ask for one); root with the bootstrap password
 * once auth is on, anonymous before and for health (status and member list need no user).
 */
export interface ClientIdentities {
  /** For health checks: works before and after auth is enabled. */
  health: () => ClientIdentity;
  /** For the auth bootstrap's own calls while auth is still off. */
  beforeAuth: () => ClientIdentity;
  /** root, once auth is on. */
  root: () => ClientIdentity;
  /** Not an etcd user: a read succeeds only while auth is off. */
  nonUser: (member: Member) => ClientIdentity;
}

export function clientIdentities(inventory: Inventory, store: PkiStore): ClientIdentities {
  const caCert = () => inventory.pki.ca?.certificate ?? store.read('ca').public ?? '';
  const rootCertificate = (): ClientIdentity => {
    const pair = inventory.pki.rootClient ?? { certificate: store.read('client/root').public ?? '', key: new Secret(store.read('client/root').privateKey ?? '') };
    return { label: 'root certificate', caCert: caCert(), cert: pair.certificate, key: pair.key };
  };
  const memberCertificate = (m: Member): ClientIdentity =>
    m.suppliedTls
      ? { label: `${m.name} certificate`, caCert: m.suppliedTls.caCert, cert: m.suppliedTls.serverCert, key: m.suppliedTls.serverKey }
      : { label: `${m.name} certificate`, caCert: caCert(), cert: store.read(`member/${m.name}`).public ?? '', key: new Secret(store.read(`member/${m.name}`).privateKey ?? '') };
  if (inventory.etcd.client_cert_auth) return { health: rootCertificate, beforeAuth: rootCertificate, root: rootCertificate, nonUser: memberCertificate };
  const anonymous = (): ClientIdentity => ({ label: 'anonymous', caCert: caCert() });
  const rootPassword = inventory.members.find((m) => m.bootstrapsAuth)?.rootPassword ?? new Secret('');
  return { health: anonymous, beforeAuth: anonymous, root: () => ({ label: 'root password', caCert: caCert(), user: { name: 'root', password: rootPassword } }), nonUser: anonymous };
}
