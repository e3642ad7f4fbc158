import type { Change } from '../core/step.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { ClusterIdentity } from './identity.ts';
import type { MaterialId, StoredPair } from './store.ts';
import { PEER_COMMON_NAME, peerStageOf, type PeerTrustStage } from './peer-trust.ts';
import { certifiedUsers } from '../inventory/tool-users.ts';
import {
  type CaFiles,
  type CaRotation,
  type Generation,
  generationPair,
  type RotatedCa,
  rotatedCas,
  rolesOf,
  rotates,
} from './ca-rotation.ts';
import {
  BACKDATE_MS,
  certificatesIn,
  chainLeadsTo,
  inspectCertificate,
  isSignedBy,
  keyMatchesCertificate,
  type CertificateProfile,
  type SubjectAltNames,
} from './x509.ts';

/** A certificate the cluster needs, as a function of the inventory. */
export interface WantedCertificate {
  id: MaterialId;
  commonName: string;
  profile: CertificateProfile;
  sans: SubjectAltNames;
}

export type PkiAction =
  | { kind: 'create-ca' }
  | { kind: 'create-peer-ca'; firstStage: PeerTrustStage }
  | { kind: 'create-next-ca'; ca: RotatedCa }
  | { kind: 'issue-next-intermediate' }
  | { kind: 'issue-intermediate' }
  | { kind: 'issue'; certificate: WantedCertificate }
  | { kind: 'ssh-key'; id: 'ssh/admin' }
  | { kind: 'ssh-host-key'; member: string }
  | { kind: 'known-hosts' }
  | { kind: 'retire-client'; id: `client/${string}` }
  | { kind: 'seal-keys' }
  | { kind: 'cluster-id'; adoptsUnmarked: boolean };

/** What the state directory holds, read by the check. */
export interface PkiFacts {
  ca: StoredPair;
  /** pki.intermediate: the CA that signs members and clients. */
  intermediate: StoredPair;
  /** The CA that signs members' peer certificates and nothing else. */
  peerCa: StoredPair;
  /** The peer port's trust as recorded (see peer-trust.ts); absent before the peer CA was made. */
  peerTrust?: PeerTrustStage;
  /** A rotation's new CA and peer CA (ca-rotation.ts), and the rotation's record while one is under way. */
  caNext: StoredPair;
  peerCaNext: StoredPair;
  /** With pki.intermediate: the intermediate the new CA signs. */
  intermediateNext: StoredPair;
  caRotation?: CaRotation;
  leaves: Map<MaterialId, StoredPair>;
  adminSsh: StoredPair;
  /** Each member's SSH host key, by member name: generated here, injected by cloud-init, pinned. */
  hostKeys: Map<string, StoredPair>;
  knownHosts?: string;
  /** The cluster's ID that marks its domains; absent until made. */
  identity?: ClusterIdentity;
  /** Client certificates in the state directory, by name (root and application users). */
  clientNames: string[];
  /** An encrypted state directory: private key files still plain (a conversion that was stopped). */
  plainKeys: string[];
}

/** A state directory that holds certificates but no cluster ID deployed its cluster before domains were marked. */
export const deployedBeforeMarks = (facts: PkiFacts): boolean =>
  !facts.identity && (facts.ca.public !== undefined || [...facts.leaves.values()].some((pair) => pair.public !== undefined));

/** The cluster's identity: the stored one, or the one the pki step makes in this run (without its ID in a dry-run). */
export const identityOf = (inventory: Inventory, facts: PkiFacts): ClusterIdentity =>
  facts.identity ?? { cluster: inventory.cluster.name, adoptsUnmarked: deployedBeforeMarks(facts) };

/** One known_hosts line per member: all its addresses and its name, with its host key. */
export function knownHostsOf(inventory: Inventory, hostKeys: ReadonlyMap<string, StoredPair>): string {
  return inventory.members
    .map((member) => {
      const key = hostKeys.get(member.name)?.public?.trim().split(' ').slice(0, 2).join(' ');
      return key ? `${[...member.interfaces.map((nic) => nic.ip), member.name].join(',')} ${key}\n` : '';
    })
    .join('');
}

