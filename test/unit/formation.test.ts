import test from 'ava';
import { mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  formationPath,
  formationToRecord,
  formationWithoutAnswer,
  readFormation,
  writeFormation,
  type FormationRecord,
} from '../../tasks/etcd/formation.ts';
import { domainUuid } from '../../tasks/libvirt/domain-xml.ts';
import { CONTROL_NODE } from '../../tasks/core/step.ts';
import { formationFact, formationStep, type FormationState } from '../../tasks/steps/formation.ts';

/** Has the cluster formed when no member answers, and what formed.json should say: facts in, verdicts and changes out. */

const U1 = '3855fbc2-7380-4f9c-965f-124c0ac91a03';
const U2 = '5b0e4c2a-9d1f-4e7b-8a36-0c2d1e3f4a5b';
const U3 = 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d';
const NEW = 'ffffffff-0000-4000-8000-000000000001';
const MEMBERS = ['etcd-1', 'etcd-2', 'etcd-3'];
const record: FormationRecord = { recorded: '2026-11-20T10:00:00.000Z', domains: { 'etcd-1': U1, 'etcd-2': U2, 'etcd-3': U3 } };
/** null: the hypervisor says there is no such domain; undefined or left out: its hypervisor did not answer. */
const live = (entries: Record<string, string | null | undefined>) => new Map(Object.entries(entries));

const verdicts: {
  name: string;
  isInitializing: boolean;
  record?: FormationRecord;
  live: Record<string, string | null | undefined>;
  formed: boolean;
  why: RegExp;
}[] = [
  {
    name: 'a first deploy: no record, no VM',
    isInitializing: true,
    live: {},
    formed: false,
    why: /^not formed yet: members start as new$/,
  },
  { name: 'is_initializing: false says it exists', isInitializing: false, live: {}, formed: true, why: /is_initializing: false/ },
  {
    name: 'every etcd down, the VMs it formed on still there',
    isInitializing: true,
    record,
    live: { 'etcd-1': U1, 'etcd-2': U2, 'etcd-3': U3 },
    formed: true,
    why: /etcd-1, etcd-2, etcd-3 are VMs of the cluster recorded as formed on 2026-11-20 \(formed\.json\): members stay existing/,
  },
  {
    name: 'one VM of it left (the others made anew or gone)',
    isInitializing: true,
    record,
    live: { 'etcd-1': NEW, 'etcd-2': U2, 'etcd-3': null },
    formed: true,
    why: /no member answers, but etcd-2 is a VM of the cluster/,
  },
  {
    name: 'every VM made anew or gone since (the lab torn down, a restore): a new cluster',
    isInitializing: true,
    record,
    live: { 'etcd-1': NEW, 'etcd-2': null, 'etcd-3': null },
    formed: false,
    why: /none of the VMs of the cluster recorded on 2026-11-20 is left, so members start as new/,
  },
  {
    name: 'a VM that cannot be seen (its hypervisor does not answer) is not known gone',
    isInitializing: true,
    record,
    live: { 'etcd-1': NEW, 'etcd-2': null, 'etcd-3': undefined },
    formed: true,
    why: /the VMs of etcd-3 cannot be seen; the cluster was recorded as formed on 2026-11-20/,
  },
  {
    name: 'no hypervisor answers',
    isInitializing: true,
    record,
    live: { 'etcd-1': undefined, 'etcd-2': undefined, 'etcd-3': undefined },
    formed: true,
    why: /the VMs of etcd-1, etcd-2, etcd-3 cannot be seen/,
  },
  {
    name: 'a recorded member the inventory no longer has is no evidence',
    isInitializing: true,
    record,
    live: { 'etcd-1': null, 'etcd-2': null },
    formed: false,
    why: /members start as new/,
  },
];
for (const c of verdicts) {
  test(`without an answer: ${c.name}`, (t) => {
    const verdict = formationWithoutAnswer(c.isInitializing, c.record, live(c.live));
    t.is(verdict.formed, c.formed);
    t.regex(verdict.why, c.why);
  });
}

const planOf = (state: FormationState, members = MEMBERS) =>
  formationStep({ stateDir: '/nonexistent', members, domainUuids: async () => state.seen }).plan(state, CONTROL_NODE);

