import { resolve } from 'node:path';
import { InputError } from '../core/errors.ts';
import { Secret } from '../core/secret.ts';
import { quote } from '../core/shell.ts';
import type { Inventory } from '../inventory/model.ts';
import { clientUrl } from '../inventory/urls.ts';
import { clusterTrustFrom } from './materials.ts';
import { applicationUsers } from './plan.ts';
import type { PkiStore } from './store.ts';
import { certificatesIn, chainLeadsTo, keyMatchesCertificate } from './x509.ts';

/**
 * What a client machine needs to use the cluster as one user: the CA, the user's certificate and key
 * (certificate mode), and an etcdctl.env that etcdctl reads from the environment
 * (`set -a; . DIR/etcdctl.env; etcdctl get foo`). Password mode names the user only: etcdctl asks for
 * the password, which never lands in a file.
 */

export interface BundleFile {
  name: string;
  content: string | Secret;
  mode: number;
}

/** The users a bundle can be made for: the inventory's, and root (the tool's own identity). */
export const bundleUsers = (inventory: Inventory): string[] => ['root', ...applicationUsers(inventory)];

export function clientBundle(inventory: Inventory, store: PkiStore, user: string, outDir: string): BundleFile[] {
  if (!bundleUsers(inventory).includes(user)) {
    throw new InputError(`--user ${user}: the inventory has no such user; users are ${bundleUsers(inventory).join(', ')}`);
  }
  // While a rotation has members trust two CAs, so does the bundle: it keeps working when they present the new one.
  const caCert = clusterTrustFrom(inventory, store);
  if (!caCert) throw new InputError(`the state directory ${inventory.stateDir} has no CA yet: run the deploy first`);
  const dir = resolve(outDir);
  const env: [string, string][] = [
    ['ETCDCTL_API', '3'],
    ['ETCDCTL_ENDPOINTS', inventory.members.map((member) => clientUrl(inventory, member)).join(',')],
    ['ETCDCTL_CACERT', `${dir}/ca.crt`],
  ];
  const files: BundleFile[] = [{ name: 'ca.crt', content: caCert, mode: 0o644 }];
  if (inventory.etcd.clientCertAuth) {
    const pair =
      user === 'root' && inventory.pki.rootClient
        ? { public: inventory.pki.rootClient.certificate, privateKey: inventory.pki.rootClient.key.reveal() }
        : store.read(`client/${user}`);
    if (
      !pair.public ||
      !pair.privateKey ||
      !keyMatchesCertificate(pair.public, pair.privateKey) ||
      !certificatesIn(caCert).some((ca) => chainLeadsTo(pair.public!, ca))
    ) {
      throw new InputError(
        `the state directory has no valid certificate for user ${user} yet: run the deploy first (its pki step issues it)`,
      );
    }
    files.push(
      { name: `${user}.crt`, content: pair.public, mode: 0o644 },
      { name: `${user}.key`, content: new Secret(pair.privateKey), mode: 0o600 },
    );
    env.push(['ETCDCTL_CERT', `${dir}/${user}.crt`], ['ETCDCTL_KEY', `${dir}/${user}.key`]);
  } else {
    // etcdctl prompts for the password when ETCDCTL_USER carries no ":password".
    env.push(['ETCDCTL_USER', user]);
  }
  const lines = env.map(([name, value]) => `${name}=${quote(value)}\n`).join('');
  files.push({
    name: 'etcdctl.env',
    content: `# etcdctl as ${user} on cluster ${inventory.cluster.name}: set -a; . ${quote(`${dir}/etcdctl.env`)}; set +a\n${lines}`,
    mode: 0o644,
  });
  return files;
}