const sorted = (values: Iterable<string>) => [...new Set(values)].sort();

/**
 * Server and peer traffic share one certificate per member (EKU serverAuth + clientAuth): etcd presents
 * the same identity on both ports, and one certificate per member halves what must be rotated.
 */
export function memberSans(inventory: Inventory, member: Member): SubjectAltNames {
  return {
    dns: sorted([member.name, ...(member.fqdn ? [member.fqdn] : []), ...inventory.pki.extraDomains, 'localhost']),
    ips: sorted([...member.interfaces.map((nic) => nic.ip), '127.0.0.1']),
  };
}

export const applicationUsers = (inventory: Inventory): string[] => Object.keys(inventory.users).sort();

/** Each member's peer certificate, signed by the peer CA: one common name for all, so etcd can admit that name alone. */
export const wantedPeerCertificates = (inventory: Inventory): WantedCertificate[] =>
  inventory.members
    .filter((member) => !member.suppliedTls)
    .map((member) => ({
      id: `peer/${member.name}`,
      commonName: PEER_COMMON_NAME,
      profile: 'server-and-client',
      sans: memberSans(inventory, member),
    }));

/** Were members deployed before this state directory had a peer CA (their certificates exist, or the operator supplies them)? */
export const membersDeployedBefore = (inventory: Inventory, facts: PkiFacts): boolean =>
  inventory.members.some((member) => member.suppliedTls !== undefined || facts.leaves.get(`member/${member.name}`)?.public !== undefined);

/** The peer port's stage the members run, from the state directory's PKI facts (see peer-trust.ts). */
export const peerStageOfFacts = (inventory: Inventory, facts: PkiFacts): PeerTrustStage =>
  peerStageOf({
    recorded: facts.peerTrust,
    membersDeployedBefore: membersDeployedBefore(inventory, facts),
    peerCaMade: facts.peerCa.public !== undefined,
    stateDir: inventory.stateDir,
  });

export function wantedCertificates(inventory: Inventory): WantedCertificate[] {
  const members = inventory.members
    .filter((member) => !member.suppliedTls)
    .map(
      (member): WantedCertificate => ({
        id: `member/${member.name}`,
        commonName: member.name,
        profile: 'server-and-client',
        sans: memberSans(inventory, member),
      }),
    );
  // CN=root maps a client certificate to etcd's root user when client-cert-auth is on.
  const root: WantedCertificate[] = inventory.pki.rootClient
    ? []
    : [{ id: 'client/root', commonName: 'root', profile: 'client', sans: { dns: [], ips: [] } }];
  // Certificate mode: each application user logs in with a certificate whose CN is its name.
  const users = inventory.etcd.clientCertAuth
    ? certifiedUsers(inventory).map(
        (user): WantedCertificate => ({ id: `client/${user}`, commonName: user, profile: 'client', sans: { dns: [], ips: [] } }),
      )
    : [];
  return [...members, ...root, ...users];
}

/**
 * The CA members and clients trust: the operator's (pki.ca), the root that the operator's intermediate's
 * chain ends in (no key: the intermediate signs), or the one in the state directory.
 */
export function caOf(inventory: Inventory, storedCa: StoredPair): StoredPair {
  if (inventory.pki.intermediateCa) {
    const root = certificatesIn(inventory.pki.intermediateCa.chain).at(-1);
    return root ? { public: root } : {};
  }
  return inventory.pki.ca ? { public: inventory.pki.ca.certificate, privateKey: inventory.pki.ca.key.reveal() } : storedCa;
}

/** What a rotation reads of the facts: the CAs of both kinds, in place and next, and the record. */
export type RotationFacts = Pick<PkiFacts, 'ca' | 'caNext' | 'peerCa' | 'peerCaNext' | 'caRotation'>;

const caFilesOf = (facts: RotationFacts, ca: RotatedCa): CaFiles =>
  ca === 'cluster' ? { current: facts.ca, next: facts.caNext } : { current: facts.peerCa, next: facts.peerCaNext };

