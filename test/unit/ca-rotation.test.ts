import test from 'ava';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { InputError } from '../../tasks/core/errors.ts';
import { Runner } from '../../tasks/core/runner.ts';
import type { Inventory } from '../../tasks/inventory/model.ts';
import {
  type CaRotation,
  checkRotationFlag,
  fingerprintOf,
  type Presented,
  presentedMismatches,
  readCaRotation,
  rolesOf,
  rotationAhead,
  writeCaRotation,
} from '../../tasks/pki/ca-rotation.ts';
import { clusterTrustFrom, materialsFrom, readFacts } from '../../tasks/pki/materials.ts';
import { planPki, rotationRefusal } from '../../tasks/pki/plan.ts';
import { PkiStore } from '../../tasks/pki/store.ts';
import { certificatesIn, chainLeadsTo, isSignedBy } from '../../tasks/pki/x509.ts';
import { endRotation } from '../../tasks/steps/ca-rotation.ts';
import { pkiStep } from '../../tasks/steps/pki.ts';
import { baseDocument, load } from '../helpers/inventory.ts';

const rotation = (target: CaRotation['target'], stage: CaRotation['stage']): CaRotation => ({ target, stage, next: {} });

// Who trusts and who signs what, per stage: the old CA until every member trusts the new, the new alone at the end.
const ROLES = [
  { at: undefined, ca: 'cluster', trust: ['old'], clients: 'old', presented: 'old' },
  { at: rotation('peer', 'present-new'), ca: 'cluster', trust: ['old'], clients: 'old', presented: 'old' },
  { at: rotation('cluster', 'trust-both'), ca: 'cluster', trust: ['old', 'new'], clients: 'old', presented: 'old' },
  { at: rotation('cluster', 'clients-new'), ca: 'cluster', trust: ['old', 'new'], clients: 'new', presented: 'old' },
  { at: rotation('both', 'present-new'), ca: 'cluster', trust: ['old', 'new'], clients: 'new', presented: 'new' },
  { at: rotation('both', 'present-new'), ca: 'peer', trust: ['old', 'new'], clients: 'new', presented: 'new' },
  { at: rotation('both', 'new-only'), ca: 'peer', trust: ['new'], clients: 'new', presented: 'new' },
  { at: rotation('cluster', 'new-only'), ca: 'peer', trust: ['old'], clients: 'old', presented: 'old' },
] as const;

for (const row of ROLES) {
  test(`roles of the ${row.ca} CA at ${row.at ? `${row.at.target} ${row.at.stage}` : 'no rotation'}`, (t) => {
    t.deepEqual(rolesOf(row.at, row.ca), { trust: row.trust, clients: row.clients, presented: row.presented });
  });
}

// What a run takes, from the record and --rotate-ca: to the pause (the cluster CA's), from it to the end, or nothing.
const AHEAD = [
  { recorded: undefined, asked: undefined, expected: undefined },
  {
    recorded: undefined,
    asked: 'cluster',
    expected: { target: 'cluster', from: undefined, stages: ['trust-both', 'clients-new'], finishes: false },
  },
  {
    recorded: undefined,
    asked: 'peer',
    expected: { target: 'peer', from: undefined, stages: ['trust-both', 'present-new', 'new-only'], finishes: true },
  },
  {
    recorded: rotation('both', 'trust-both'),
    asked: 'both',
    expected: { target: 'both', from: 'trust-both', stages: ['clients-new'], finishes: false },
  },
  {
    recorded: rotation('both', 'clients-new'),
    asked: 'both',
    expected: { target: 'both', from: 'clients-new', stages: ['present-new', 'new-only'], finishes: true },
  },
  {
    recorded: rotation('cluster', 'present-new'),
    asked: 'cluster',
    expected: { target: 'cluster', from: 'present-new', stages: ['new-only'], finishes: true },
  },
  {
    recorded: rotation('cluster', 'new-only'),
    asked: 'cluster',
    expected: { target: 'cluster', from: 'new-only', stages: [], finishes: true },
  },
  {
    recorded: rotation('peer', 'present-new'),
    asked: undefined,
    expected: { target: 'peer', from: 'present-new', stages: [], finishes: false },
  },
] as const;

