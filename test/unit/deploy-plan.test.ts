import test from 'ava';
import { InputError } from '../../tasks/core/errors.ts';
import { buildPlan, describePlan, phaseTitle, type DeployRecord, type PlannedPhase, type PlanOptions } from '../../tasks/deploy/plan.ts';
import type { Inventory } from '../../tasks/inventory/model.ts';
import type { DeployStep } from '../../tasks/steps/deploy-step.ts';
import { DEPLOY_STEPS, stepRunning } from '../../tasks/steps/registry.ts';
import { baseDocument, load } from '../helpers/inventory.ts';

/**
 * The deploy's order as a decision table: the gather stage's record and the run's options in, the
 * phases out (each phase's title, `-` when --tags leaves it out, and on whom it acts).
 */

/** Four members, etcd-4 listed last (the one that joins or leaves in the rows below); restore.enabled where asked (the plan reads only that). */
function fourMembers(restore = false, binaries: 'image' | 'release' = 'image'): Inventory {
  const doc = baseDocument();
  doc.etcd = { version: 'v3.5.30', binaries };
  doc.members.push({
    name: 'etcd-4',
    libvirt_networks: [{ network_name: 'net', ip: '10.10.0.14', prefix_length: 24, gateway: '10.10.0.1' }],
  });
  const inventory = load(doc);
  return restore ? { ...inventory, restore: { ...inventory.restore, enabled: true } } : inventory;
}

const ALL = ['etcd-1', 'etcd-2', 'etcd-3', 'etcd-4'];
const record = (over: Partial<DeployRecord> = {}): DeployRecord => ({
  formed: true,
  voting: ALL,
  joiners: [],
  departures: [],
  peerStage: 'peer-only',
  rebuilds: [],
  ...over,
});

/** Members built from image a.qcow2 while the inventory names images/b.qcow2, in the order the gather stage put them (leader last). */
const onNewImage = (...members: string[]) =>
  members.map((member) => ({ member, from: 'a.qcow2', to: 'images/b.qcow2', how: 'rebuild' as const }));
const REBUILD = (n: string) => [`rebuild etcd-${n}`, `render@${n}`, `guest@${n}`, `health@${n}`];
/** Members without a data disk on a new image: replaced, not rebuilt. */
const replacedOnNewImage = (...members: string[]) => onNewImage(...members).map((change) => ({ ...change, how: 'replace' as const }));
const REPLACE = (n: string) => [
  `replace etcd-${n}`,
  `join etcd-${n}`,
  `render@${n}`,
  `owner@${n}`,
  `volumes@${n}`,
  `cloud-init@${n}`,
  `domain@${n}`,
  `guest@${n}`,
  `promote etcd-${n}`,
  'health@1234',
];
const options = (over: Partial<PlanOptions> = {}): PlanOptions => ({ dryRun: false, ...over });
/** A CA rotation's stage rolled over every member. */
const STAGE = (stage: string) => [`ca rotation ${stage}`, 'render@1234', 'cloud-init@1234', 'guest@1234', 'health@1234'];

/** A phase as one short token: title, `-` when skipped, `@` and its members for a pass. */
const token = (phase: PlannedPhase): string => {
  const skipped = 'skip' in phase && phase.skip ? '-' : '';
  const on =
    'pass' in phase ? `@${phase.pass.members.map((name) => name.replace('etcd-', '')).join('')}${phase.pass.formed ? '' : '(new)'}` : '';
  return `${skipped}${phaseTitle(phase)}${on}`;
};

const MAIN_ALL = [
  'render@1234',
  'owner@1234',
  'volumes@1234',
  'cloud-init@1234',
  'domain@1234',
  'guest@1234',
  'health@1234',
  'auth@1',
  'users@1',
];
const JOIN_4 = ['join etcd-4', 'render@4', 'owner@4', 'volumes@4', 'cloud-init@4', 'domain@4', 'guest@4', 'promote etcd-4'];