/** One CA's pair a generation names (ca-rotation.ts); outside a rotation of it, the CA in place. Empty when it is not there. */
export function caPairOf(facts: RotationFacts, ca: RotatedCa, generation: Generation): StoredPair {
  if (!rotates(facts.caRotation, ca)) return caFilesOf(facts, ca).current;
  return generationPair(caFilesOf(facts, ca), facts.caRotation?.next[ca], generation) ?? {};
}

/**
 * What signs one generation's member and client certificates in a rotation of the cluster CA:
 * its intermediate under pki.intermediate, else the CA itself.
 */
export function clusterSignerOf(inventory: Inventory, facts: PkiFacts, generation: Generation): StoredPair {
  if (!inventory.pki.intermediate) return caPairOf(facts, 'cluster', generation);
  return generation === 'old' ? facts.intermediate : facts.intermediateNext;
}

const withNewline = (pem: string) => (pem.endsWith('\n') ? pem : `${pem}\n`);

/** What trusts one CA holds at the rotation's stage (the old and the new CA while both are trusted), as one bundle. */
export function trustedBundle(facts: RotationFacts, ca: RotatedCa): string | undefined {
  const pems = rolesOf(facts.caRotation, ca).trust.flatMap((generation) => caPairOf(facts, ca, generation).public ?? []);
  return pems.length > 0 ? pems.map(withNewline).join('') : undefined;
}

/** What members' client ports and every client of the cluster trust: caOf's CA, or both while a rotation has them trusted. */
export const clusterTrust = (inventory: Inventory, facts: RotationFacts): string | undefined =>
  rotates(facts.caRotation, 'cluster') ? trustedBundle(facts, 'cluster') : caOf(inventory, facts.ca).public;

/** What a leaf's file carries after the leaf, so whoever presents it sends the chain up to the trusted CA. */
export function chainAfterLeaf(inventory: Inventory, intermediate: StoredPair): string {
  if (inventory.pki.intermediateCa)
    return [inventory.pki.intermediateCa.certificate, ...certificatesIn(inventory.pki.intermediateCa.chain).slice(0, -1)].join('');
  return inventory.pki.intermediate ? (intermediate.public ?? '') : '';
}

/** Refusals for the operator's intermediate: it must be a CA with its own key, leading to a self-signed root. */
function checkOperatorIntermediate(given: { certificate: string; key: { reveal(): string }; chain: string }, now: Date): void {
  if (!keyMatchesCertificate(given.certificate, given.key.reveal()))
    throw new PkiRefusal("pki.intermediate_ca.key does not belong to pki.intermediate_ca.certificate; give the intermediate's own key");
  const facts = inspectCertificate(given.certificate);
  if (!facts.isCA) throw new PkiRefusal('pki.intermediate_ca.certificate is not a CA certificate (basicConstraints CA:TRUE)');
  if (facts.notAfter.getTime() < now.getTime())
    throw new PkiRefusal(`pki.intermediate_ca.certificate expired ${facts.notAfter.toISOString()}`);
  const chain = certificatesIn(given.chain);
  const root = chain.at(-1);
  if (!root || !isSignedBy(root, root))
    throw new PkiRefusal('pki.intermediate_ca.chain must end with the self-signed root CA that members and clients are to trust');
  if (!chainLeadsTo([given.certificate, ...chain.slice(0, -1)].join(''), root))
    throw new PkiRefusal(
      'pki.intermediate_ca.certificate does not lead to the root through pki.intermediate_ca.chain (each certificate signed by the next)',
    );
}

/** The CA's private key is not in the state directory (kept offline): only an intermediate can sign then. */
export const rootKeyOffline = (inventory: Inventory, facts: PkiFacts): boolean =>
  !inventory.pki.ca && facts.ca.public !== undefined && facts.ca.privateKey === undefined;

