import { readIfExists } from '../core/files.ts';
import { Secret } from '../core/secret.ts';
import type { Inventory } from '../inventory/model.ts';
import { readIdentity, type ClusterIdentity } from './identity.ts';
import type { MaterialId } from './store.ts';
import { AGENT_USER, certifiedUsers, toolUsers } from '../inventory/tool-users.ts';
import { applicationUsers, clusterTrust, identityOf, peerStageOfFacts, type PkiFacts, trustedBundle } from './plan.ts';
import { readCaRotation } from './ca-rotation.ts';
import { PEER_COMMON_NAME, readPeerTrust, type PeerTrustStage } from './peer-trust.ts';
import type { PkiStore } from './store.ts';

/** One member's TLS files as they go into its cloud-init; absent while not yet issued (dry-run). */
export interface MemberTls {
  caCert?: string;
  cert?: string;
  key?: Secret;
  /** The peer port's files: the CAs it trusts, the certificate and key it presents (see peer-trust.ts). */
  peer?: { trustedCa?: string; cert?: string; key?: Secret; allowedCn?: string };
  /** The member's SSH host key (ECDSA), absent while not yet generated. */
  sshHostKey?: { privateKey: Secret; publicLine: string };
  /** The backup agent's client certificate and key (CN=etcd-kvm-agent), while scheduled backups are on. */
  agent?: { cert?: string; key?: Secret };
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
  for (const member of inventory.members) {
    leaves.set(`member/${member.name}`, store.read(`member/${member.name}`));
    leaves.set(`peer/${member.name}`, store.read(`peer/${member.name}`));
  }
  leaves.set('client/root', store.read('client/root'));
  for (const user of certifiedUsers(inventory)) leaves.set(`client/${user}`, store.read(`client/${user}`));
  const hostKeys = new Map(inventory.members.map((member) => [member.name, store.read(`ssh-host/${member.name}`)]));
  const knownHosts = readIfExists(store.knownHostsPath);
  const identity = readIdentity(store.stateDir, inventory.cluster.name);
  const peerTrust = readPeerTrust(store.stateDir);
  const caRotation = readCaRotation(store.stateDir);
  return {
    caNext: store.read('ca-next'),
    peerCaNext: store.read('peer-ca-next'),
    intermediateNext: store.read('intermediate-next'),
    ...(caRotation ? { caRotation } : {}),
    ca: store.read('ca'),
    intermediate: store.read('intermediate'),
    peerCa: store.read('peer-ca'),
    ...(peerTrust ? { peerTrust } : {}),
    leaves,
    clientNames: store.clientNames(),
    plainKeys: store.cipher ? store.plainKeyFiles() : [],
    adminSsh: store.read('ssh/admin'),
    hostKeys,
    ...(knownHosts !== undefined ? { knownHosts } : {}),
    ...(identity ? { identity } : {}),
  };
}