const rows: {
  name: string;
  record: DeployRecord;
  options?: Partial<PlanOptions>;
  restore?: boolean;
  binaries?: 'release';
  phases: string[];
}[] = [
  { name: 'a converged cluster: one pass over everyone, nothing after it', record: record(), phases: MAIN_ALL },
  {
    name: 'a first deploy: rendered `new`, then `formed` renders everyone as existing',
    record: record({ formed: false }),
    phases: [...MAIN_ALL.map((t) => `${t}(new)`), 'formed@1234'],
  },
  {
    name: 'a first deploy with restore: the restore between domain and guest',
    record: record({ formed: false }),
    restore: true,
    phases: [
      'render@1234(new)',
      'owner@1234(new)',
      'volumes@1234(new)',
      'cloud-init@1234(new)',
      'domain@1234(new)',
      'restore@1234(new)',
      'guest@1234(new)',
      'health@1234(new)',
      'auth@1(new)',
      'users@1(new)',
      'formed@1234',
    ],
  },
  {
    name: 'a full outage: formed.json says formed, so nothing renders `new` and no `formed` phase',
    record: record({ formed: true }),
    restore: true,
    phases: [
      'render@1234',
      'owner@1234',
      'volumes@1234',
      'cloud-init@1234',
      'domain@1234',
      'restore@1234',
      'guest@1234',
      'health@1234',
      'auth@1',
      'users@1',
    ],
  },
  {
    name: 'a grow: the main pass over the voting members, then etcd-4 joins alone, then `formed`',
    record: record({ voting: ['etcd-1', 'etcd-2', 'etcd-3'], joiners: ['etcd-4'] }),
    phases: [...MAIN_ALL.map((t) => t.replace('1234', '123')), ...JOIN_4, 'health@1234', 'formed@1234'],
  },
  {
    name: 'a shrink: the departure first, then the members that stay',
    record: record({ voting: ['etcd-1', 'etcd-2', 'etcd-3'], departures: [{ departure: 'leave', member: 'etcd-4' }] }),
    phases: ['leave etcd-4', ...MAIN_ALL.map((t) => t.replace('1234', '123'))],
  },
  {
    name: 'a replace: removed first, then the others converge, then it joins again empty',
    record: record({
      voting: ['etcd-1', 'etcd-3', 'etcd-4'],
      joiners: ['etcd-2'],
      departures: [{ departure: 'replace', member: 'etcd-2' }],
    }),
    phases: [
      'replace etcd-2',
      ...MAIN_ALL.map((t) => t.replace('1234', '134')),
      'join etcd-2',
      'render@2',
      'owner@2',
      'volumes@2',
      'cloud-init@2',
      'domain@2',
      'guest@2',
      'promote etcd-2',
      'health@1234',
      'formed@1234',
    ],
  },
  {
    name: 'two replaced (the quorum lost and recovered): both depart, etcd-3 is booted while etcd-2 joins, then joins itself without booting again',
    record: record({
      voting: ['etcd-1', 'etcd-4'],
      joiners: ['etcd-2', 'etcd-3'],
      departures: [
        { departure: 'replace', member: 'etcd-2' },
        { departure: 'replace', member: 'etcd-3' },
      ],
    }),
    phases: [
      'replace etcd-2',
      'replace etcd-3',
      ...MAIN_ALL.map((t) => t.replace('1234', '14')),
      'render@3',
      'owner@3',
      'volumes@3',
      'cloud-init@3',
      'domain@3',
      'join etcd-2',
      'render@2',
      'owner@2',
      'volumes@2',
      'cloud-init@2',
      'domain@2',
      'guest@2',
      'promote etcd-2',
      'health@124',
      'join etcd-3',
      'guest@3',
      'promote etcd-3',
      'health@1234',
      'formed@1234',
    ],
  },
  {
    name: '--limit: only the members named; a member marked absent does not leave in a limited run',
    record: record({ voting: ['etcd-1', 'etcd-2', 'etcd-3'], departures: [{ departure: 'leave', member: 'etcd-4' }] }),
    options: { limit: ['etcd-2'] },
    phases: [...MAIN_ALL.slice(0, 7).map((t) => t.replace('1234', '2')), 'auth@', 'users@'],
  },
  {
    name: '--tags guest: the others are listed as skipped; pki, owner and render still run',
    record: record(),
    options: { tags: ['guest'] },
    phases: [
      'render@1234',
      'owner@1234',
      '-volumes@1234',
      '-cloud-init@1234',
      '-domain@1234',
      'guest@1234',
      '-health@1234',
      '-auth@1',
      '-users@1',
    ],
  },
  {
    name: '--tags guest on a cluster forming: `formed` still runs (it used to be skipped by every --tags run)',
    record: record({ formed: false }),
    options: { tags: ['guest'] },
    phases: [
      'render@1234',
      'owner@1234',
      '-volumes@1234',
      '-cloud-init@1234',
      '-domain@1234',
      'guest@1234',
      '-health@1234',
      '-auth@1',
      '-users@1',
    ]
      .map((t) => `${t}(new)`)
      .concat('formed@1234'),
  },
  {
    name: 'departures in the order the record gives (members known down first); a dry-run judges each as if those before had left',
    record: record({
      voting: ['etcd-1', 'etcd-2'],
      departures: [
        { departure: 'leave', member: 'etcd-4' },
        { departure: 'leave', member: 'etcd-3' },
      ],
    }),
    options: { dryRun: true },
    phases: ['leave etcd-4', 'leave etcd-3', ...MAIN_ALL.map((t) => t.replace('1234', '12'))],
  },
  {
    name: 'the peer port one stage behind: after the pass, each stage still to go is rolled, then health',
    record: record({ peerStage: 'present-peer' }),
    phases: [...MAIN_ALL, 'peer trust', 'render@1234', 'cloud-init@1234', 'guest@1234', 'health@1234'],
  },
  {
    name: 'the peer port in a dry-run: one line saying what follows',
    record: record({ peerStage: 'trust-both' }),
    options: { dryRun: true },
    phases: [...MAIN_ALL, 'peer trust'],
  },
  {
    name: 'the peer port in a limited run: it waits for a run over every member',
    record: record({ peerStage: 'trust-both' }),
    options: { limit: ['etcd-1'] },
    phases: MAIN_ALL.map((t) => t.replace('1234', '1')),
  },
  {
    name: '--rotate-ca cluster: trust-both and clients-new rolled after the pass, then the run pauses for the bundles',
    record: record(),
    options: { rotateCa: 'cluster' },
    phases: [...MAIN_ALL, ...STAGE('trust-both'), ...STAGE('clients-new')],
  },
  {
    name: '--rotate-ca cluster at the pause: present-new and new-only rolled, then the end',
    record: record({ caRotation: { target: 'cluster', stage: 'clients-new', next: {} } }),
    options: { rotateCa: 'cluster' },
    phases: [...MAIN_ALL, ...STAGE('present-new'), ...STAGE('new-only'), 'ca rotation finish'],
  },
  {
    name: '--rotate-ca peer: no pause, every stage and the end in one run',
    record: record(),
    options: { rotateCa: 'peer' },
    phases: [...MAIN_ALL, ...STAGE('trust-both'), ...STAGE('present-new'), ...STAGE('new-only'), 'ca rotation finish'],
  },
  {
    name: 'a rotation killed at new-only, run again: its end alone (the pass rendered new-only already)',
    record: record({ caRotation: { target: 'both', stage: 'new-only', next: {} } }),
    options: { rotateCa: 'both' },
    phases: [...MAIN_ALL, 'ca rotation finish'],
  },
  {
    name: 'a rotation under way, a run without --rotate-ca: the stage held, and said',
    record: record({ caRotation: { target: 'both', stage: 'present-new', next: {} } }),
    phases: [...MAIN_ALL, 'ca rotation held'],
  },
  {
    name: '--rotate-ca in a dry-run: one line saying every stage that follows',
    record: record(),
    options: { rotateCa: 'both', dryRun: true },
    phases: [...MAIN_ALL, 'ca rotation trust-both'],
  },
  { name: '--render-only: the render alone', record: record(), options: { renderOnly: '/tmp/rendered' }, phases: ['render@1234'] },
  {
    name: "release binaries on a formed cluster: the upgrade's pre-flight and snapshot before anything changes, the cluster version after health",
    record: record(),
    binaries: 'release',
    phases: ['upgrade@1234', ...MAIN_ALL.slice(0, 7), 'cluster-version@1234', ...MAIN_ALL.slice(7)],
  },
  {
    name: 'release binaries on a first deploy: no upgrade (nothing runs yet)',
    record: record({ formed: false }),
    binaries: 'release',
    phases: [...MAIN_ALL.map((t) => `${t}(new)`), 'formed@1234'],
  },
  {
    name: 'release binaries with a joiner: the upgrade in the main pass only',
    record: record({ voting: ['etcd-1', 'etcd-2', 'etcd-3'], joiners: ['etcd-4'] }),
    binaries: 'release',
    phases: [
      ...['upgrade', 'render', 'owner', 'volumes', 'cloud-init', 'domain', 'guest', 'health', 'cluster-version'].map((t) => `${t}@123`),
      'auth@1',
      'users@1',
      ...JOIN_4,
      'health@1234',
      'formed@1234',
    ],
  },
  {
    name: 'release binaries with the guest step not selected: the upgrade is skipped with it',
    record: record(),
    binaries: 'release',
    options: { skipTags: ['guest'] },
    phases: ['-upgrade@1234', ...MAIN_ALL.slice(0, 5), '-guest@1234', 'health@1234', '-cluster-version@1234', ...MAIN_ALL.slice(7)],
  },
  {
    name: 'release binaries in a limited run: the cluster version is not waited for (the others may still run the previous minor)',
    record: record(),
    binaries: 'release',
    options: { limit: ['etcd-2'] },
    phases: ['upgrade@2', ...MAIN_ALL.slice(0, 7).map((t) => t.replace('1234', '2')), '-cluster-version@2', 'auth@', 'users@'],
  },
  {
    name: 'a new base image: after the main pass, each member rebuilt strictly one after another, its guest and health before the next',
    record: record({ rebuilds: onNewImage('etcd-2', 'etcd-3', 'etcd-1') }),
    phases: [...MAIN_ALL, ...REBUILD('2'), ...REBUILD('3'), ...REBUILD('1')],
  },
  {
    name: 'a new base image, members without a data disk: each replaced strictly one after another (leaves, joins again, promoted, the cluster healthy), the leader last',
    record: record({ rebuilds: replacedOnNewImage('etcd-2', 'etcd-3', 'etcd-1') }),
    phases: [...MAIN_ALL, ...REPLACE('2'), ...REPLACE('3'), ...REPLACE('1'), 'formed@1234'],
  },
  {
    name: 'a new base image, one member with a data disk and one without: rebuilt and replaced in the gather order',
    record: record({ rebuilds: [...replacedOnNewImage('etcd-3'), ...onNewImage('etcd-1')] }),
    phases: [...MAIN_ALL, ...REPLACE('3'), ...REBUILD('1'), 'formed@1234'],
  },
  {
    name: 'a new base image, a member without a data disk, without the domain step: the replacement is skipped, saying why',
    record: record({ rebuilds: replacedOnNewImage('etcd-2') }),
    options: { skipTags: ['domain'] },
    phases: [...MAIN_ALL.slice(0, 4), '-domain@1234', ...MAIN_ALL.slice(5), '-rebuild etcd-2'],
  },
  {
    name: 'a new base image, a member without a data disk while another joins: its replacement waits for the next run (one learner at a time)',
    record: record({ voting: ['etcd-1', 'etcd-2', 'etcd-3'], joiners: ['etcd-4'], rebuilds: replacedOnNewImage('etcd-2') }),
    phases: [...MAIN_ALL.map((t) => t.replace('1234', '123')), '-rebuild etcd-2', ...JOIN_4, 'health@1234', 'formed@1234'],
  },
  {
    name: 'a new base image, a member without a data disk while another is replaced: its replacement waits for the next run',
    record: record({
      voting: ['etcd-1', 'etcd-2', 'etcd-3'],
      departures: [{ departure: 'replace', member: 'etcd-4' }],
      joiners: ['etcd-4'],
      rebuilds: replacedOnNewImage('etcd-2'),
    }),
    phases: [
      'replace etcd-4',
      ...MAIN_ALL.map((t) => t.replace('1234', '123')),
      '-rebuild etcd-2',
      ...JOIN_4,
      'health@1234',
      'formed@1234',
    ],
  },
  {
    name: 'a new base image, the only voting member without a data disk: no replacement, the rebuild step refuses it',
    record: record({ voting: ['etcd-1'], rebuilds: replacedOnNewImage('etcd-1') }),
    options: { limit: ['etcd-1'] },
    phases: [...MAIN_ALL.slice(0, 7).map((t) => t.replace('1234', '1')), 'auth@1', 'users@1', 'rebuild etcd-1'],
  },
  {
    name: 'a new base image with a joiner: members rebuilt before the joiner joins (it is made on the new image)',
    record: record({ voting: ['etcd-1', 'etcd-2', 'etcd-3'], joiners: ['etcd-4'], rebuilds: onNewImage('etcd-1') }),
    phases: [...MAIN_ALL.map((t) => t.replace('1234', '123')), ...REBUILD('1'), ...JOIN_4, 'health@1234', 'formed@1234'],
  },
  {
    name: 'a new base image in a limited run: only the members --limit names',
    record: record({ rebuilds: onNewImage('etcd-2', 'etcd-3') }),
    options: { limit: ['etcd-3'] },
    phases: [...MAIN_ALL.slice(0, 7).map((t) => t.replace('1234', '3')), 'auth@', 'users@', ...REBUILD('3')],
  },
  {
    name: 'a new base image with --skip-tags rebuild: no rebuild',
    record: record({ rebuilds: onNewImage('etcd-2') }),
    options: { skipTags: ['rebuild'] },
    phases: MAIN_ALL,
  },
  {
    name: 'a new base image without the guest step: the rebuild is skipped, saying why',
    record: record({ rebuilds: onNewImage('etcd-2') }),
    options: { skipTags: ['guest'] },
    phases: [...MAIN_ALL.slice(0, 5), '-guest@1234', ...MAIN_ALL.slice(6), '-rebuild etcd-2'],
  },
];