/** Why the intermediate CA must be issued (again), or undefined when it can go on signing. */
function intermediateReason(stored: StoredPair, caPem: string, renewBeforeHours: number, now: Date): string | undefined {
  if (!stored.public) return 'missing';
  if (!stored.privateKey) return 'its private key is missing';
  if (!keyMatchesCertificate(stored.public, stored.privateKey)) return 'its private key does not match';
  if (!isSignedBy(stored.public, caPem)) return 'not signed by the current CA';
  const notAfter = inspectCertificate(stored.public).notAfter;
  if ((notAfter.getTime() - now.getTime()) / 3_600_000 < renewBeforeHours)
    return `it expires ${notAfter.toISOString()}, inside the renewal period`;
  return undefined;
}

function describeSans(sans: SubjectAltNames): string {
  return [...sans.dns.map((d) => `DNS:${d}`), ...sans.ips.map((ip) => `IP:${ip}`)].map((line) => `${line}\n`).join('');
}

/** Why an existing certificate must be re-issued, or undefined when it is still good. */
function reissueReason(
  wanted: WantedCertificate,
  stored: StoredPair,
  caPem: string | undefined,
  renewBeforeHours: number,
  now: Date,
  renewIssuedBefore: Date | undefined,
): string | undefined {
  if (!stored.public) return 'missing';
  if (!stored.privateKey) return 'its private key is missing';
  if (!keyMatchesCertificate(stored.public, stored.privateKey)) return 'its private key does not match';
  if (!caPem || !isSignedBy(stored.public, caPem)) return 'not signed by the current CA';
  const facts = inspectCertificate(stored.public);
  const have = describeSans({ dns: sorted(facts.sans.dns), ips: sorted(facts.sans.ips) });
  if (have !== describeSans(wanted.sans) || facts.commonName !== wanted.commonName) return 'its names or addresses changed';
  const hoursLeft = (facts.notAfter.getTime() - now.getTime()) / 3_600_000;
  if (hoursLeft < renewBeforeHours) return `it expires ${facts.notAfter.toISOString()}, inside the renewal period`;
  // Issued before this run started (notBefore is backdated): renewed once per run that asks, and the re-check sees the new one.
  if (renewIssuedBefore && facts.notBefore.getTime() + BACKDATE_MS < renewIssuedBefore.getTime())
    return 'renewal asked for (--renew-certs)';
  return undefined;
}

/** Refusals: situations where going on would silently replace the trust root of a running cluster. */
export class PkiRefusal extends Error {}

/** Pure: compares what the state directory holds with what the inventory needs. */
export interface PkiPlanOptions {
  now?: Date;
  /** --renew-certs: re-issue every leaf issued before this moment (the start of the run). */
  renewIssuedBefore?: Date;
}

export function planPki(
  inventory: Inventory,
  facts: PkiFacts,
  { now = new Date(), renewIssuedBefore }: PkiPlanOptions = {},
): Change<PkiAction>[] {
  const wanted = wantedCertificates(inventory);
  const ca = caOf(inventory, facts.ca);
  refuseGivenCas(inventory, now);
  const caChanges = inventory.pki.ca || inventory.pki.intermediateCa ? [] : planOwnCa(inventory, facts, ca, now);
  // No CA yet (caChanges creates it): whatever signs is new in this run.
  const { signer, changes: signerChanges } = planSigner(inventory, facts, ca.public, now);
  // A rotation of the cluster CA has the new one sign client certificates first, then members' (ca-rotation.ts).
  const roles = rolesOf(facts.caRotation, 'cluster');
  const rotation = planRotationCas(inventory, facts);
  const newSigner = newClusterSigner(inventory, facts, rotation);
  const signerOf = (generation: Generation): Signer => (generation === 'old' ? signer : newSigner);
  const isClient = (certificate: WantedCertificate) => certificate.profile === 'client';
  return [
    ...caChanges,
    ...rotation,
    ...signerChanges,
    ...planLeaves(
      inventory,
      facts,
      wanted.filter((certificate) => !isClient(certificate)),
      signerOf(roles.presented),
      now,
      renewIssuedBefore,
    ),
    ...planLeaves(inventory, facts, wanted.filter(isClient), signerOf(roles.clients), now, renewIssuedBefore),
    ...planPeerCa(inventory, facts, now, renewIssuedBefore),
    ...planSshKeys(inventory, facts),
    ...planRetiredClients(inventory, facts, wanted),
    ...planStateDirectory(facts),
  ];
}

