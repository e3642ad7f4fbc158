import test from 'ava';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Runner } from '../../tasks/core/runner.ts';
import type { Inventory } from '../../tasks/inventory/model.ts';
import { identityFrom, materialsFrom, readFacts } from '../../tasks/pki/materials.ts';
import {
  nextPeerStage,
  PEER_COMMON_NAME,
  PEER_STAGES,
  peerStageOf,
  readPeerTrust,
  writePeerTrust,
  type PeerTrustStage,
} from '../../tasks/pki/peer-trust.ts';
import { identityOf, planPki } from '../../tasks/pki/plan.ts';
import { InputError } from '../../tasks/core/errors.ts';
import { PkiStore } from '../../tasks/pki/store.ts';
import { certificatesIn, inspectCertificate, isSignedBy } from '../../tasks/pki/x509.ts';
import { etcdEnvironment } from '../../tasks/render/etcd.ts';
import { pkiStep } from '../../tasks/steps/pki.ts';
import { baseDocument, load } from '../helpers/inventory.ts';

/** A state directory with the PKI a first deploy makes. */
async function issued(): Promise<{ inventory: Inventory; store: PkiStore }> {
  const inventory = { ...load(baseDocument()), stateDir: mkdtempSync(join(tmpdir(), 'etcd-kvm-peer-')) };
  const store = new PkiStore(inventory.stateDir);
  const [result] = await new Runner({ dryRun: false, renderer: 'silent' }).runStep(pkiStep({ inventory, store }));
  if (result?.status !== 'changed') throw new Error(result?.error ?? 'the pki step changed nothing');
  return { inventory, store };
}

test('a new cluster starts with the peer CA alone: peer certificates signed by it, one common name, the cluster CA not trusted on the peer port', async (t) => {
  const { inventory, store } = await issued();
  t.is(readPeerTrust(inventory.stateDir), 'peer-only');
  const peerCa = store.read('peer-ca').public!;
  const ca = store.read('ca').public!;
  const peer = store.read('peer/etcd-1').public!;
  t.true(isSignedBy(peer, peerCa));
  t.false(isSignedBy(peer, ca));
  t.is(inspectCertificate(peer).commonName, PEER_COMMON_NAME);
  t.deepEqual(inspectCertificate(peer).sans, inspectCertificate(store.read('member/etcd-1').public!).sans);
  const tls = materialsFrom(inventory, readFacts(inventory, store)).members.get('etcd-1')!;
  t.deepEqual(certificatesIn(tls.peer!.trustedCa!), certificatesIn(peerCa));
  t.is(tls.peer!.cert, peer);
  t.is(tls.peer!.allowedCn, PEER_COMMON_NAME);
  const env = Object.fromEntries(etcdEnvironment(inventory, inventory.members[0]!, 'new', tls.peer!.allowedCn));
  t.is(env.ETCD_PEER_TRUSTED_CA_FILE, '/etc/etcd/tls/peer-ca.crt');
  t.is(env.ETCD_PEER_CERT_FILE, '/etc/etcd/tls/peer.crt');
  t.is(env.ETCD_PEER_CERT_ALLOWED_CN, PEER_COMMON_NAME);
  t.is(env.ETCD_TRUSTED_CA_FILE, '/etc/etcd/tls/ca.crt', 'clients still go by the cluster CA');
});

test('a state directory from before the peer CA: the pki step makes it and records the first stage of the move', async (t) => {
  const { inventory, store } = await issued();
  // As an earlier version left it: member certificates, no peer CA, no record.
  for (const path of ['pki/peer-ca.crt', 'pki/peer-ca.key', 'pki/peers', 'pki/peer-trust.json'])
    rmSync(join(inventory.stateDir, path), { recursive: true });
  const summaries = planPki(inventory, readFacts(inventory, store)).map((change) => change.summary);
  t.true(
    summaries.includes(
      "create the peer CA, which signs members' peer certificates only (members deployed before move to it one stage at a time)",
    ),
    summaries.join('\n'),
  );
  t.true(summaries.includes('issue certificate peer/etcd-2 (missing)'));
  const [result] = await new Runner({ dryRun: false, renderer: 'silent' }).runStep(pkiStep({ inventory, store }));
  t.is(result?.status, 'changed', result?.error);
  t.is(readPeerTrust(inventory.stateDir), 'trust-both');
});

// Each stage, rendered: what the peer port trusts and presents. A stage starts only once every member runs the one before.
const STAGES: {
  stage: PeerTrustStage;
  trustsClusterCa: boolean;
  presents: 'server' | 'peer';
  allowedCn: string | undefined;
  next: PeerTrustStage | undefined;
}[] = [
  { stage: 'trust-both', trustsClusterCa: true, presents: 'server', allowedCn: undefined, next: 'present-peer' },
  { stage: 'present-peer', trustsClusterCa: true, presents: 'peer', allowedCn: undefined, next: 'peer-only' },
  { stage: 'peer-only', trustsClusterCa: false, presents: 'peer', allowedCn: PEER_COMMON_NAME, next: undefined },
];