for (const row of rows) {
  test(`plan: ${row.name}`, (t) => {
    const plan = buildPlan(fourMembers(row.restore, row.binaries), options(row.options), row.record);
    // Every plan starts with pki, and every one but --render-only's ends in the members' comparison (its own tests are below).
    const compared = row.options?.renderOnly === undefined;
    t.deepEqual(plan.map(token), ['pki', ...row.phases, ...(compared ? ['consistency'] : [])]);
  });
}

/** The step a phase is part of: its runner's, but a replacement onto a new image is the rebuild step's (run through depart and join). */
const stepOf = (phase: PlannedPhase): string => (phase.step === 'depart' && phase.image ? 'rebuild' : stepRunning(phase.step).id);
const planOf = (row: (typeof rows)[number]) => buildPlan(fourMembers(row.restore, row.binaries), options(row.options), row.record);

test("every plan of the table takes its steps in the registry's order: each step's first phase after those of the steps listed before it", (t) => {
  const rank = new Map<string, number>(DEPLOY_STEPS.map((step, i) => [step.id, i]));
  for (const row of rows) {
    const firsts = [...new Set(planOf(row).map(stepOf))];
    t.deepEqual(
      firsts,
      [...firsts].sort((a, b) => rank.get(a)! - rank.get(b)!),
      row.name,
    );
  }
});

