import test from 'ava';
import { patienceOf } from '../../tasks/core/runner.ts';
import { XMLParser } from 'fast-xml-parser';
import { loadInventory } from '../../tasks/inventory/load.ts';
import { compareDomainXml } from '../../tasks/libvirt/domain-xml.ts';
import { judgeOwnership, parseOwnerMark, type Ownership } from '../../tasks/libvirt/ownership.ts';
import type { ProbeAnswer } from '../../tasks/libvirt/virsh.ts';
import { OWNER_NAMESPACE, ownerElement, renderDomainXml } from '../../tasks/render/domain.ts';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CONTROL_NODE } from '../../tasks/core/step.ts';
import { readIdentity, writeNewIdentity } from '../../tasks/pki/identity.ts';
import { adoptionStep } from '../../tasks/steps/ownership.ts';

/** Whose domain it is, as a table: virsh's answers (as recorded from libvirt 9.0 in the lab) in, a verdict out. */

const ID = '3c5e9a1e-6f0d-4b7e-a2c4-1d9f8e7b6a50';
const us = { cluster: 'lab', id: ID, adoptsUnmarked: false };
const ok = (output: string): ProbeAnswer => ({ code: 0, output });
const failed = (output: string): ProbeAnswer => ({ code: 1, output });

// Recorded answers.
const NO_DOMAIN = failed("error: failed to get domain 'etcd-1'");
const NO_MARK = failed('error: metadata not found: Requested metadata element is not present');
const markOf = (cluster: string, id: string) => ok(`<owner cluster="${cluster}" id="${id}"/>`);
const LEGACY_TITLE = ok('etcd member etcd-1 of cluster lab');

interface Case {
  name: string;
  answers: { mark: ProbeAnswer; title: ProbeAnswer; state: ProbeAnswer };
  identity?: Partial<typeof us> & { adoptsUnmarked?: boolean };
  adopt?: boolean;
  verdict: Ownership['kind'];
  reason?: RegExp;
  running?: boolean;
}

const cases: Case[] = [
  { name: 'no domain: free to define', answers: { mark: NO_DOMAIN, title: NO_DOMAIN, state: NO_DOMAIN }, verdict: 'absent' },
  {
    name: 'marked with our ID: ours',
    answers: { mark: markOf('lab', ID), title: LEGACY_TITLE, state: ok('running') },
    verdict: 'ours',
    running: true,
  },
  {
    name: 'marked with our ID, shut off',
    answers: { mark: markOf('lab', ID), title: LEGACY_TITLE, state: ok('shut off') },
    verdict: 'ours',
    running: false,
  },
  {
    name: "another cluster's mark: refused, naming the owner",
    answers: { mark: markOf('shop', 'f00d'), title: ok('etcd member etcd-1 of cluster shop'), state: ok('running') },
    verdict: 'refused',
    reason: /^domain etcd-1 belongs to cluster shop \(id f00d\), not to this one \(lab, id 3c5e9a1e-6f0d-4b7e-a2c4-1d9f8e7b6a50\)/,
  },
  {
    name: 'the same cluster name from another state directory (another ID): refused',
    answers: { mark: markOf('lab', '00000000-0000-4000-8000-000000000000'), title: LEGACY_TITLE, state: ok('running') },
    verdict: 'refused',
    reason: /belongs to cluster lab \(id 00000000-0000-4000-8000-000000000000\).*run with the state directory that deployed it/,
  },
  {
    name: "another cluster's mark is refused even with --adopt",
    answers: { mark: markOf('shop', 'f00d'), title: LEGACY_TITLE, state: ok('running') },
    adopt: true,
    verdict: 'refused',
    reason: /belongs to cluster shop/,
  },
  {
    name: 'a new state directory (no ID yet) meets a marked domain: refused',
    answers: { mark: markOf('lab', ID), title: LEGACY_TITLE, state: ok('running') },
    identity: { id: undefined },
    verdict: 'refused',
    reason: /id not made yet/,
  },
  {
    name: 'unmarked, made by hand: refused, --adopt named',
    answers: { mark: NO_MARK, title: ok(''), state: ok('running') },
    verdict: 'refused',
    reason: /^domain etcd-1 exists without this tool's mark; .*run with --adopt/,
  },
  {
    name: 'unmarked, titled for this cluster, but the state directory is new: refused (it may be another deployment of the same name)',
    answers: { mark: NO_MARK, title: LEGACY_TITLE, state: ok('running') },
    verdict: 'refused',
    reason: /without this tool's mark \(titled for cluster lab\)/,
  },
  {
    name: 'unmarked, titled for this cluster by an earlier version, state directory from before marks: marked, no restart',
    answers: { mark: NO_MARK, title: LEGACY_TITLE, state: ok('running') },
    identity: { adoptsUnmarked: true },
    verdict: 'to-mark',
    running: true,
  },
  {
    name: 'unmarked, titled for another cluster, state directory from before marks: refused',
    answers: { mark: NO_MARK, title: ok('etcd member etcd-1 of cluster shop'), state: ok('shut off') },
    identity: { adoptsUnmarked: true },
    verdict: 'refused',
    reason: /titled for cluster shop/,
  },
  {
    name: 'unmarked, adopted with --adopt: marked',
    answers: { mark: NO_MARK, title: ok(''), state: ok('shut off') },
    adopt: true,
    verdict: 'to-mark',
    running: false,
  },
];

