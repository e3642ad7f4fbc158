import { CONTROL_NODE, type Change, type Step } from '../core/step.ts';
import type { Inventory } from '../inventory/model.ts';
import { writeNewIdentity } from '../pki/identity.ts';
import { writePeerTrust } from '../pki/peer-trust.ts';
import { generateRsaKey, generateSshKey } from '../pki/keys.ts';
import { readFacts } from '../pki/materials.ts';
import { caOf, chainAfterLeaf, knownHostsOf, planPki, PkiRefusal, rootKeyOffline, type PkiAction, type PkiFacts } from '../pki/plan.ts';
import { PUBLIC_FILE_MODE, writeFileAtomic } from '../core/files.ts';
import type { PkiStore } from '../pki/store.ts';
import { inspectCertificate, issueCertificate } from '../pki/x509.ts';

/**
 * The cluster's CA (and with pki.intermediate its intermediate, which then signs everything else),
 * member certificates, client certificates and the tool's SSH keys, in the state directory. A leaf
 * signed by the intermediate is stored with the intermediate after it, so whoever presents it (etcd,
 * etcdctl, the tool) sends the chain up to the CA that members and clients trust.
 */
export function pkiStep(inventory: Inventory, store: PkiStore, renewIssuedBefore?: Date): Step<PkiFacts, PkiAction> {
  const validityHours = inventory.pki.validity_period;
  const organization = inventory.pki.organization;
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
      return [`the CA's key is offline (pki/ca.key is not in the state directory): the intermediate CA signs alone, until ${until}; put the key back for a run before then to renew it`];
    },
    async apply(changes: Change<PkiAction>[], _target, facts) {
      const actions = changes.map((change) => change.action);
      const issues = actions.flatMap((action) => (action.kind === 'issue' ? [action.certificate] : []));
      const createCa = actions.some((action) => action.kind === 'create-ca');
      const issueIntermediate = actions.some((action) => action.kind === 'issue-intermediate');
      // Every key at once, on libuv's thread pool (RSA generation dominates); signing is quick and sequential.
      const hostKeyMembers = actions.flatMap((action) => (action.kind === 'ssh-host-key' ? [action.member] : []));
      const createPeerCa = actions.find((action) => action.kind === 'create-peer-ca');
      const [caKey, peerCaKey, intermediateKey, leafKeys, sshKey, hostKeys] = await Promise.all([
        createCa ? generateRsaKey(inventory.pki.key_length) : undefined,
        createPeerCa ? generateRsaKey(inventory.pki.key_length) : undefined,
        issueIntermediate ? generateRsaKey(inventory.pki.key_length) : undefined,
        Promise.all(issues.map(() => generateRsaKey(inventory.pki.key_length))),
        actions.some((action) => action.kind === 'ssh-key') ? generateSshKey(`etcd-kvm@${inventory.cluster.name}`) : undefined,
        Promise.all(hostKeyMembers.map((member) => generateSshKey(`${member} host key`))),
      ]);
      let ca = caOf(inventory, facts.ca);
      if (caKey) {
        const certificate = issueCertificate({
          commonName: `${inventory.cluster.name} etcd CA`,
          organization,
          profile: 'ca',
          sans: { dns: [], ips: [] },
          validityHours,
          subjectKeyPem: caKey,
        });
        store.write('ca', { public: certificate, privateKey: caKey });
        ca = { public: certificate, privateKey: caKey };
      }
      const operatorIntermediate = inventory.pki.intermediateCa;
      let signer = operatorIntermediate ? { public: operatorIntermediate.certificate, privateKey: operatorIntermediate.key.reveal() } : inventory.pki.intermediate ? facts.intermediate : ca;
      if (intermediateKey) {
        const certificate = issueCertificate({
          commonName: `${inventory.cluster.name} etcd intermediate CA`,
          organization,
          profile: 'intermediate-ca',
          sans: { dns: [], ips: [] },
          validityHours,
          subjectKeyPem: intermediateKey,
          issuer: { certificatePem: ca.public!, keyPem: ca.privateKey! },
        });
        store.write('intermediate', { public: certificate, privateKey: intermediateKey });
        signer = { public: certificate, privateKey: intermediateKey };
      }
      let peerCa = facts.peerCa;
      if (peerCaKey && createPeerCa) {
        const certificate = issueCertificate({ commonName: `${inventory.cluster.name} etcd peer CA`, organization, profile: 'ca', sans: { dns: [], ips: [] }, validityHours, subjectKeyPem: peerCaKey });
        store.write('peer-ca', { public: certificate, privateKey: peerCaKey });
        peerCa = { public: certificate, privateKey: peerCaKey };
        // Recorded with the CA: the stage members start from, which later runs move on (see peer-trust.ts).
        if (!facts.peerTrust) writePeerTrust(store.stateDir, createPeerCa.firstStage);
      }
      const issuer = { certificatePem: signer.public!, keyPem: signer.privateKey! };
      const chain = chainAfterLeaf(inventory, signer);
      issues.forEach((wanted, i) => {
        const key = leafKeys[i]!;
        // A peer certificate is signed by the peer CA alone, with no chain: members trust that CA directly.
        const peer = wanted.id.startsWith('peer/');
        const certificate = issueCertificate({ commonName: wanted.commonName, organization, profile: wanted.profile, sans: wanted.sans, validityHours, subjectKeyPem: key, issuer: peer ? { certificatePem: peerCa.public!, keyPem: peerCa.privateKey! } : issuer });
        store.write(wanted.id, { public: `${certificate}${peer ? '' : chain}`, privateKey: key });
      });
      if (sshKey) store.write('ssh/admin', { public: `${sshKey.publicLine}\n`, privateKey: sshKey.privatePem });
      hostKeyMembers.forEach((member, i) => store.write(`ssh-host/${member}`, { public: `${hostKeys[i]!.publicLine}\n`, privateKey: hostKeys[i]!.privatePem }));
      for (const action of actions) if (action.kind === 'retire-client') store.remove(action.id);
      if (actions.some((action) => action.kind === 'seal-keys')) store.convertKeys('sealed');
      for (const action of actions) if (action.kind === 'cluster-id') writeNewIdentity(store.stateDir, action.adoptsUnmarked);
      if (actions.some((action) => action.kind === 'known-hosts')) {
        writeFileAtomic(store.knownHostsPath, knownHostsOf(inventory, readFacts(inventory, store).hostKeys), PUBLIC_FILE_MODE);
      }
    },
  };
}
