import { Secret } from '../core/secret.ts';
import type { Inventory } from '../inventory/model.ts';
import { caOf, type PkiFacts } from './plan.ts';
import type { PkiStore } from './store.ts';

/** One member's TLS files as they go into its cloud-init; absent while not yet issued (dry-run). */
export interface MemberTls {
  caCert?: string;
  cert?: string;
  key?: Secret;
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
  return { ca: store.read('ca'), leaves, adminSsh: store.read('ssh/admin') };
}

export function materialsFrom(inventory: Inventory, facts: PkiFacts): PkiMaterials {
  const caCert = caOf(inventory, facts).public;
  const members = new Map<string, MemberTls>();
  for (const member of inventory.members) {
    if (member.suppliedTls) {
      members.set(member.name, { caCert: member.suppliedTls.caCert, cert: member.suppliedTls.serverCert, key: member.suppliedTls.serverKey });
      continue;
    }
    const stored = facts.leaves.get(`member/${member.name}`) ?? {};
    members.set(member.name, {
      ...(caCert ? { caCert } : {}),
      ...(stored.public ? { cert: stored.public } : {}),
      ...(stored.privateKey ? { key: new Secret(stored.privateKey) } : {}),
    });
  }
  return { ...(caCert ? { caCert } : {}), members, ...(facts.adminSsh.public ? { adminSshPublicKey: facts.adminSsh.public.trim() } : {}) };
}
