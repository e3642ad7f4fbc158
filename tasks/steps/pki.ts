import { CONTROL_NODE, type ControlNode, type Change, type Step } from '../core/step.ts';
import type { Inventory } from '../inventory/model.ts';
import { writeNewIdentity } from '../pki/identity.ts';
import { fingerprintOf, type Generation, readCaRotation, type RotatedCa, rolesOf, writeCaRotation } from '../pki/ca-rotation.ts';
import { writePeerTrust } from '../pki/peer-trust.ts';
import { generateRsaKey, generateSshKey } from '../pki/keys.ts';
import { readFacts } from '../pki/materials.ts';
import {
  caOf,
  caPairOf,
  clusterSignerOf,
  chainAfterLeaf,
  knownHostsOf,
  planPki,
  PkiRefusal,
  rootKeyOffline,
  type PkiAction,
  type PkiFacts,
  type WantedCertificate,
} from '../pki/plan.ts';
import { PUBLIC_FILE_MODE, writeFileAtomic } from '../core/files.ts';
import type { PkiStore, StoredPair } from '../pki/store.ts';
import { inspectCertificate, issueCertificate } from '../pki/x509.ts';
import { deployStep } from './deploy-step.ts';

/**
 * The cluster's CA (and with pki.intermediate its intermediate, which then signs everything else),
 * member certificates, client certificates and the tool's SSH keys, in the state directory. A leaf
 * signed by the intermediate is stored with the intermediate after it, so whoever presents it (etcd,
 * etcdctl, the tool) sends the chain up to the CA that members and clients trust.
 */
export function pkiStep({
  inventory,
  store,
  renewIssuedBefore,
}: {
  inventory: Inventory;
  store: PkiStore;
  /** --renew-certs: leaves issued before this are issued again. */
  renewIssuedBefore?: Date;
}): Step<PkiFacts, PkiAction, ControlNode> {
  return {
    name: 'pki',
    targets: [CONTROL_NODE],
    async check() {
      return readFacts(inventory, store);
    },
    plan(facts) {
      try {
        return planPki(inventory, facts, renewIssuedBefore ? { renewIssuedBefore } : {});
      } catch (error) {
        // The runner adds the host and step to the message.
        if (error instanceof PkiRefusal) throw new Error(`refusing to continue: ${error.message}`);
        throw error;
      }
    },
    warnings(facts) {
      if (!inventory.pki.intermediate || !rootKeyOffline(inventory, facts) || !facts.intermediate.public) return [];
      const until = inspectCertificate(facts.intermediate.public).notAfter.toISOString();
      return [
        `the CA's key is offline (pki/ca.key is not in the state directory): the intermediate CA signs alone, until ${until}; ` +
          'put the key back for a run before then to renew it',
      ];
    },
    apply: (changes: Change<PkiAction>[], _target, facts) =>
      applyPki(
        inventory,
        store,
        changes.map((change) => change.action),
        facts,
      ),
  };
}

type PeerCaAction = Extract<PkiAction, { kind: 'create-peer-ca' }>;
type IssuerPair = Required<StoredPair>;

/** The plan's actions carried out: keys first, then the CAs, the leaves they sign, the SSH keys and the records. */
async function applyPki(inventory: Inventory, store: PkiStore, actions: PkiAction[], facts: PkiFacts): Promise<void> {
  const issues = actions.flatMap((action) => (action.kind === 'issue' ? [action.certificate] : []));
  const hostKeyMembers = actions.flatMap((action) => (action.kind === 'ssh-host-key' ? [action.member] : []));
  const createPeerCa = actions.find((action): action is PeerCaAction => action.kind === 'create-peer-ca');
  const nextCas = actions.flatMap((action) => (action.kind === 'create-next-ca' ? [action.ca] : []));
  const keys = await generateKeys(inventory, actions, issues.length, hostKeyMembers, nextCas.length);
  const ca = keys.ca ? issueCa(inventory, store, keys.ca) : caOf(inventory, facts.ca);
  const signer = keys.intermediate ? issueIntermediate(inventory, store, keys.intermediate, ca) : currentSigner(inventory, facts, ca);
  const peerCa = keys.peerCa && createPeerCa ? issuePeerCa(inventory, store, keys.peerCa, createPeerCa, facts) : facts.peerCa;
  keys.nextCas.forEach((key, i) => {
    issueNextCa(inventory, store, nextCas[i]!, key);
  });
  if (keys.nextIntermediate) issueNextIntermediate(inventory, store, keys.nextIntermediate);
  // The new CA's signer as it stands now: made a moment ago, or in an earlier run.
  const rotated = facts.caRotation ? readFacts(inventory, store) : facts;
  issueLeaves(inventory, store, issues, keys.leaves, leafSigners(inventory, rotated, signer, peerCa));
  if (keys.ssh) store.write('ssh/admin', { public: `${keys.ssh.publicLine}\n`, privateKey: keys.ssh.privatePem });
  hostKeyMembers.forEach((member, i) => {
    const { publicLine, privatePem } = keys.hostKeys[i]!;
    store.write(`ssh-host/${member}`, { public: `${publicLine}\n`, privateKey: privatePem });
  });
  keepRecords(inventory, store, actions);
}

