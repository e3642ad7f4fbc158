import test from 'ava';
import { preflight, type MemberVersionAnswer, type UpgradeFacts, type V2StoreVerdict } from '../../tasks/upgrade/preflight.ts';
import { parseVersion, stepBetween, type EtcdVersion } from '../../tasks/upgrade/version.ts';

const v = (text: string): EtcdVersion => parseVersion(text)!;

/** Three members, etcd-1 (id a1) leading; each runs the version given. */
function members(
  versions: [string, string, string],
  overrides: Partial<Record<string, Partial<MemberVersionAnswer>>> = {},
): MemberVersionAnswer[] {
  return versions.map((version, i) => {
    const name = `etcd-${i + 1}`;
    return { name, id: `a${i + 1}`, leader: 'a1', isLearner: false, version, ...overrides[name] } as MemberVersionAnswer;
  });
}

const facts = (answers: MemberVersionAnswer[], extra: Partial<UpgradeFacts> = {}): UpgradeFacts => ({
  members: answers,
  alarms: [],
  clusterVersion: '3.4.0',
  agreement: { agree: true, detail: 'equal on 3 voting members at revision 40' },
  ...extra,
});

const cleanV2 = (names: string[]): Map<string, V2StoreVerdict> => new Map(names.map((name) => [name, { clean: true }]));

interface Row {
  name: string;
  facts: UpgradeFacts;
  to: string;
  kind: 'converged' | 'roll' | 'refused';
  pending?: string[];
  step?: string;
  /** The checks that fail, by name. */
  failed?: string[];
  /** Words the refusal must carry (every refused row has them). */
  says?: RegExp;
}

