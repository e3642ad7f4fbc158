import { join } from 'node:path';

/**
 * The lab's names as the tests and the benches see it from outside the tool: its namespace, the default inventory and
 * its state directory, the members' addresses, root's client identity. Free of ava, so scripts (the benches) import
 * it too; test/helpers/lab.ts re-exports it.
 */

export const NAMESPACE = 'etcd-kvm-lab';
export const LAB_INVENTORY = 'inventories/lab.yaml';
export const LAB_STATE = 'inventories/.etcd-kvm/lab';
export const MEMBER_IPS = { 'etcd-1': '192.168.150.11', 'etcd-2': '192.168.150.12', 'etcd-3': '192.168.150.13' } as const;
export type LabMember = keyof typeof MEMBER_IPS;

export interface Identity {
  caCert: string;
  cert?: string;
  key?: string;
}

export const rootIdentity: Identity = {
  caCert: join(LAB_STATE, 'pki/ca.crt'),
  cert: join(LAB_STATE, 'pki/clients/root.crt'),
  key: join(LAB_STATE, 'pki/clients/root.key'),
};

/** An identity as etcdctl's and curl's TLS flags (both name them alike). */
export const tlsArgs = (identity: Identity): string[] => [
  '--cacert',
  identity.caCert,
  ...(identity.cert ? ['--cert', identity.cert] : []),
  ...(identity.key ? ['--key', identity.key] : []),
];

export const endpoint = (member: LabMember) => `https://${MEMBER_IPS[member]}:2379`;
