import { Secret } from '../core/secret.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import { clusterTrustFrom } from '../pki/materials.ts';
import type { PkiStore } from '../pki/store.ts';
import type { ClientIdentity } from './client.ts';

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
  const caCert = () => clusterTrustFrom(inventory, store) ?? '';
  const rootCertificate = (): ClientIdentity => {
    const pair = inventory.pki.rootClient ?? {
      certificate: store.read('client/root').public ?? '',
      key: new Secret(store.read('client/root').privateKey ?? ''),
    };
    return { label: 'root certificate', caCert: caCert(), cert: pair.certificate, key: pair.key };
  };
  const memberCertificate = (m: Member): ClientIdentity =>
    m.suppliedTls
      ? { label: `${m.name} certificate`, caCert: m.suppliedTls.caCert, cert: m.suppliedTls.serverCert, key: m.suppliedTls.serverKey }
      : {
          label: `${m.name} certificate`,
          caCert: caCert(),
          cert: store.read(`member/${m.name}`).public ?? '',
          key: new Secret(store.read(`member/${m.name}`).privateKey ?? ''),
        };
  if (inventory.etcd.clientCertAuth)
    return { health: rootCertificate, beforeAuth: rootCertificate, root: rootCertificate, nonUser: memberCertificate };
  const anonymous = (): ClientIdentity => ({ label: 'anonymous', caCert: caCert() });
  const rootPassword = inventory.members.find((m) => m.bootstrapsAuth)?.rootPassword ?? new Secret('');
  return {
    health: anonymous,
    beforeAuth: anonymous,
    root: () => ({ label: 'root password', caCert: caCert(), user: { name: 'root', password: rootPassword } }),
    nonUser: anonymous,
  };
}