/**
 * What signs the certificates a rotation gives the new CA (from clients-new on): the new CA, or with pki.intermediate
 * the intermediate it signs; new in this run when the rotation's changes issue it.
 */
function newClusterSigner(inventory: Inventory, facts: PkiFacts, rotation: readonly Change<PkiAction>[]): Signer {
  if (rotation.some((change) => change.action.kind === 'create-next-ca' || change.action.kind === 'issue-next-intermediate'))
    return { isNew: 'the new CA is new' };
  return { pem: (inventory.pki.intermediate ? facts.intermediateNext : caPairOf(facts, 'cluster', 'new')).public ?? '' };
}

/** With pki.intermediate, the new CA's own intermediate: issued with it, and again whenever it is not the new CA's. */
function planNextIntermediate(inventory: Inventory, facts: PkiFacts, newCa: StoredPair | undefined): Change<PkiAction>[] {
  if (!inventory.pki.intermediate) return [];
  const stored = facts.intermediateNext;
  const good =
    newCa?.public !== undefined &&
    stored.public !== undefined &&
    stored.privateKey !== undefined &&
    keyMatchesCertificate(stored.public, stored.privateKey) &&
    isSignedBy(stored.public, newCa.public);
  if (good) return [];
  return [{ summary: 'issue the intermediate CA the new CA signs', action: { kind: 'issue-next-intermediate' } }];
}

/** Why a rotation of `target` cannot run on this inventory and state directory, or undefined when it can. */
export function rotationRefusal(inventory: Inventory, facts: Pick<PkiFacts, 'peerTrust'>, target: RotatedCa | 'both'): string | undefined {
  const cluster = target !== 'peer';
  if (cluster && (inventory.pki.ca || inventory.pki.intermediateCa))
    return 'rotating a CA the operator gives (pki.ca, pki.intermediate_ca) is not implemented: the tool rotates only its own CA';
  if (cluster && inventory.members.some((member) => member.suppliedTls))
    return (
      "members whose certificates the operator supplies (members[].tls) present their own CA's: " +
      'rotating the cluster CA is not implemented for them'
    );
  if (target !== 'cluster' && facts.peerTrust !== undefined && facts.peerTrust !== 'peer-only')
    return `the peer port's move to the peer CA is at ${facts.peerTrust}: run the deploy to finish it before rotating the peer CA`;
  return undefined;
}

/** A rotation under way: its new CAs made (at its first stage) or found where the record says; refused when lost. */
function planRotationCas(inventory: Inventory, facts: PkiFacts): Change<PkiAction>[] {
  const rotation = facts.caRotation;
  if (!rotation) {
    // The record goes last at a rotation's end, after the new CA's files: a new CA without it is a record lost.
    const orphans = (['ca-next', 'peer-ca-next'] as const).filter((id) => (id === 'ca-next' ? facts.caNext : facts.peerCaNext).public);
    if (orphans.length > 0)
      throw new PkiRefusal(
        `${orphans.map((id) => `pki/${id}.crt`).join(' and ')}: a rotation's new CA, but pki/ca-rotation.json is missing, so which ` +
          'stage the members run is unknown and none is guessed: put the record back from where the state directory came from',
      );
    return [];
  }
  const refusal = rotationRefusal(inventory, facts, rotation.target);
  if (refusal) throw new PkiRefusal(`a rotation of ${rotatedCas(rotation.target)} is under way (pki/ca-rotation.json), but ${refusal}`);
  return (['cluster', 'peer'] as const)
    .filter((ca) => rotates(rotation, ca))
    .flatMap((ca): Change<PkiAction>[] => {
      const files = caFilesOf(facts, ca);
      const name = ca === 'cluster' ? 'CA' : 'peer CA';
      const next = generationPair(files, rotation.next[ca], 'new');
      if (rotation.stage !== 'new-only' && !generationPair(files, rotation.next[ca], 'old'))
        throw new PkiRefusal(`the ${name} in place is missing while members still trust it (rotation at ${rotation.stage}): restore it`);
      const intermediate = (newCa: StoredPair | undefined) => (ca === 'cluster' ? planNextIntermediate(inventory, facts, newCa) : []);
      if (next) {
        if (!next.privateKey || !keyMatchesCertificate(next.public!, next.privateKey))
          throw new PkiRefusal(`the new ${name}'s key is missing or is not its own: restore the pair the rotation made`);
        return intermediate(next);
      }
      // Nothing the new CA signed exists before clients-new: one lost then is made again, harmlessly.
      if (rotation.stage === 'trust-both')
        return [
          { summary: `create the new ${name} the rotation moves the cluster to`, action: { kind: 'create-next-ca', ca } },
          ...intermediate(undefined),
        ];
      throw new PkiRefusal(
        `the rotation is at ${rotation.stage}, but the new ${name} it recorded (${rotation.next[ca] ?? 'none'}) is in the state ` +
          'directory no more: restore it from where the state directory came from; a trust root is never guessed',
      );
    });
}