test("every step of the registry is run by a phase of some plan of the table, or is one of the gather stage's (which run before the plan)", (t) => {
  const planned = new Set(rows.flatMap((row) => planOf(row).map((phase) => stepRunning(phase.step).id)));
  const gathered = DEPLOY_STEPS.filter((step: DeployStep) => step.run === undefined).map((step) => step.id);
  t.deepEqual(gathered, ['cluster', 'members', 'formation', 'networks']);
  t.deepEqual(
    DEPLOY_STEPS.map((step) => step.id).filter((id) => !planned.has(id) && !gathered.includes(id)),
    [],
  );
});

test('plan: with release binaries on a formed cluster, auth and users run only if nothing failed before (no auth change during a half-done roll)', (t) => {
  const clean = (binaries: 'image' | 'release', formed: boolean) =>
    buildPlan(fourMembers(false, binaries), options(), record({ formed }))
      .filter((phase) => phase.step === 'auth' || phase.step === 'users')
      .map((phase) => phase.onlyIfClean === true);
  t.deepEqual(clean('release', true), [true, true]);
  t.deepEqual(clean('release', false), [false, false]);
  t.deepEqual(clean('image', true), [false, false]);
});

test('plan: a replacement onto a new image departs alone (never judged with others), and it and its join run only while nothing has failed', (t) => {
  const plan = buildPlan(fourMembers(), options(), record({ rebuilds: replacedOnNewImage('etcd-2', 'etcd-1') }));
  const chain = plan.slice(1 + MAIN_ALL.length);
  t.true(chain.every((phase) => phase.onlyIfClean === true));
  const departs = chain.filter((phase) => phase.step === 'depart');
  t.deepEqual(
    departs.map((phase) => [phase.member, phase.departure, phase.assumedRemoved, phase.image?.to]),
    [
      ['etcd-2', 'replace', [], 'images/b.qcow2'],
      ['etcd-1', 'replace', [], 'images/b.qcow2'],
    ],
  );
  // etcd-1 joins again beside the others, etcd-2 back among them.
  t.deepEqual(
    chain.flatMap((phase) => (phase.step === 'join' ? [[phase.member, phase.before]] : [])),
    [
      ['etcd-2', ['etcd-1', 'etcd-3', 'etcd-4']],
      ['etcd-1', ['etcd-2', 'etcd-3', 'etcd-4']],
    ],
  );
  t.regex(describePlan(departs)[0]!, /etcd-2 from image a\.qcow2 onto images\/b\.qcow2: no data disk, so it leaves and joins again empty/);
});