test('the stages of the move, rendered for a member', async (t) => {
  const { inventory, store } = await issued();
  t.deepEqual(
    STAGES.map((row) => row.stage),
    [...PEER_STAGES],
  );
  for (const row of STAGES) {
    writePeerTrust(inventory.stateDir, row.stage);
    const tls = materialsFrom(inventory, readFacts(inventory, store)).members.get('etcd-2')!;
    const trusted = certificatesIn(tls.peer!.trustedCa!);
    t.is(trusted.includes(certificatesIn(store.read('ca').public!)[0]!), row.trustsClusterCa, row.stage);
    t.true(trusted.includes(certificatesIn(store.read('peer-ca').public!)[0]!), row.stage);
    t.is(tls.peer!.cert, store.read(row.presents === 'server' ? 'member/etcd-2' : 'peer/etcd-2').public, row.stage);
    t.is(tls.peer!.key?.reveal(), store.read(row.presents === 'server' ? 'member/etcd-2' : 'peer/etcd-2').privateKey, row.stage);
    t.is(tls.peer!.allowedCn, row.allowedCn, row.stage);
    t.is(nextPeerStage(row.stage), row.next);
  }
});

test('a damaged record stops the run rather than guess a stage', (t) => {
  const stateDir = mkdtempSync(join(tmpdir(), 'etcd-kvm-peer-'));
  writePeerTrust(stateDir, 'peer-only');
  t.is(readPeerTrust(stateDir), 'peer-only');
  rmSync(join(stateDir, 'pki', 'peer-trust.json'));
  t.is(readPeerTrust(stateDir), undefined);
  writePeerTrust(stateDir, 'bogus' as PeerTrustStage);
  t.throws(() => readPeerTrust(stateDir), { message: /peer-trust\.json is damaged/ });
});

test("the owner's identity is read without opening a key, and agrees with the PKI facts: made, not made, deployed before marks", async (t) => {
  const { inventory, store } = await issued();
  t.deepEqual(identityFrom(inventory, store), identityOf(inventory, readFacts(inventory, store)));
  t.truthy(identityFrom(inventory, store).id);
  rmSync(join(inventory.stateDir, 'cluster-id.json'));
  t.deepEqual(identityFrom(inventory, store), { cluster: inventory.cluster.name, adoptsUnmarked: true });
  t.deepEqual(identityFrom(inventory, store), identityOf(inventory, readFacts(inventory, store)));
  const empty = { ...inventory, stateDir: mkdtempSync(join(tmpdir(), 'etcd-kvm-peer-')) };
  t.deepEqual(identityFrom(empty, new PkiStore(empty.stateDir)), { cluster: inventory.cluster.name, adoptsUnmarked: false });
});

// Facts in, the stage out (or refused): only a record says which stage members run once the peer CA exists.
const STAGE_FACTS: {
  recorded: PeerTrustStage | undefined;
  membersDeployedBefore: boolean;
  peerCaMade: boolean;
  stage: PeerTrustStage | 'refused';
}[] = [
  { recorded: undefined, membersDeployedBefore: false, peerCaMade: false, stage: 'peer-only' },
  { recorded: undefined, membersDeployedBefore: true, peerCaMade: false, stage: 'trust-both' },
  { recorded: undefined, membersDeployedBefore: true, peerCaMade: true, stage: 'refused' },
  { recorded: undefined, membersDeployedBefore: false, peerCaMade: true, stage: 'refused' },
  { recorded: 'present-peer', membersDeployedBefore: true, peerCaMade: true, stage: 'present-peer' },
  { recorded: 'peer-only', membersDeployedBefore: true, peerCaMade: true, stage: 'peer-only' },
  { recorded: 'trust-both', membersDeployedBefore: true, peerCaMade: false, stage: 'trust-both' },
];

test('the peer stage from the facts: recorded, or first; a peer CA without its record is refused, never guessed', (t) => {
  for (const row of STAGE_FACTS) {
    const known = { ...row, stateDir: '/state' };
    if (row.stage === 'refused') {
      const error = t.throws(() => peerStageOf(known), { instanceOf: InputError }, JSON.stringify(row));
      t.regex(error!.message, /^\/state\/pki\/peer-trust\.json is missing, though the peer CA was made/);
    } else t.is(peerStageOf(known), row.stage, JSON.stringify(row));
  }
});

test('the record lost from a deployed state directory: its members are rendered for no stage (exit 2 with what to do), and nothing writes it back', async (t) => {
  const { inventory, store } = await issued();
  rmSync(join(inventory.stateDir, 'pki', 'peer-trust.json'));
  const error = t.throws(() => materialsFrom(inventory, readFacts(inventory, store)), { instanceOf: InputError });
  t.regex(error!.message, /peer-trust\.json is missing, though the peer CA was made/);
  t.true(error!.problems.some((hint) => hint.includes('ETCD_PEER_CERT_ALLOWED_CN=etcd-kvm-peer')));
  const [result] = await new Runner({ dryRun: false, renderer: 'silent' }).runStep(pkiStep({ inventory, store }));
  // The pki step has nothing to issue and writes no record: the deploy's gather stage is where the run stops (exit 2).
  t.is(result?.status, 'ok', result?.error);
  t.is(readPeerTrust(inventory.stateDir), undefined);
});