/** Refusals for the CAs the operator gives (pki.ca, pki.intermediate_ca): each with its own key. */
function refuseGivenCas(inventory: Inventory, now: Date): void {
  if (inventory.pki.intermediateCa) checkOperatorIntermediate(inventory.pki.intermediateCa, now);
  if (inventory.pki.ca && !keyMatchesCertificate(inventory.pki.ca.certificate, inventory.pki.ca.key.reveal())) {
    throw new PkiRefusal("pki.ca.key does not belong to pki.ca.certificate; give the CA's own key");
  }
}

/**
 * The tool's own CA (neither pki.ca nor pki.intermediate_ca given): created when there is none and
 * nothing it signed exists; refused wherever going on would replace it silently.
 */
function planOwnCa(inventory: Inventory, facts: PkiFacts, ca: StoredPair, now: Date): Change<PkiAction>[] {
  const renewBefore = inventory.pki.earlyRenewalPeriod;
  // Why the intermediate must be issued (pki.intermediate and a CA only): undefined while it can sign.
  const intermediateDue =
    inventory.pki.intermediate && ca.public !== undefined ? intermediateReason(facts.intermediate, ca.public, renewBefore, now) : undefined;
  // With an intermediate that can sign, the CA's key may be kept offline (the step warns).
  if (ca.public && !ca.privateKey && !(inventory.pki.intermediate && intermediateDue === undefined)) {
    throw new PkiRefusal(
      inventory.pki.intermediate
        ? `the intermediate CA must be issued (${facts.intermediate.public ? intermediateDue : 'missing'}), ` +
            "and only the CA can sign it, but pki/ca.key is not in the state directory: put the CA's key back for this run"
        : 'ca.crt exists but ca.key is missing; restore the key into the state directory (the CA is never replaced silently)',
    );
  }
  if (ca.public && ca.privateKey && !keyMatchesCertificate(ca.public, ca.privateKey)) {
    throw new PkiRefusal(
      'pki/ca.key does not belong to pki/ca.crt (two runs at once, or a file copied from elsewhere?); ' +
        "restore the pair that signed the members' certificates",
    );
  }
  if (!ca.public) {
    const signedLeaves = [...facts.leaves.entries()].filter(([, pair]) => pair.public).map(([id]) => id);
    if (signedLeaves.length > 0) {
      throw new PkiRefusal(
        `the CA is missing from the state directory but certificates it signed exist (${signedLeaves.join(', ')}); ` +
          'restore pki/ca.crt and pki/ca.key, or delete the whole pki directory to start a new trust root deliberately',
      );
    }
    return [{ summary: 'create cluster CA', action: { kind: 'create-ca' } }];
  }
  const { notAfter } = inspectCertificate(ca.public);
  if (notAfter.getTime() < now.getTime()) {
    throw new PkiRefusal(
      `the CA expired ${notAfter.toISOString()}; an expired CA cannot be rotated in place (members refuse its ` +
        'certificates already): see "Rotating the CA" in docs/operating.md',
    );
  }
  return [];
}

