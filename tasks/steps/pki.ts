import { StepError } from '../core/errors.ts';
import { CONTROL_NODE } from '../core/runner.ts';
import type { Change, Step } from '../core/step.ts';
import type { Inventory } from '../inventory/model.ts';
import { generateRsaKey, generateSshKey } from '../pki/keys.ts';
import { readFacts } from '../pki/materials.ts';
import { caOf, planPki, PkiRefusal, type PkiAction, type PkiFacts } from '../pki/plan.ts';
import type { PkiStore } from '../pki/store.ts';
import { issueCertificate } from '../pki/x509.ts';

/** The cluster's CA, member certificates, root client certificate and the tool's SSH key, in the state directory. */
export function pkiStep(inventory: Inventory, store: PkiStore): Step<PkiFacts, PkiAction> {
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
        return planPki(inventory, facts);
      } catch (error) {
        if (error instanceof PkiRefusal) throw new StepError(CONTROL_NODE, 'pki', `refusing to continue: ${error.message}`);
        throw error;
      }
    },
    async apply(changes: Change<PkiAction>[], _target, facts) {
      const actions = changes.map((change) => change.action);
      let ca = caOf(inventory, facts);
      if (actions.some((action) => action.kind === 'create-ca')) {
        const key = await generateRsaKey(inventory.pki.key_length);
        const certificate = issueCertificate({
          commonName: `${inventory.cluster.name} etcd CA`,
          organization,
          profile: 'ca',
          sans: { dns: [], ips: [] },
          validityHours,
          subjectKeyPem: key,
        });
        store.write('ca', { public: certificate, privateKey: key });
        ca = { public: certificate, privateKey: key };
      }
      const issuer = { certificatePem: ca.public!, keyPem: ca.privateKey! };
      // Keys are generated concurrently on libuv's thread pool; signing is quick and sequential.
      await Promise.all(
        actions.map(async (action) => {
          if (action.kind === 'issue') {
            const key = await generateRsaKey(inventory.pki.key_length);
            const { certificate: wanted } = action;
            const certificate = issueCertificate({ commonName: wanted.commonName, organization, profile: wanted.profile, sans: wanted.sans, validityHours, subjectKeyPem: key, issuer });
            store.write(wanted.id, { public: certificate, privateKey: key });
          } else if (action.kind === 'ssh-key') {
            const pair = await generateSshKey(`etcd-kvm@${inventory.cluster.name}`);
            store.write(action.id, { public: `${pair.publicLine}\n`, privateKey: pair.privatePem });
          }
        }),
      );
    },
  };
}