for (const row of AHEAD) {
  test(`a run with ${row.recorded ? `${row.recorded.target} at ${row.recorded.stage}` : 'no rotation'} recorded and --rotate-ca ${row.asked ?? '(none)'}`, (t) => {
    t.deepEqual(rotationAhead(row.recorded, row.asked), row.expected);
  });
}

test('--rotate-ca naming another CA than the rotation under way is bad input, the same one is not', (t) => {
  t.throws(() => checkRotationFlag(rotation('peer', 'trust-both'), 'cluster'), {
    instanceOf: InputError,
    message: /a rotation of the peer CA is under way \(at trust-both\)/,
  });
  t.notThrows(() => checkRotationFlag(rotation('peer', 'trust-both'), 'peer'));
  t.notThrows(() => checkRotationFlag(undefined, 'both'));
});

async function issued(): Promise<{ inventory: Inventory; store: PkiStore; run: () => Promise<string[]> }> {
  const inventory = { ...load(baseDocument()), stateDir: mkdtempSync(join(tmpdir(), 'etcd-kvm-rotation-')) };
  const store = new PkiStore(inventory.stateDir);
  const run = async () => {
    const [result] = await new Runner({ dryRun: false, renderer: 'silent' }).runStep(pkiStep({ inventory, store }));
    if (result?.status === 'failed') throw new Error(result.error);
    return result?.changes?.map((change) => change.summary) ?? [];
  };
  await run();
  return { inventory, store, run };
}

const enter = (stateDir: string, stage: CaRotation['stage']) => {
  const recorded = readCaRotation(stateDir);
  writeCaRotation(stateDir, { target: 'both', stage, next: recorded?.next ?? {} });
};

test('a rotation of both CAs, stage by stage: what is made, issued, trusted and presented', async (t) => {
  const { inventory, store, run } = await issued();
  const old = { ca: store.read('ca').public!, peer: store.read('peer-ca').public! };
  const tlsOf = () => materialsFrom(inventory, readFacts(inventory, store)).members.get('etcd-1')!;

  enter(inventory.stateDir, 'trust-both');
  t.deepEqual(await run(), [
    'create the new CA the rotation moves the cluster to',
    'create the new peer CA the rotation moves the cluster to',
  ]);
  const next = { ca: store.read('ca-next').public!, peer: store.read('peer-ca-next').public! };
  t.deepEqual(readCaRotation(inventory.stateDir)?.next, { cluster: fingerprintOf(next.ca), peer: fingerprintOf(next.peer) });
  t.deepEqual(certificatesIn(tlsOf().caCert!), [...certificatesIn(old.ca), ...certificatesIn(next.ca)]);
  t.deepEqual(certificatesIn(tlsOf().peer!.trustedCa!), [...certificatesIn(old.peer), ...certificatesIn(next.peer)]);
  t.true(isSignedBy(tlsOf().cert!, old.ca), 'members still present the old CA');
  t.deepEqual(certificatesIn(clusterTrustFrom(inventory, store)!), certificatesIn(tlsOf().caCert!), 'the tool trusts what members do');
  t.deepEqual(await run(), [], 'the stage changes nothing more');

  enter(inventory.stateDir, 'clients-new');
  const clients = await run();
  t.true(clients.includes('issue certificate client/root (not signed by the current CA)'), clients.join('\n'));
  t.false(
    clients.some((summary) => summary.includes('member/')),
    clients.join('\n'),
  );
  t.true(isSignedBy(store.read('client/root').public!, next.ca));
  t.true(isSignedBy(tlsOf().cert!, old.ca));

  enter(inventory.stateDir, 'present-new');
  const presented = await run();
  t.true(presented.includes('issue certificate member/etcd-1 (not signed by the current CA)'), presented.join('\n'));
  t.true(presented.includes('issue certificate peer/etcd-1 (not signed by the current CA)'), presented.join('\n'));
  t.true(isSignedBy(tlsOf().cert!, next.ca));
  t.true(isSignedBy(tlsOf().peer!.cert!, next.peer));
  t.is(certificatesIn(tlsOf().caCert!).length, 2, 'both still trusted');

  enter(inventory.stateDir, 'new-only');
  t.deepEqual(await run(), []);
  t.deepEqual(certificatesIn(tlsOf().caCert!), certificatesIn(next.ca));
  t.deepEqual(certificatesIn(tlsOf().peer!.trustedCa!), certificatesIn(next.peer));
  t.false(chainLeadsTo(store.read('client/root').public!, old.ca));
});