test('plan: a rebuild and the phases after it run only while nothing has failed, and say the images from and to', (t) => {
  const plan = buildPlan(fourMembers(), options(), record({ rebuilds: onNewImage('etcd-2') }));
  // The rebuild, its render, guest and health, then the members compared.
  const chain = plan.slice(1 + MAIN_ALL.length);
  t.deepEqual(
    chain.map((phase) => phase.onlyIfClean),
    [true, true, true, true, true],
  );
  t.is(chain.filter((phase) => phase.step === 'health' && phase.caughtUp).length, 1);
  t.regex(describePlan(chain)[0]!, /^rebuild etcd-2 +etcd-2 from image a\.qcow2 onto images\/b\.qcow2, data disk kept/);
});

test('plan: a dry-run forms nothing and adds no member: `formed` says so', (t) => {
  const formedNote = (over: Partial<DeployRecord>) =>
    buildPlan(fourMembers(), options({ dryRun: true }), record(over)).flatMap((phase) => (phase.step === 'formed' ? [phase.note] : []));
  t.deepEqual(formedNote({ formed: false }), ['a dry-run forms nothing']);
  t.deepEqual(formedNote({ voting: ['etcd-1', 'etcd-2', 'etcd-3'], joiners: ['etcd-4'] }), ['a dry-run adds no member']);
  t.deepEqual(
    buildPlan(fourMembers(), options(), record({ formed: false })).flatMap((phase) => (phase.step === 'formed' ? [phase.note] : [])),
    [undefined],
  );
});