for (const row of cases) {
  test(`ownership: ${row.name}`, (t) => {
    const verdict = judgeOwnership('etcd-1', row.answers, { ...us, ...row.identity }, row.adopt ?? false);
    t.is(verdict.kind, row.verdict);
    if (row.reason) t.regex(verdict.kind === 'refused' ? verdict.reason : '', row.reason);
    if (row.running !== undefined) t.is('running' in verdict ? verdict.running : undefined, row.running);
  });
}

test('ownership: an answer that is neither a mark nor "not found" is an error, not a verdict', (t) => {
  t.throws(
    () => judgeOwnership('etcd-1', { mark: failed('error: Failed to connect socket'), title: ok(''), state: ok('running') }, us, false),
    { message: /cannot read the metadata of domain etcd-1: error: Failed to connect socket/ },
  );
  t.throws(
    () => judgeOwnership('etcd-1', { mark: NO_MARK, title: ok(''), state: failed('error: Disconnected from qemu:///system') }, us, false),
    { message: /cannot read the state of domain etcd-1/ },
  );
});

test('the rendered domain carries the mark in its metadata, and parseOwnerMark reads back what virsh metadata --set writes', (t) => {
  const lab = loadInventory('inventories/lab.yaml');
  const xml = renderDomainXml(us, lab.members[0]!);
  const parsed = new XMLParser({ ignoreAttributes: false, attributeNamePrefix: '' }).parse(xml) as {
    domain: { metadata: Record<string, Record<string, string>> };
  };
  const mark = parsed.domain.metadata['etcd-kvm:owner']!;
  t.is(mark['xmlns:etcd-kvm'], OWNER_NAMESPACE);
  t.is(mark.cluster, 'lab');
  t.is(mark.id, ID);
  t.deepEqual(parseOwnerMark(ownerElement({ cluster: 'a "b" <c>', id: ID, adoptsUnmarked: false })), { cluster: 'a "b" <c>', id: ID });
  t.is(parseOwnerMark(''), undefined);
});

test('the mark is not part of the domain comparison: a domain marked live compares equal, so marking never restarts a member', (t) => {
  const lab = loadInventory('inventories/lab.yaml');
  const marked = renderDomainXml(us, lab.members[0]!);
  const unmarked = marked.replace(/\s*<metadata>[\s\S]*<\/metadata>/, '');
  t.notRegex(unmarked, /metadata/);
  t.true(compareDomainXml(marked, unmarked).same);
  // The comparison still sees everything else.
  t.false(compareDomainXml(marked, unmarked.replace("<vcpu placement='static'>1</vcpu>", "<vcpu placement='static'>2</vcpu>")).same);
});

test('a migrated state directory stops adopting unmarked domains once every member is marked, and only then', async (t) => {
  const stateDir = mkdtempSync(join(tmpdir(), 'etcd-kvm-adoption-'));
  writeNewIdentity(stateDir, true);
  const id = readIdentity(stateDir, 'lab')!.id;
  const plans = async (everyMarked: boolean) => {
    const step = adoptionStep({ stateDir, cluster: 'lab', everyDomainMarked: () => everyMarked });
    return step.plan(await step.check(CONTROL_NODE, patienceOf(false)), CONTROL_NODE).map((change) => change.summary);
  };
  t.deepEqual(await plans(false), [], 'a member still unmarked (or refused): keep adopting');
  t.deepEqual(await plans(true), [
    "stop taking unmarked domains titled for cluster lab as its own (cluster-id.json): every member's domain carries the mark now",
  ]);
  const step = adoptionStep({ stateDir, cluster: 'lab', everyDomainMarked: () => true });
  await step.apply([], CONTROL_NODE, await step.check(CONTROL_NODE, patienceOf(false)));
  t.deepEqual(readIdentity(stateDir, 'lab'), { cluster: 'lab', id, adoptsUnmarked: false }, 'the same ID, adoption off');
  t.deepEqual(await plans(true), []);
});