export function materialsFrom(inventory: Inventory, facts: PkiFacts): PkiMaterials {
  const caCert = clusterTrust(inventory, facts);
  const peerStage = peerStageOfFacts(inventory, facts);
  const bundle = peerBundle(inventory, facts, caCert, peerStage);
  // What every member's peer port trusts; and the only common name a peer certificate may carry, once
  // members trust the peer CA alone and none presents a certificate of the operator's.
  const peerTrust = {
    ...(bundle ? { trustedCa: bundle } : {}),
    ...(peerStage === 'peer-only' && !inventory.members.some((member) => member.suppliedTls) ? { allowedCn: PEER_COMMON_NAME } : {}),
  };
  const agent = toolUsers(inventory)[AGENT_USER] ? { agent: pairOf(facts.leaves.get(`client/${AGENT_USER}`)) } : {};
  const members = new Map<string, MemberTls>();
  for (const member of inventory.members) {
    const host = facts.hostKeys.get(member.name);
    const sshHostKey =
      host?.public && host.privateKey ? { sshHostKey: { privateKey: new Secret(host.privateKey), publicLine: host.public.trim() } } : {};
    if (member.suppliedTls) {
      const supplied = { cert: member.suppliedTls.serverCert, key: member.suppliedTls.serverKey };
      members.set(member.name, {
        caCert: member.suppliedTls.caCert,
        ...supplied,
        peer: { ...peerTrust, ...supplied },
        ...sshHostKey,
        ...agent,
      });
      continue;
    }
    const server = pairOf(facts.leaves.get(`member/${member.name}`));
    members.set(member.name, {
      ...sshHostKey,
      ...agent,
      ...(caCert ? { caCert } : {}),
      ...server,
      // Until every member trusts the peer CA, the peer port presents the server certificate, which all of them trust.
      peer: { ...peerTrust, ...(peerStage === 'trust-both' ? server : pairOf(facts.leaves.get(`peer/${member.name}`))) },
    });
  }
  return {
    ...(caCert ? { caCert } : {}),
    members,
    identity: identityOf(inventory, facts),
    ...(facts.adminSsh.public ? { adminSshPublicKey: facts.adminSsh.public.trim() } : {}),
  };
}

const pairOf = (stored: { public?: string; privateKey?: string } | undefined): { cert?: string; key?: Secret } => ({
  ...(stored?.public ? { cert: stored.public } : {}),
  ...(stored?.privateKey ? { key: new Secret(stored.privateKey) } : {}),
});

/**
 * What every member's peer port trusts: the peer CA; while members move to it, the cluster CA too; and
 * the CAs of members whose certificates the operator supplies (they present those on the peer port).
 * Undefined while the peer CA is not made yet (a dry-run of a new cluster). While the peer CA is rotated, both.
 */
function peerBundle(inventory: Inventory, facts: PkiFacts, caCert: string | undefined, stage: PeerTrustStage): string | undefined {
  const peerCas = trustedBundle(facts, 'peer');
  if (!peerCas) return undefined;
  const operators = inventory.members.flatMap((member) => (member.suppliedTls ? [member.suppliedTls.caCert] : []));
  const moving = stage === 'peer-only' || !caCert ? [] : [caCert];
  return [...new Set([peerCas, ...moving, ...operators].map((pem) => (pem.endsWith('\n') ? pem : `${pem}\n`)))].join('');
}

/**
 * The cluster's identity (cluster-id.json), without opening any private key: the owner checks ask for it
 * at every guest agent ask and boot poll, and in an encrypted state directory readFacts decrypts every key.
 * Before the ID exists, a state directory holding certificates deployed its cluster before domains were marked.
 */
export function identityFrom(inventory: Inventory, store: PkiStore): ClusterIdentity {
  const identity = readIdentity(store.stateDir, inventory.cluster.name);
  if (identity) return identity;
  const certificates: MaterialId[] = [
    'ca',
    'client/root',
    ...inventory.members.map((member): MaterialId => `member/${member.name}`),
    ...applicationUsers(inventory).map((user): MaterialId => `client/${user}`),
  ];
  return {
    cluster: inventory.cluster.name,
    adoptsUnmarked: certificates.some((id) => readIfExists(store.pathsOf(id).public) !== undefined),
  };
}

/**
 * What the tool's clients and the bundles it writes trust, from the CA certificates and the rotation's record
 * alone: asked at every client the run opens, so no private key is read (or decrypted) for it.
 */
export function clusterTrustFrom(inventory: Inventory, store: PkiStore): string | undefined {
  const certificateOf = (id: MaterialId) => {
    const text = readIfExists(store.pathsOf(id).public);
    return text === undefined ? {} : { public: text };
  };
  const caRotation = readCaRotation(store.stateDir);
  return clusterTrust(inventory, {
    ca: certificateOf('ca'),
    caNext: certificateOf('ca-next'),
    peerCa: {},
    peerCaNext: {},
    ...(caRotation ? { caRotation } : {}),
  });
}