test('a new CA lost after members were given certificates it signed is refused, never made again', async (t) => {
  const { inventory, store, run } = await issued();
  enter(inventory.stateDir, 'trust-both');
  await run();
  enter(inventory.stateDir, 'clients-new');
  await run();
  store.remove('ca-next');
  t.throws(() => planPki(inventory, readFacts(inventory, store)), {
    message: /the new CA it recorded \(.+\) is in the state directory no more/,
  });
});

test('a new CA lost while members are only asked to trust it is made again', async (t) => {
  const { inventory, store, run } = await issued();
  enter(inventory.stateDir, 'trust-both');
  await run();
  const lost = store.read('ca-next').public!;
  store.remove('ca-next');
  t.deepEqual(await run(), ['create the new CA the rotation moves the cluster to']);
  t.not(store.read('ca-next').public, lost);
  t.is(readCaRotation(inventory.stateDir)?.next.cluster, fingerprintOf(store.read('ca-next').public!));
});

test("once the new CA took the old one's files, the record read at new-only still finds it", async (t) => {
  const { inventory, store, run } = await issued();
  for (const stage of ['trust-both', 'clients-new', 'present-new', 'new-only'] as const) {
    enter(inventory.stateDir, stage);
    await run();
  }
  const next = store.read('ca-next');
  store.write('ca', { public: next.public!, privateKey: next.privateKey! });
  store.remove('ca-next');
  t.deepEqual(await run(), []);
  t.deepEqual(certificatesIn(materialsFrom(inventory, readFacts(inventory, store)).caCert!), certificatesIn(next.public!));
});

test('a damaged rotation record is bad input, naming the file', (t) => {
  const stateDir = mkdtempSync(join(tmpdir(), 'etcd-kvm-rotation-'));
  writeCaRotation(stateDir, rotation('cluster', 'trust-both'));
  t.deepEqual(readCaRotation(stateDir), rotation('cluster', 'trust-both'));
  writeFileSync(join(stateDir, 'pki', 'ca-rotation.json'), '{"target":"cluster","stage":"sideways","next":{}}');
  t.throws(() => readCaRotation(stateDir), { instanceOf: InputError, message: /ca-rotation\.json is damaged/ });
});

test('the CAs the tool cannot rotate yet are refused with why', (t) => {
  const inventory = load(baseDocument());
  t.is(rotationRefusal(inventory, {}, 'both'), undefined);
  t.is(rotationRefusal({ ...inventory, pki: { ...inventory.pki, intermediate: true } }, {}, 'cluster'), undefined);
  t.regex(
    rotationRefusal({ ...inventory, members: [{ ...inventory.members[0]!, suppliedTls: {} as never }] }, {}, 'cluster')!,
    /members\[\]\.tls/,
  );
  t.regex(rotationRefusal(inventory, { peerTrust: 'trust-both' }, 'peer')!, /move to the peer CA is at trust-both/);
});