/** Every key the actions need, at once on libuv's thread pool (RSA generation dominates); signing is quick and sequential after. */
async function generateKeys(
  inventory: Inventory,
  actions: readonly PkiAction[],
  leaves: number,
  hostKeyMembers: readonly string[],
  nextCas: number,
) {
  const bits = inventory.pki.keyLength;
  const wants = (kind: PkiAction['kind']) => actions.some((action) => action.kind === kind);
  const rsaIf = (wanted: boolean) => (wanted ? generateRsaKey(bits) : undefined);
  const rsaKeys = (count: number) => Promise.all(Array.from({ length: count }, () => generateRsaKey(bits)));
  const [ca, peerCa, intermediate, nextIntermediate, leafKeys, ssh, hostKeys, nextCaKeys] = await Promise.all([
    rsaIf(wants('create-ca')),
    rsaIf(wants('create-peer-ca')),
    rsaIf(wants('issue-intermediate')),
    rsaIf(wants('issue-next-intermediate')),
    rsaKeys(leaves),
    wants('ssh-key') ? generateSshKey(`etcd-kvm@${inventory.cluster.name}`) : undefined,
    Promise.all(hostKeyMembers.map((member) => generateSshKey(`${member} host key`))),
    rsaKeys(nextCas),
  ]);
  return { ca, peerCa, intermediate, nextIntermediate, leaves: leafKeys, ssh, hostKeys, nextCas: nextCaKeys };
}

/** What every CA of the cluster carries from the inventory; members' and clients' certificates live pki.validity_period (issueLeaves). */
const certificateBase = (inventory: Inventory) => ({
  organization: inventory.pki.organization,
  validityHours: inventory.pki.caValidityPeriod,
  sans: { dns: [], ips: [] },
});

function issueCa(inventory: Inventory, store: PkiStore, key: string): IssuerPair {
  const commonName = `${inventory.cluster.name} etcd CA`;
  const certificate = issueCertificate({ ...certificateBase(inventory), commonName, profile: 'ca', subjectKeyPem: key });
  store.write('ca', { public: certificate, privateKey: key });
  return { public: certificate, privateKey: key };
}

/** What signs members and clients when no intermediate is issued now: the operator's intermediate, the stored one, or the CA. */
function currentSigner(inventory: Inventory, facts: PkiFacts, ca: StoredPair): StoredPair {
  const operatorIntermediate = inventory.pki.intermediateCa;
  if (operatorIntermediate) return { public: operatorIntermediate.certificate, privateKey: operatorIntermediate.key.reveal() };
  return inventory.pki.intermediate ? facts.intermediate : ca;
}

/** With pki.intermediate, the intermediate the rotation's new CA signs (pki/intermediate-next), beside the one in place. */
function issueNextIntermediate(inventory: Inventory, store: PkiStore, key: string): void {
  const rotation = readCaRotation(store.stateDir);
  const newCa = rotation && caPairOf(readFacts(inventory, store), 'cluster', 'new');
  if (!newCa?.public || !newCa.privateKey) throw new Error("the new CA's intermediate is asked for, but the new CA is not there");
  issueIntermediate(inventory, store, key, newCa, 'intermediate-next');
}

function issueIntermediate(
  inventory: Inventory,
  store: PkiStore,
  key: string,
  ca: StoredPair,
  id: 'intermediate' | 'intermediate-next' = 'intermediate',
): IssuerPair {
  const certificate = issueCertificate({
    ...certificateBase(inventory),
    commonName: `${inventory.cluster.name} etcd intermediate CA`,
    profile: 'intermediate-ca',
    subjectKeyPem: key,
    issuer: { certificatePem: ca.public!, keyPem: ca.privateKey! },
  });
  store.write(id, { public: certificate, privateKey: key });
  return { public: certificate, privateKey: key };
}