test('plan: a join refuses --tags that leave out a step it needs, before anything runs', (t) => {
  const grow = record({ voting: ['etcd-1', 'etcd-2', 'etcd-3'], joiners: ['etcd-4'] });
  t.throws(() => buildPlan(fourMembers(), options({ skipTags: ['cloud-init'] }), grow), {
    instanceOf: InputError,
    message: /^etcd-4 must join the cluster, which needs the steps volumes, cloud-init, domain, guest/,
  });
  t.notThrows(() => buildPlan(fourMembers(), options({ skipTags: ['users'] }), grow));
});

test('plan: each joiner joins beside the voting members and the joiners before it', (t) => {
  const grow = record({ voting: ['etcd-1', 'etcd-2'], joiners: ['etcd-3', 'etcd-4'] });
  const joins = buildPlan(fourMembers(), options(), grow).flatMap((phase) =>
    phase.step === 'join' ? [`${phase.member}<${phase.before.join(',')}`] : [],
  );
  t.deepEqual(joins, ['etcd-3<etcd-1,etcd-2', 'etcd-4<etcd-1,etcd-2,etcd-3']);
});

test('plan: every phase of a join needs that joiner and the ones before it to have joined; the main pass and the boots ahead need none', (t) => {
  const grow = record({ voting: ['etcd-1', 'etcd-2'], joiners: ['etcd-3', 'etcd-4'] });
  const needs = buildPlan(fourMembers(), options(), grow).map((phase) => `${phaseTitle(phase)}:${(phase.needsJoined ?? []).join(',')}`);
  t.deepEqual(
    needs.slice(0, 10),
    ['pki', ...MAIN_ALL].map((token) => `${token.split('@')[0]}:`),
  );
  const boot = ['render', 'owner', 'volumes', 'cloud-init', 'domain'];
  t.deepEqual(
    needs.slice(10, 15),
    boot.map((title) => `${title}:`),
  );
  const joinOf = (joiner: string, needed: string, titles: readonly string[]) =>
    [`join ${joiner}`, ...titles, 'guest', `promote ${joiner}`, 'health'].map((title) => `${title}:${needed}`);
  t.deepEqual(needs.slice(15, 28), [...joinOf('etcd-3', 'etcd-3', boot), ...joinOf('etcd-4', 'etcd-3,etcd-4', [])]);
  t.is(needs[28], 'formed:');
});

