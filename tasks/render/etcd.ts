import { ETCD_DEFAULT_ELECTION_MS, ETCD_DEFAULT_HEARTBEAT_MS, type Inventory, type Member } from '../inventory/model.ts';
import { clientUrl, peerUrl } from '../inventory/urls.ts';
import { ANY_RELEASE_BINARY, knownEtcdVersion, managedRelease, RELEASE_BINARY_VARIABLE, versionSettings } from './etcd-release.ts';
import { corruptionCheckSettings } from './corruption-checks.ts';
import { etcdBinaryDir } from './guest/dependencies.ts';
import { renderTemplate } from './templates.ts';
import { compareVersions, type EtcdVersion } from '../upgrade/version.ts';

/** Where the member's etcd files live inside the guest. */
export const GUEST_PATHS = {
  environmentFile: '/etc/etcd/etcd.env',
  unitFile: '/etc/systemd/system/etcd.service',
  tlsDir: '/etc/etcd/tls',
  caCert: '/etc/etcd/tls/ca.crt',
  serverCert: '/etc/etcd/tls/server.crt',
  serverKey: '/etc/etcd/tls/server.key',
  /** The peer port's own files (see pki/peer-trust.ts): what it trusts, what it presents. */
  peerTrustedCa: '/etc/etcd/tls/peer-ca.crt',
  peerCert: '/etc/etcd/tls/peer.crt',
  peerKey: '/etc/etcd/tls/peer.key',
  /**
   * A recovery's `--force-new-cluster` (recover/force-new-cluster.ts): under /run, which a reboot forgets. While it is
   * there every start of etcd founds a new cluster of this one member: only a recovery under way may leave it.
   */
  forceNewClusterDropIn: '/run/systemd/system/etcd.service.d/etcd-kvm-force-new-cluster.conf',
} as const;

export type InitialClusterState = 'new' | 'existing';

/**
 * How a member's etcd first starts: founding the cluster (`new`), on a cluster that has it or is adding it
 * (`existing`), or booted ahead of its turn to join (`booted-ahead`: started `existing`, it can run only once the
 * cluster has added it as a learner, which a run booting several joiners at once does for each only after the
 * one before it has been promoted).
 */
export type FirstStart = InitialClusterState | 'booted-ahead';

export const initialClusterStateOf = (start: FirstStart): InitialClusterState => (start === 'new' ? 'new' : 'existing');

/**
 * etcd's settings for one member as ETCD_* variables, in a fixed order.
 * `initialClusterState` is decided by the caller: 'new' only for a cluster that has not formed yet.
 */
export function etcdEnvironment(
  inventory: Inventory,
  member: Member,
  initialClusterState: InitialClusterState,
  peerAllowedCn?: string,
): [string, string][] {
  const { etcd } = inventory;
  const clientUrls = [clientUrl(inventory, member)];
  const loopback = `https://127.0.0.1:${etcd.clientPort}`;
  if (etcd.listenLocalhost && !clientUrls.includes(loopback)) clientUrls.push(loopback);
  const initialCluster = inventory.members.map((m) => `${m.name}=${peerUrl(inventory, m)}`).join(',');
  return [
    ['ETCD_NAME', member.name],
    ['ETCD_DATA_DIR', etcd.dataDir],
    ['ETCD_LISTEN_PEER_URLS', peerUrl(inventory, member)],
    ['ETCD_LISTEN_CLIENT_URLS', clientUrls.join(',')],
    ['ETCD_ADVERTISE_CLIENT_URLS', clientUrl(inventory, member)],
    ['ETCD_INITIAL_ADVERTISE_PEER_URLS', peerUrl(inventory, member)],
    ['ETCD_INITIAL_CLUSTER', initialCluster],
    ['ETCD_INITIAL_CLUSTER_STATE', initialClusterState],
    ['ETCD_INITIAL_CLUSTER_TOKEN', inventory.cluster.initialToken],
    ['ETCD_CERT_FILE', GUEST_PATHS.serverCert],
    ['ETCD_KEY_FILE', GUEST_PATHS.serverKey],
    // Password mode, as in the seed module: clients are not asked for a certificate at all.
    ...(etcd.clientCertAuth ? [['ETCD_TRUSTED_CA_FILE', GUEST_PATHS.caCert] as [string, string]] : []),
    ['ETCD_CLIENT_CERT_AUTH', String(etcd.clientCertAuth)],
    // Members only on the peer port: its own CA bundle and certificate, never the clients' CA alone (see pki/peer-trust.ts).
    ['ETCD_PEER_CERT_FILE', GUEST_PATHS.peerCert],
    ['ETCD_PEER_KEY_FILE', GUEST_PATHS.peerKey],
    ['ETCD_PEER_TRUSTED_CA_FILE', GUEST_PATHS.peerTrustedCa],
    ['ETCD_PEER_CLIENT_CERT_AUTH', 'true'],
    ...(peerAllowedCn ? [['ETCD_PEER_CERT_ALLOWED_CN', peerAllowedCn] as [string, string]] : []),
    ['ETCD_AUTO_COMPACTION_MODE', etcd.autoCompactionMode],
    ['ETCD_AUTO_COMPACTION_RETENTION', etcd.autoCompactionRetention],
    ['ETCD_QUOTA_BACKEND_BYTES', String(etcd.spaceQuota)],
    ...raftTiming(etcd),
    ...preVote(knownEtcdVersion(inventory, member)),
    // etcd 3.4 enables the gateway unless told otherwise.
    ['ETCD_ENABLE_GRPC_GATEWAY', String(etcd.grpcGatewayEnabled)],
    // /metrics and /health only, over plain HTTP: a scraper needs no identity that could reach keys (docs/monitoring.md).
    ...(inventory.monitoring.metricsPort === 0
      ? []
      : [['ETCD_LISTEN_METRICS_URLS', `http://${member.etcdIp}:${inventory.monitoring.metricsPort}`] as [string, string]]),
    ...corruptionCheckSettings(etcd.corruptionChecks, knownEtcdVersion(inventory, member)),
    ...versionSettingsOf(inventory),
    ...(etcd.snapshotCount === undefined ? [] : [['ETCD_SNAPSHOT_COUNT', String(etcd.snapshotCount)] as [string, string]]),
  ];
}