const rows: Row[] = [
  {
    name: 'every member on the target: converged',
    facts: facts(members(['3.5.16', '3.5.16', '3.5.16'])),
    to: 'v3.5.16',
    kind: 'converged',
  },
  {
    name: '3.4 → 3.5: a minor step, every member to roll',
    facts: facts(members(['3.4.23', '3.4.23', '3.4.23'])),
    to: 'v3.5.16',
    kind: 'roll',
    step: 'minor',
    pending: ['etcd-1', 'etcd-2', 'etcd-3'],
  },
  {
    name: 'a patch step',
    facts: facts(members(['3.5.16', '3.5.16', '3.5.16']), { clusterVersion: '3.5.0' }),
    to: 'v3.5.30',
    kind: 'roll',
    step: 'patch',
    pending: ['etcd-1', 'etcd-2', 'etcd-3'],
  },
  {
    name: 'a roll a killed run left half done resumes with the members not yet rolled',
    facts: facts(members(['3.4.23', '3.5.16', '3.4.23'])),
    to: 'v3.5.16',
    kind: 'roll',
    step: 'minor',
    pending: ['etcd-1', 'etcd-3'],
  },
  {
    name: 'two minors at once: refused',
    facts: facts(members(['3.4.23', '3.4.23', '3.4.23'])),
    to: 'v3.6.5',
    kind: 'refused',
    failed: ['a step etcd supports'],
    says: /moves 2 minors/,
  },
  {
    name: 'back to 3.4 once the cluster version is 3.5: refused',
    facts: facts(members(['3.5.16', '3.5.16', '3.5.16']), { clusterVersion: '3.5.0' }),
    to: 'v3.4.23',
    kind: 'refused',
    failed: ['a step etcd supports'],
    says: /below the cluster version 3\.5/,
  },
  {
    name: 'back to 3.4 while the cluster version is still 3.4 (a roll undone): allowed',
    facts: facts(members(['3.5.16', '3.4.23', '3.4.23']), { clusterVersion: '3.4.0' }),
    to: 'v3.4.23',
    kind: 'roll',
    step: 'back-minor',
    pending: ['etcd-1'],
  },
  {
    name: 'back with the cluster version unknown: refused',
    facts: facts(members(['3.5.16', '3.4.23', '3.4.23']), { clusterVersion: undefined }),
    to: 'v3.4.23',
    kind: 'refused',
    failed: ['a step etcd supports'],
    says: /cluster version is unknown/,
  },
  {
    name: 'a patch back within the minor: allowed',
    facts: facts(members(['3.5.30', '3.5.30', '3.5.30']), { clusterVersion: '3.5.0' }),
    to: 'v3.5.16',
    kind: 'roll',
    step: 'back-patch',
    pending: ['etcd-1', 'etcd-2', 'etcd-3'],
  },
  {
    name: 'a member down: refused, naming it',
    facts: facts([...members(['3.4.23', '3.4.23', '3.4.23']).slice(0, 2), { name: 'etcd-3', error: 'connect ECONNREFUSED' }]),
    to: 'v3.5.16',
    kind: 'refused',
    failed: ['every member healthy'],
    says: /etcd-3: connect ECONNREFUSED/,
  },
  {
    name: "a member down while the others already run the target: nothing moves (starting it is the guest step's)",
    facts: facts([...members(['3.5.16', '3.5.16', '3.5.16']).slice(0, 2), { name: 'etcd-3', error: 'deadline exceeded' }]),
    to: 'v3.5.16',
    kind: 'converged',
    failed: ['every member healthy'],
  },
  {
    name: 'every member down (a power cut): nothing moves',
    facts: facts(['etcd-1', 'etcd-2', 'etcd-3'].map((name) => ({ name, error: 'connect ECONNREFUSED' }))),
    to: 'v3.5.16',
    kind: 'converged',
    failed: ['every member healthy', 'one leader'],
  },
  {
    name: 'a member without a leader: refused',
    facts: facts(members(['3.4.23', '3.4.23', '3.4.23'], { 'etcd-2': { leader: '0' } })),
    to: 'v3.5.16',
    kind: 'refused',
    failed: ['every member healthy'],
    says: /etcd-2: no leader/,
  },
  {
    name: 'members disagreeing on the leader: refused',
    facts: facts(members(['3.4.23', '3.4.23', '3.4.23'], { 'etcd-3': { leader: 'a3' } })),
    to: 'v3.5.16',
    kind: 'refused',
    failed: ['one leader'],
    says: /2 leaders/,
  },
  {
    name: 'an alarm: refused',
    facts: facts(members(['3.4.23', '3.4.23', '3.4.23']), { alarms: ['NOSPACE on a2'] }),
    to: 'v3.5.16',
    kind: 'refused',
    failed: ['no alarm'],
    says: /NOSPACE on a2/,
  },
  {
    name: 'a learner: refused',
    facts: facts(members(['3.4.23', '3.4.23', '3.4.23'], { 'etcd-3': { isLearner: true } })),
    to: 'v3.5.16',
    kind: 'refused',
    failed: ['no learner'],
    says: /etcd-3 is a learner/,
  },
  {
    name: 'three versions at once: refused',
    facts: facts(members(['3.5.16', '3.5.30', '3.5.31']), { clusterVersion: '3.5.0' }),
    to: 'v3.5.33',
    kind: 'refused',
    failed: ['one version'],
    says: /3 versions besides 3\.5\.33/,
  },
  {
    name: '3.5 → 3.6 below 3.5.32: refused',
    facts: facts(members(['3.5.30', '3.5.30', '3.5.30']), { clusterVersion: '3.5.0', v2store: cleanV2(['etcd-1', 'etcd-2', 'etcd-3']) }),
    to: 'v3.6.5',
    kind: 'refused',
    failed: ['every member at 3.5.32 or later'],
    says: /etcd-1 runs 3\.5\.30/,
  },
  {
    name: '3.6 → 3.7 from 3.6.11: a minor step, every member to roll',
    facts: facts(members(['3.6.11', '3.6.11', '3.6.11']), { clusterVersion: '3.6.0' }),
    to: 'v3.7.0',
    kind: 'roll',
    step: 'minor',
    pending: ['etcd-1', 'etcd-2', 'etcd-3'],
  },
  {
    name: '3.6 → 3.7 below 3.6.11 (etcd 3.7 upgrade guide): refused, naming the member',
    facts: facts(members(['3.6.10', '3.6.10', '3.6.10']), { clusterVersion: '3.6.0' }),
    to: 'v3.7.0',
    kind: 'refused',
    failed: ['every member at 3.6.11 or later'],
    says: /etcd-3 runs 3\.6\.10: set etcd\.version to the latest 3\.6 patch \(at least 3\.6\.11\)/,
  },
  {
    name: 'a roll into 3.7 under way (one member moved): the others must still be at 3.6.11',
    facts: facts(members(['3.7.0', '3.6.11', '3.6.11']), { clusterVersion: '3.6.0' }),
    to: 'v3.7.0',
    kind: 'roll',
    step: 'minor',
    pending: ['etcd-2', 'etcd-3'],
  },
  {
    name: "members whose data differ are not rolled: refused with the comparison's words",
    facts: facts(members(['3.4.23', '3.4.23', '3.4.23']), {
      agreement: { agree: false, detail: "the members' data differ at revision 40: etcd-1 7, etcd-2 7, etcd-3 9" },
    }),
    to: 'v3.5.16',
    kind: 'refused',
    failed: ['the members agree'],
    says: /the members' data differ at revision 40: etcd-1 7, etcd-2 7, etcd-3 9: find the member whose data differs/,
  },
  {
    name: 'the members not compared: refused (a roll never starts on an unknown)',
    facts: facts(members(['3.4.23', '3.4.23', '3.4.23']), { agreement: undefined }),
    to: 'v3.5.16',
    kind: 'refused',
    failed: ['the members agree'],
    says: /not compared/,
  },
  {
    name: '3.5 → 3.6 with a v2 store not checked yet: refused',
    facts: facts(members(['3.5.33', '3.5.33', '3.5.33']), { clusterVersion: '3.5.0' }),
    to: 'v3.6.5',
    kind: 'refused',
    failed: ['etcdutl check v2store clean'],
    says: /not checked/,
  },
  {
    name: '3.5 → 3.6 with custom data in one v2 store: refused',
    facts: facts(members(['3.5.33', '3.5.33', '3.5.33']), {
      clusterVersion: '3.5.0',
      v2store: new Map<string, V2StoreVerdict>([
        ...cleanV2(['etcd-1', 'etcd-3']),
        ['etcd-2', { clean: false, detail: 'detected custom v2store data' }],
      ]),
    }),
    to: 'v3.6.5',
    kind: 'refused',
    failed: ['etcdutl check v2store clean'],
    says: /etcd-2: detected custom v2store data/,
  },
  {
    name: '3.5 → 3.6 where etcdutl could not check a member: refused, saying why',
    facts: facts(members(['3.5.33', '3.5.33', '3.5.33']), {
      clusterVersion: '3.5.0',
      v2store: new Map<string, V2StoreVerdict>([
        ...cleanV2(['etcd-1', 'etcd-2']),
        ['etcd-3', { unchecked: 'etcdutl check v2store exited 1: command not found' }],
      ]),
    }),
    to: 'v3.6.5',
    kind: 'refused',
    failed: ['etcdutl check v2store clean'],
    says: /etcd-3: not checked \(etcdutl check v2store exited 1: command not found\): the check runs the etcdutl of the release/,
  },
  {
    name: '3.5.30 → 3.6 with clean v2 stores: refused on the patch alone, the refusal listing what passed',
    facts: facts(members(['3.5.30', '3.5.30', '3.5.30']), { clusterVersion: '3.5.0', v2store: cleanV2(['etcd-1', 'etcd-2', 'etcd-3']) }),
    to: 'v3.6.5',
    kind: 'refused',
    failed: ['every member at 3.5.32 or later'],
    says: /\npassed: .*etcdutl check v2store clean \(no custom data in the v2 store of etcd-1, etcd-2, etcd-3\)/,
  },
  {
    name: '3.5.33 → 3.6 with clean v2 stores: a minor step',
    facts: facts(members(['3.5.33', '3.6.5', '3.5.33']), { clusterVersion: '3.5.0', v2store: cleanV2(['etcd-1', 'etcd-3']) }),
    to: 'v3.6.5',
    kind: 'roll',
    step: 'minor',
    pending: ['etcd-1', 'etcd-3'],
  },
];