test('plan: a joiner booted ahead is rendered in the pass it joins in (its seed is the one its turn uses), marked booted ahead, and says so', (t) => {
  const grow = record({ voting: ['etcd-1', 'etcd-2'], joiners: ['etcd-3', 'etcd-4'] });
  const plan = buildPlan(fourMembers(), options(), grow);
  const passesOf4 = plan.flatMap((phase) =>
    'pass' in phase && phase.pass.members.join() === 'etcd-4' ? [JSON.stringify(phase.pass)] : [],
  );
  t.is(new Set(passesOf4).size, 1);
  t.deepEqual(JSON.parse(passesOf4[0]!), {
    cluster: ['etcd-1', 'etcd-2', 'etcd-3', 'etcd-4'],
    members: ['etcd-4'],
    joining: true,
    formed: true,
    bootedAhead: true,
  });
  const ahead = plan.filter((phase) => phase.bootedAheadOf !== undefined);
  t.deepEqual(ahead.map(token), ['render@4', 'owner@4', 'volumes@4', 'cloud-init@4', 'domain@4']);
  t.regex(
    describePlan(ahead)[4]!,
    /^domain +etcd-4 \(joining after etcd-3; booted ahead\) · cluster etcd-1, etcd-2, etcd-3, etcd-4 · existing$/,
  );
  // A single joiner boots in its own turn, after it was added.
  const one = buildPlan(fourMembers(), options(), record({ voting: ['etcd-1', 'etcd-2', 'etcd-3'], joiners: ['etcd-4'] }));
  t.false(one.some((phase) => phase.bootedAheadOf !== undefined));
});

test('plan: the peer stages still to go, each once, in order, and only when nothing failed before', (t) => {
  const plan = buildPlan(fourMembers(), options(), record({ peerStage: 'trust-both' }));
  const stages = plan.flatMap((phase) => (phase.step === 'peer-trust' ? [phase.stage] : []));
  t.deepEqual(stages, ['present-peer', 'peer-only']);
  t.true(plan.filter((phase) => phase.onlyIfClean).length === 11 && plan.slice(1 + MAIN_ALL.length).every((phase) => phase.onlyIfClean));
});

test('phase titles are the ones a run prints (and the e2e output is matched against): the peer stages as `peer trust`', (t) => {
  const titles = buildPlan(fourMembers(), options(), record({ peerStage: 'present-peer' })).map(phaseTitle);
  t.deepEqual(titles.slice(-6), ['peer trust', 'render', 'cloud-init', 'guest', 'health', 'consistency']);
});

test('the members compared last, only in a run where nothing failed; a dry-run says it compares nothing', (t) => {
  const last = (dryRun: boolean) => buildPlan(fourMembers(), options({ dryRun }), record()).at(-1);
  t.deepEqual(last(false), { step: 'consistency', onlyIfClean: true });
  t.deepEqual(last(true), { step: 'consistency', note: 'a dry-run changes nothing, so it compares nothing' });
  t.is(
    describePlan([last(false)!])[0],
    "consistency       once a member changed in this run (or with --accept-mismatch): every voting member's HashKV at one revision, equal",
  );
});

test('--list-phases prints one line per phase, saying on whom and how', (t) => {
  const lines = describePlan(
    buildPlan(
      fourMembers(),
      options({ tags: ['guest'] }),
      record({ voting: ['etcd-1', 'etcd-2', 'etcd-3'], departures: [{ departure: 'leave', member: 'etcd-4' }] }),
    ),
  );
  t.regex(lines[0]!, /^pki {15}the CA, certificates and the cluster's ID: run first, before the gather stage/);
  t.is(lines[1], 'leave etcd-4      etcd-4, one at a time, never below a healthy quorum');
  t.is(lines[2], 'render            etcd-1, etcd-2, etcd-3 · cluster etcd-1, etcd-2, etcd-3 · existing');
  t.is(lines[4], 'volumes           skipped: not selected by --tags / --skip-tags');
});