/**
 * The heartbeat and election timeout, each only where it differs from etcd's default: a cluster deployed
 * before they were settings keeps its environment file, and is not rolled for a change that changes nothing.
 */
function raftTiming(etcd: Inventory['etcd']): [string, string][] {
  return [
    ...(etcd.heartbeatInterval === ETCD_DEFAULT_HEARTBEAT_MS ? [] : [['ETCD_HEARTBEAT_INTERVAL', String(etcd.heartbeatInterval)]]),
    ...(etcd.electionTimeout === ETCD_DEFAULT_ELECTION_MS ? [] : [['ETCD_ELECTION_TIMEOUT', String(etcd.electionTimeout)]]),
  ] as [string, string][];
}

const V3_5: EtcdVersion = { major: 3, minor: 5, patch: 0 };

/**
 * Raft's pre-vote, where the member's etcd does not turn it on by itself (3.4; 3.5 and later do, and the image's
 * etcd, whose version the tool does not know before it runs, gets it too: every etcd since 3.4 reads the flag).
 * Without it, a member restarted in a roll campaigns as soon as the leader's heartbeats are late (etcd advances a
 * restarted member's election ticks), and its higher term deposes a leader the rest still follow: on the lab
 * (3.4.23, CI of 2026-12-02 18:40), a follower restarted by the peer CA's roll started an election 2 s after it
 * came up, and the cluster had no leader for 7 s. With pre-vote it asks first, and members that hear their
 * leader refuse it.
 */
function preVote(version: EtcdVersion | undefined): [string, string][] {
  return version && compareVersions(version, V3_5) >= 0 ? [] : [['ETCD_PRE_VOTE', 'true']];
}

/** With binaries: release, the release's binary the unit runs, then the settings that differ by version. */
function versionSettingsOf(inventory: Inventory): [string, string][] {
  const release = managedRelease(inventory);
  if (!release) return [];
  // The inventory's snapshot_count, where it is set, replaces the pinned one (below).
  const pinned = versionSettings(release.version).filter(
    ([key]) => inventory.etcd.snapshotCount === undefined || key !== 'ETCD_SNAPSHOT_COUNT',
  );
  return [[RELEASE_BINARY_VARIABLE, release.binary], ...pinned];
}

/** systemd EnvironmentFile syntax: plain values as they are, anything else double-quoted with escapes. */
function environmentValue(value: string): string {
  return /^[A-Za-z0-9_.,:/=@+-]*$/.test(value) ? value : `"${value.replace(/[\\"$`]/g, (c) => `\\${c}`)}"`;
}

export function renderEnvironmentFile(variables: [string, string][]): string {
  return [
    '# Managed by etcd-kvm: etcd reads these ETCD_* variables (etcd --help lists each flag).',
    ...variables.map(([key, value]) => `${key}=${environmentValue(value)}`),
    '',
  ].join('\n');
}

/** Parses an EnvironmentFile as rendered above (used by tests and by drift checks). */
export function parseEnvironmentFile(text: string): Map<string, string> {
  const variables = new Map<string, string>();
  for (const line of text.split('\n')) {
    const match = /^([A-Z0-9_]+)=(.*)$/.exec(line);
    if (!match) continue;
    const raw = match[2]!;
    variables.set(match[1]!, raw.startsWith('"') ? raw.slice(1, -1).replace(/\\(.)/g, '$1') : raw);
  }
  return variables;
}

export function renderUnitFile(inventory: Inventory, member: Member): string {
  return renderTemplate('etcd.service.ejs', {
    name: member.name,
    cluster: inventory.cluster.name,
    environmentFile: GUEST_PATHS.environmentFile,
    // The image's etcd; a release's is named by the environment file.
    binary: `${etcdBinaryDir(member)}/etcd`,
    anyRelease: managedRelease(inventory) ? ANY_RELEASE_BINARY : undefined,
    binaryVariable: RELEASE_BINARY_VARIABLE,
    dataDir: inventory.etcd.dataDir,
    onDataDisk: member.volumes.data !== undefined,
    restoreFirst: inventory.restore.enabled,
  });
}