function issuePeerCa(inventory: Inventory, store: PkiStore, key: string, action: PeerCaAction, facts: PkiFacts): IssuerPair {
  const commonName = `${inventory.cluster.name} etcd peer CA`;
  const certificate = issueCertificate({ ...certificateBase(inventory), commonName, profile: 'ca', subjectKeyPem: key });
  // Recorded before the CA: the stage members start from, which later runs move on. A peer CA without its
  // record is then always a record lost, never a run stopped between the two (see peer-trust.ts).
  if (!facts.peerTrust) writePeerTrust(store.stateDir, action.firstStage);
  store.write('peer-ca', { public: certificate, privateKey: key });
  return { public: certificate, privateKey: key };
}

/**
 * A rotation's new CA (pki/ca-rotation.ts), beside the one in place, and its fingerprint in the record: the
 * CA first, so a run killed between the two leaves a CA the record does not name, which the next run makes again.
 */
function issueNextCa(inventory: Inventory, store: PkiStore, ca: RotatedCa, key: string): void {
  const rotation = readCaRotation(store.stateDir);
  if (!rotation) throw new Error('a new CA is asked for, but no rotation is recorded (pki/ca-rotation.json)');
  const commonName = `${inventory.cluster.name} etcd ${ca === 'cluster' ? '' : 'peer '}CA ${new Date().toISOString().slice(0, 10)}`;
  const certificate = issueCertificate({ ...certificateBase(inventory), commonName, profile: 'ca', subjectKeyPem: key });
  store.write(ca === 'cluster' ? 'ca-next' : 'peer-ca-next', { public: certificate, privateKey: key });
  writeCaRotation(store.stateDir, { ...rotation, next: { ...rotation.next, [ca]: fingerprintOf(certificate) } });
}

/** Who signs each kind of leaf: members' and clients' `signer` (or, in a rotation's stages, the new CA), peers' the peer CA. */
function leafSigners(inventory: Inventory, facts: PkiFacts, signer: StoredPair, peerCa: StoredPair) {
  const cluster = rolesOf(facts.caRotation, 'cluster');
  const peer = rolesOf(facts.caRotation, 'peer');
  const newSigner = clusterSignerOf(inventory, facts, 'new');
  const clusterBy = (generation: Generation) => (generation === 'old' ? signer : newSigner);
  return (leaf: WantedCertificate): StoredPair =>
    leaf.id.startsWith('peer/')
      ? peer.presented === 'old' || !facts.caRotation
        ? peerCa
        : caPairOf(facts, 'peer', 'new')
      : clusterBy(leaf.profile === 'client' ? cluster.clients : cluster.presented);
}

/** Each wanted leaf with its new key, by the signer `signerOf` names (members' and clients' with the chain after it). */
function issueLeaves(
  inventory: Inventory,
  store: PkiStore,
  wanted: readonly WantedCertificate[],
  keys: readonly string[],
  signerOf: (leaf: WantedCertificate) => StoredPair,
): void {
  const { organization } = certificateBase(inventory);
  const validityHours = inventory.pki.validityPeriod;
  wanted.forEach((leaf, i) => {
    const key = keys[i]!;
    const signer = signerOf(leaf);
    // A peer certificate is signed by the peer CA alone, with no chain: members trust that CA directly.
    const peer = leaf.id.startsWith('peer/');
    const certificate = issueCertificate({
      commonName: leaf.commonName,
      organization,
      profile: leaf.profile,
      sans: leaf.sans,
      validityHours,
      subjectKeyPem: key,
      issuer: { certificatePem: signer.public!, keyPem: signer.privateKey! },
    });
    store.write(leaf.id, { public: `${certificate}${peer ? '' : chainAfterLeaf(inventory, signer)}`, privateKey: key });
  });
}

/** The state directory's bookkeeping: retired client certificates, sealed keys, the cluster's ID, known_hosts from the stored keys. */
function keepRecords(inventory: Inventory, store: PkiStore, actions: readonly PkiAction[]): void {
  for (const action of actions) if (action.kind === 'retire-client') store.remove(action.id);
  if (actions.some((action) => action.kind === 'seal-keys')) store.convertKeys('sealed');
  for (const action of actions) if (action.kind === 'cluster-id') writeNewIdentity(store.stateDir, action.adoptsUnmarked);
  if (actions.some((action) => action.kind === 'known-hosts')) {
    writeFileAtomic(store.knownHostsPath, knownHostsOf(inventory, readFacts(inventory, store).hostKeys), PUBLIC_FILE_MODE);
  }
}

export const pki = deployStep({
  id: 'pki',
  kind: 'operation',
  on: 'control node',
  selectable: false,
  changes: [],
  doc: "CA, peer CA, member and client certificates, the tool's SSH key; the cluster's ID",
  run: (_phase, run) =>
    run.runner.runStep(
      pkiStep({
        inventory: run.resources.inventory,
        store: run.resources.store,
        renewIssuedBefore: run.options.renewCerts ? run.started : undefined,
      }),
    ),
});
