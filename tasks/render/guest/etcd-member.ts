import type { SecretWriter } from '../../core/secret.ts';
import type { Inventory, Member } from '../../inventory/model.ts';
import type { MemberTls } from '../../pki/materials.ts';
import { etcdEnvironment, GUEST_PATHS, initialClusterStateOf, renderEnvironmentFile, renderUnitFile, type FirstStart } from '../etcd.ts';
import type { CloudConfigFragment } from './fragment.ts';

/** Shown in place of material the PKI step has not created yet (dry-run before the first apply). */
function pending(what: string): string {
  return `(${what}: issued when the pki step applies)\n`;
}

/**
 * What only takes effect when a member first starts: etcd ignores these once its data directory
 * exists, so a change to them alone restarts nothing.
 */
export const FIRST_START_VARIABLES = [
  'ETCD_INITIAL_CLUSTER',
  'ETCD_INITIAL_CLUSTER_STATE',
  'ETCD_INITIAL_CLUSTER_TOKEN',
  'ETCD_INITIAL_ADVERTISE_PEER_URLS',
] as const;

export const ETCD_UNIT = 'etcd.service';

/**
 * etcd itself: TLS files, the ETCD_* environment, the unit, the data directory, then start. etcd
 * reads its server and peer certificate and key again for every new TLS connection (since 3.2), so
 * replacing them needs no restart; a CA bundle is read only at start (etcd-io/etcd#11555).
 */
export function etcdFragment(
  inventory: Inventory,
  member: Member,
  tls: MemberTls,
  firstStart: FirstStart,
  writeSecret: SecretWriter,
): CloudConfigFragment {
  return {
    writeFiles: [
      { path: GUEST_PATHS.caCert, permissions: '0644', content: tls.caCert ?? pending('CA certificate'), notify: ETCD_UNIT },
      { path: GUEST_PATHS.serverCert, permissions: '0644', content: tls.cert ?? pending(`certificate of ${member.name}`) },
      // Deferred to the final stage, when the etcd user (from the package or `users`) surely exists.
      {
        path: GUEST_PATHS.serverKey,
        permissions: '0400',
        owner: 'etcd:etcd',
        defer: true,
        content: tls.key ? writeSecret(tls.key) : pending(`private key of ${member.name}`),
      },
      // The peer port's: a new trust bundle restarts etcd (read at start only); a new certificate needs no restart.
      {
        path: GUEST_PATHS.peerTrustedCa,
        permissions: '0644',
        content: tls.peer?.trustedCa ?? pending('peer CA certificates'),
        notify: ETCD_UNIT,
      },
      { path: GUEST_PATHS.peerCert, permissions: '0644', content: tls.peer?.cert ?? pending(`peer certificate of ${member.name}`) },
      {
        path: GUEST_PATHS.peerKey,
        permissions: '0400',
        owner: 'etcd:etcd',
        defer: true,
        content: tls.peer?.key ? writeSecret(tls.peer.key) : pending(`peer key of ${member.name}`),
      },
      {
        path: GUEST_PATHS.environmentFile,
        permissions: '0644',
        content: renderEnvironmentFile(etcdEnvironment(inventory, member, initialClusterStateOf(firstStart), tls.peer?.allowedCn)),
      },
      { path: GUEST_PATHS.unitFile, permissions: '0644', content: renderUnitFile(inventory, member), notify: ETCD_UNIT },
    ],
    runcmd: [
      // On the data disk when there is one (mounted by then): install -d also fixes owner and mode.
      ['install', '-d', '-o', 'etcd', '-g', 'etcd', '-m', '0700', inventory.etcd.dataDir],
    ],
    // A recovery that did not finish (recover killed after the forced start, then a plain deploy): gone, systemd
    // reloaded, before any restart here, which would otherwise found a new cluster again and drop the members since.
    retired: {
      units: [],
      paths: [GUEST_PATHS.forceNewClusterDropIn],
      why: {
        [GUEST_PATHS.forceNewClusterDropIn]:
          "a recovery's --force-new-cluster, left by a recover that did not finish: " +
          'the next start of etcd would found a new cluster of this member alone',
      },
    },
    // With restore enabled the unit's condition keeps etcd stopped until the restore step filled the data directory.
    services: [
      {
        unit: ETCD_UNIT,
        onChange: 'restart',
        rolling: true,
        environment: { path: GUEST_PATHS.environmentFile, ignore: FIRST_START_VARIABLES },
        // A joiner booted ahead of its turn cannot wait for it at first boot: it is not a member yet, and etcd exits
        // (restarted every RestartSec) until the cluster adds it; its turn's guest step starts it once it has.
        ...(firstStart === 'booted-ahead' ? { firstBootNoWait: true as const } : {}),
      },
    ],
  };
}