const plans: {
  name: string;
  record?: FormationRecord;
  seen: Record<string, string | null | undefined>;
  members?: string[];
  summary?: RegExp;
  domains?: Record<string, string>;
}[] = [
  {
    name: 'first seen formed: recorded',
    seen: { 'etcd-1': U1, 'etcd-2': U2, 'etcd-3': U3 },
    summary: /^record that the cluster has formed, on the VMs of etcd-1, etcd-2, etcd-3 \(formed\.json\)$/,
    domains: record.domains,
  },
  { name: 'equal: nothing', record, seen: { 'etcd-1': U1, 'etcd-2': U2, 'etcd-3': U3 } },
  {
    name: 'a replaced member: its new VM recorded',
    record,
    seen: { 'etcd-1': U1, 'etcd-2': NEW, 'etcd-3': U3 },
    summary: /: a new VM for etcd-2$/,
    domains: { 'etcd-1': U1, 'etcd-2': NEW, 'etcd-3': U3 },
  },
  { name: 'a member not seen (its hypervisor down) keeps its entry', record, seen: { 'etcd-1': U1, 'etcd-2': undefined, 'etcd-3': U3 } },
  {
    name: 'a member whose domain is gone loses its entry',
    record,
    seen: { 'etcd-1': U1, 'etcd-2': U2, 'etcd-3': null },
    summary: /^record the cluster's VMs \(formed\.json\)$/,
    domains: { 'etcd-1': U1, 'etcd-2': U2 },
  },
  {
    name: 'a member gone from the inventory is dropped',
    record,
    seen: { 'etcd-1': U1, 'etcd-2': U2 },
    members: ['etcd-1', 'etcd-2'],
    summary: /^record the cluster's VMs \(formed\.json\)$/,
    domains: { 'etcd-1': U1, 'etcd-2': U2 },
  },
  { name: 'nothing seen and no record: nothing to write', seen: {} },
];
for (const c of plans) {
  test(`record: ${c.name}`, (t) => {
    const changes = planOf({ record: c.record, seen: live(c.seen) }, c.members);
    if (!c.summary) return t.deepEqual(changes, []);
    t.is(changes.length, 1);
    t.regex(changes[0]!.summary, c.summary);
    t.deepEqual(changes[0]!.action, c.domains);
  });
}

test('without an answer the formation fact decides from the record and the VMs seen', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-formation-'));
  writeFormation(dir, record.domains);
  const verdict = await formationFact({ stateDir: dir, isInitializing: true, domainUuids: async () => live({ 'etcd-3': U3 }) }).ask(
    CONTROL_NODE,
  );
  t.true(verdict.formed);
  t.false(
    (
      await formationFact({
        stateDir: mkdtempSync(join(tmpdir(), 'etcd-kvm-formation-')),
        isInitializing: true,
        domainUuids: async () => live({}),
      }).ask(CONTROL_NODE)
    ).formed,
  );
});

test('formationToRecord: seen wins, the record fills in what was not seen, a gone domain and a member not in the inventory are dropped', (t) => {
  t.deepEqual(formationToRecord(record, ['etcd-1', 'etcd-2', 'etcd-3', 'etcd-4'], live({ 'etcd-1': NEW, 'etcd-2': null, 'etcd-4': U2 })), {
    'etcd-1': NEW,
    'etcd-3': U3,
    'etcd-4': U2,
  });
});

test('formed.json: written public (no secret in it) and read back; a damaged one is an error naming it, never guessed', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-formation-'));
  t.is(readFormation(dir), undefined);
  writeFormation(dir, record.domains, new Date('2026-11-21T08:00:00Z'));
  t.deepEqual(readFormation(dir), { recorded: '2026-11-21T08:00:00.000Z', domains: record.domains });
  t.is(statSync(formationPath(dir)).mode & 0o777, 0o644);
  for (const damaged of ['{', '{"recorded": "x"}', '{"recorded": "x", "domains": {"etcd-1": 5}}']) {
    writeFileSync(formationPath(dir), damaged);
    t.throws(() => readFormation(dir), { message: new RegExp(`${formationPath(dir)} is damaged; restore it`) });
  }
  t.is(readFileSync(formationPath(dir), 'utf8'), '{"recorded": "x", "domains": {"etcd-1": 5}}', 'left as it was');
});

test("domainUuid reads libvirt's dominfo, recorded from the lab", (t) => {
  t.is(domainUuid(readFileSync('test/fixtures/virsh-dominfo-etcd-1.txt', 'utf8')), U1);
  t.is(domainUuid('error: failed to get domain'), undefined);
});