/** What signs members and clients: its certificate, or — issued in this run — why it is new. */
type Signer = { pem: string } | { isNew: string };

/** The signer: the operator's intermediate, the tool's intermediate (issued again when it must be), or the CA itself. */
function planSigner(
  inventory: Inventory,
  facts: PkiFacts,
  caPem: string | undefined,
  now: Date,
): { signer: Signer; changes: Change<PkiAction>[] } {
  if (inventory.pki.intermediateCa) return { signer: { pem: inventory.pki.intermediateCa.certificate }, changes: [] };
  if (!inventory.pki.intermediate) return { signer: caPem === undefined ? { isNew: 'the CA is new' } : { pem: caPem }, changes: [] };
  const reason =
    caPem === undefined ? 'the CA is new' : intermediateReason(facts.intermediate, caPem, inventory.pki.earlyRenewalPeriod, now);
  // No reason to issue it: the stored intermediate has its certificate.
  if (reason === undefined) return { signer: { pem: facts.intermediate.public! }, changes: [] };
  const issue: Change<PkiAction> = { summary: `issue the intermediate CA (${reason})`, action: { kind: 'issue-intermediate' } };
  return { signer: { isNew: 'the intermediate CA is new' }, changes: [issue] };
}

/** Members' and clients' certificates issued (again) where missing, no longer good, or signed by a signer issued now. */
function planLeaves(
  inventory: Inventory,
  facts: PkiFacts,
  wanted: readonly WantedCertificate[],
  signer: Signer,
  now: Date,
  renewIssuedBefore: Date | undefined,
): Change<PkiAction>[] {
  return wanted.flatMap((certificate): Change<PkiAction>[] => {
    const stored = facts.leaves.get(certificate.id) ?? {};
    const reason =
      'isNew' in signer
        ? stored.public
          ? signer.isNew
          : 'missing'
        : reissueReason(certificate, stored, signer.pem, inventory.pki.earlyRenewalPeriod, now, renewIssuedBefore);
    if (reason === undefined) return [];
    const before = stored.public ? describeSans(inspectCertificate(stored.public).sans) : '';
    const diff = { label: `${certificate.id} subject alt names`, before, after: describeSans(certificate.sans) };
    // A client certificate carries no names or addresses: nothing to show.
    const shown = certificate.profile === 'client' ? {} : { diff };
    return [{ summary: `issue certificate ${certificate.id} (${reason})`, ...shown, action: { kind: 'issue', certificate } }];
  });
}

/** The tool's SSH key, each member's host key, and the known_hosts file that pins them. */
function planSshKeys(inventory: Inventory, facts: PkiFacts): Change<PkiAction>[] {
  const changes: Change<PkiAction>[] = [];
  if (!facts.adminSsh.public || !facts.adminSsh.privateKey) {
    changes.push({ summary: 'create the SSH key the tool logs into members with', action: { kind: 'ssh-key', id: 'ssh/admin' } });
  }
  const missingHostKeys = inventory.members.filter(
    (member) => !facts.hostKeys.get(member.name)?.public || !facts.hostKeys.get(member.name)?.privateKey,
  );
  for (const member of missingHostKeys)
    changes.push({ summary: `create the SSH host key of ${member.name}`, action: { kind: 'ssh-host-key', member: member.name } });
  if (missingHostKeys.length > 0 || facts.knownHosts !== knownHostsOf(inventory, facts.hostKeys)) {
    changes.push({ summary: "write ssh/known_hosts pinning the members' host keys", action: { kind: 'known-hosts' } });
  }
  return changes;
}