for (const row of rows) {
  test(`preflight: ${row.name}`, (t) => {
    const verdict = preflight(row.facts, v(row.to));
    t.is(verdict.kind, row.kind, JSON.stringify(verdict.checks, null, 1));
    t.deepEqual(
      verdict.checks.filter((c) => !c.ok).map((c) => c.name),
      row.failed ?? [],
    );
    if (verdict.kind === 'roll') {
      t.deepEqual(verdict.pending, row.pending);
      t.is<string | undefined, string | undefined>(verdict.step.kind, row.step);
    }
    if (verdict.kind === 'refused') t.regex(verdict.reason, row.says!);
    if (row.kind === 'refused')
      t.true(row.failed !== undefined && row.says !== undefined, 'a refused row lists its failed checks and words');
  });
}

test('stepBetween: patch, minor, too far, back, across a major', (t) => {
  t.deepEqual(stepBetween(v('3.4.23'), v('3.4.23')), { kind: 'none' });
  t.deepEqual(stepBetween(v('3.5.16'), v('3.5.30')), { kind: 'patch' });
  t.deepEqual(stepBetween(v('3.4.23'), v('3.5.0')), { kind: 'minor' });
  t.deepEqual(stepBetween(v('3.4.23'), v('3.6.0')), { kind: 'too-far', minors: 2 });
  t.deepEqual(stepBetween(v('3.5.30'), v('3.5.16')), { kind: 'back-patch' });
  t.deepEqual(stepBetween(v('3.5.16'), v('3.4.23')), { kind: 'back-minor' });
  t.deepEqual(stepBetween(v('3.6.0'), v('3.4.23')), { kind: 'too-far', minors: -2 });
  t.is(stepBetween(v('3.9.0'), v('4.0.0')).kind, 'too-far');
});

test('parseVersion: tags and bare versions; anything else is no version', (t) => {
  t.deepEqual(parseVersion('v3.5.16'), { major: 3, minor: 5, patch: 16 });
  t.deepEqual(parseVersion('3.4.23'), { major: 3, minor: 4, patch: 23 });
  t.is(parseVersion('3.5'), undefined);
  t.is(parseVersion('v3.5.16-rc.0'), undefined);
  t.is(parseVersion('not-a-version'), undefined);
});