test('a new CA without the rotation record is refused: the stage members run is never guessed', async (t) => {
  const { inventory, store, run } = await issued();
  enter(inventory.stateDir, 'trust-both');
  await run();
  rmSync(join(inventory.stateDir, 'pki', 'ca-rotation.json'));
  t.throws(() => planPki(inventory, readFacts(inventory, store)), {
    message: /pki\/ca-next\.crt and pki\/peer-ca-next\.crt: a rotation's new CA, but pki\/ca-rotation\.json is missing/,
  });
});

// Before a stage moves on, what members present on their client ports against what the record says they run.
const PRESENTED = [
  { at: rotation('cluster', 'trust-both'), seen: ['old', 'old', 'old'], mismatches: [] },
  { at: rotation('both', 'present-new'), seen: ['new', 'new', 'new'], mismatches: [] },
  {
    at: rotation('both', 'present-new'),
    seen: ['new', 'old', 'new'],
    mismatches: ["etcd-2 presents a certificate of the old CA, though the record says every member runs present-new (the new CA's)"],
  },
  {
    at: rotation('cluster', 'clients-new'),
    seen: ['old', 'neither', { error: 'connect ECONNREFUSED' }],
    mismatches: [
      "etcd-2 presents a certificate of neither CA, though the record says every member runs clients-new (the old CA's)",
      'etcd-3: its client port did not answer (connect ECONNREFUSED)',
    ],
  },
] as const;

for (const row of PRESENTED) {
  test(`members presenting ${row.seen.map((seen) => (typeof seen === 'object' ? 'no answer' : seen)).join(', ')} at ${row.at.stage}`, (t) => {
    const seen = new Map(row.seen.map((presented, i): [string, Presented] => [`etcd-${i + 1}`, presented]));
    t.deepEqual(presentedMismatches(row.at, seen), row.mismatches);
  });
}

test('with pki.intermediate: the new CA signs an intermediate of its own, which signs the new leaves; roots alone are trusted; the end moves both', async (t) => {
  const doc = baseDocument();
  const inventory = {
    ...load({ ...doc, pki: { ...(doc.pki as object), intermediate: true } }),
    stateDir: mkdtempSync(join(tmpdir(), 'etcd-kvm-rotation-')),
  };
  const store = new PkiStore(inventory.stateDir);
  const run = async () => {
    const [result] = await new Runner({ dryRun: false, renderer: 'silent' }).runStep(pkiStep({ inventory, store }));
    if (result?.status === 'failed') throw new Error(result.error);
    return result?.changes?.map((change) => change.summary) ?? [];
  };
  await run();
  const oldRoot = store.read('ca').public!;
  enter(inventory.stateDir, 'trust-both');
  t.deepEqual(await run(), [
    'create the new CA the rotation moves the cluster to',
    'issue the intermediate CA the new CA signs',
    'create the new peer CA the rotation moves the cluster to',
  ]);
  const newRoot = store.read('ca-next').public!;
  t.true(isSignedBy(store.read('intermediate-next').public!, newRoot));
  for (const stage of ['clients-new', 'present-new', 'new-only'] as const) {
    enter(inventory.stateDir, stage);
    await run();
  }
  const member = store.read('member/etcd-1').public!;
  t.deepEqual(
    certificatesIn(member).slice(1),
    certificatesIn(store.read('intermediate-next').public!),
    'the new intermediate after the leaf',
  );
  t.true(chainLeadsTo(member, newRoot));
  t.false(chainLeadsTo(member, oldRoot));
  t.deepEqual(
    certificatesIn(materialsFrom(inventory, readFacts(inventory, store)).caCert!),
    certificatesIn(newRoot),
    'roots alone are trusted',
  );
  t.regex(endRotation(store), /^the rotation of the cluster CA and the peer CA ended: pki\/ca\.crt is the new CA/);
  t.is(store.read('ca').public, newRoot);
  t.false(existsSync(join(inventory.stateDir, 'pki', 'intermediate-next.crt')));
  t.deepEqual(await run(), [], 'after the end, the new root and intermediate are the ones in place');
});