/** A user removed from the inventory (or password mode) has no certificate the tool keeps. */
function planRetiredClients(inventory: Inventory, facts: PkiFacts, wanted: readonly WantedCertificate[]): Change<PkiAction>[] {
  const wantedClients = new Set(wanted.map((certificate) => certificate.id));
  const why = `no such user in the inventory${inventory.etcd.clientCertAuth ? '' : ' in certificate mode'}`;
  return facts.clientNames
    .map((name) => `client/${name}` as const)
    .filter((id) => id !== 'client/root' && !wantedClients.has(id))
    .map((id) => ({ summary: `delete certificate ${id} and its key (${why})`, action: { kind: 'retire-client', id } }));
}

/** The state directory's own: private keys a stopped conversion left unencrypted, and the cluster's ID. */
function planStateDirectory(facts: PkiFacts): Change<PkiAction>[] {
  const changes: Change<PkiAction>[] = [];
  if (facts.plainKeys.length > 0) {
    const files = `${facts.plainKeys.length} private key file(s)`;
    changes.push({
      summary: `encrypt ${files} left unencrypted in the encrypted state directory (${facts.plainKeys.join(', ')})`,
      action: { kind: 'seal-keys' },
    });
  }
  if (!facts.identity) {
    const deployedBefore = deployedBeforeMarks(facts);
    changes.push({
      summary:
        `create the cluster's ID (cluster-id.json), which marks its domains as its ` +
        `own${deployedBefore ? '; domains an earlier version made for this cluster get the mark' : ''}`,
      action: { kind: 'cluster-id', adoptsUnmarked: deployedBefore },
    });
  }
  return changes;
}

/** The peer CA (made once, never replaced silently) and each member's peer certificate. */
function planPeerCa(inventory: Inventory, facts: PkiFacts, now: Date, renewIssuedBefore: Date | undefined): Change<PkiAction>[] {
  const changes: Change<PkiAction>[] = [];
  const { peerCa } = facts;
  let peerCaPem = caPairOf(facts, 'peer', rolesOf(facts.caRotation, 'peer').presented).public;
  if (!peerCa.public) {
    const peerSigned = [...facts.leaves.entries()].filter(([id, pair]) => id.startsWith('peer/') && pair.public).map(([id]) => id);
    if (peerSigned.length > 0)
      throw new PkiRefusal(
        `the peer CA is missing from the state directory but certificates it signed ` +
          `exist (${peerSigned.join(', ')}); restore pki/peer-ca.crt and pki/peer-ca.key`,
      );
    const firstStage = peerStageOfFacts(inventory, facts);
    const how =
      firstStage === 'peer-only' ? 'members trust it alone on the peer port' : 'members deployed before move to it one stage at a time';
    changes.push({
      summary: `create the peer CA, which signs members' peer certificates only (${how})`,
      action: { kind: 'create-peer-ca', firstStage },
    });
    peerCaPem = undefined;
  } else if (!peerCa.privateKey) {
    throw new PkiRefusal(
      'pki/peer-ca.crt exists but pki/peer-ca.key is missing; ' +
        'restore the key into the state directory (the peer CA is never replaced silently)',
    );
  } else if (!keyMatchesCertificate(peerCa.public, peerCa.privateKey)) {
    throw new PkiRefusal("pki/peer-ca.key does not belong to pki/peer-ca.crt; restore the pair that signed the members' peer certificates");
  } else if (inspectCertificate(peerCa.public).notAfter.getTime() < now.getTime()) {
    throw new PkiRefusal(
      `the peer CA expired ${inspectCertificate(peerCa.public).notAfter.toISOString()}; ` +
        `an expired CA cannot be rotated in place (members refuse its certificates already): see "Rotating the CA" in docs/operating.md`,
    );
  }
  for (const certificate of wantedPeerCertificates(inventory)) {
    const stored = facts.leaves.get(certificate.id) ?? {};
    const reason =
      peerCaPem === undefined
        ? stored.public
          ? 'the peer CA is new'
          : 'missing'
        : reissueReason(certificate, stored, peerCaPem, inventory.pki.earlyRenewalPeriod, now, renewIssuedBefore);
    if (reason !== undefined)
      changes.push({ summary: `issue certificate ${certificate.id} (${reason})`, action: { kind: 'issue', certificate } });
  }
  return changes;
}
