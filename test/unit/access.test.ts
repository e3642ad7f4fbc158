import test from 'ava';
import { Secret } from '../../tasks/core/secret.ts';
import { reachesToolKeys } from '../../tasks/inventory/reserved.ts';
import {
  accessWarnings,
  AccessRefusal,
  departures,
  describePermission,
  MANAGED_KEY,
  parseManaged,
  permissionOf,
  planAccess,
  prefixEnd,
  STATE_RECORD,
  type LiveAccess,
  type ManagedNames,
  type WantedAccess,
} from '../../tasks/etcd/access.ts';

/** Application users and roles as tables: what the inventory wants and what etcd answers, in; operations, out. */

const app1 = { permissions: [{ prefix: '/app1/', access: 'readwrite' as const }] };
const wantedCert = (over: Partial<WantedAccess> = {}): WantedAccess => ({
  roles: { app1: app1 },
  users: { alice: { roles: ['app1'], password: new Secret('') } },
  certificateMode: true,
  ...over,
});
const live = (over: Partial<LiveAccess> = {}): LiveAccess => ({
  users: new Map(),
  roles: new Map(),
  managed: { users: [], roles: [] },
  passwordsDiffer: [],
  ...over,
});
/** etcd's answer when the wanted state is there. */
const converged = (over: Partial<LiveAccess> = {}) =>
  live({
    users: new Map([['alice', { roles: ['app1'] }]]),
    roles: new Map([['app1', [permissionOf(app1.permissions[0]!)]]]),
    managed: { users: ['alice'], roles: ['app1'] },
    ...over,
  });
/** The state directory's record: by default it agrees with etcd's, as after every complete run. */
const plan = (wanted: WantedAccess, state: LiveAccess, stateRecord: ManagedNames = state.managed) => planAccess(wanted, state, stateRecord);
const summaries = (wanted: WantedAccess, state: LiveAccess, stateRecord?: ManagedNames) =>
  plan(wanted, state, stateRecord).map((change) => change.summary);
const RECORDS = `${MANAGED_KEY} and the state directory (${STATE_RECORD})`;

test('a prefix is the range up to the prefix with its last byte raised, as etcdctl --prefix', (t) => {
  t.is(prefixEnd(Buffer.from('/app1/')).toString(), '/app10');
  t.deepEqual(prefixEnd(Buffer.from([0x61, 0xff])), Buffer.from([0x62]));
  t.deepEqual(prefixEnd(Buffer.from([0xff, 0xff])), Buffer.from([0]));
  t.is(describePermission(permissionOf({ prefix: '/app1/', access: 'readwrite' })), 'readwrite prefix "/app1/"');
  t.is(describePermission(permissionOf({ key: '/config', access: 'read' })), 'read key "/config"');
  t.deepEqual(permissionOf({ key: '/config', access: 'read' }).rangeEnd, Buffer.alloc(0));
});

test('absent: the managed set is recorded first, then the role, its permission, the user and its role', (t) => {
  t.deepEqual(summaries(wantedCert(), live()), [
    `record the users and roles the tool manages in ${RECORDS}`,
    'create role app1',
    'grant readwrite prefix "/app1/" to role app1',
    'create user alice (no password: its client certificate CN=alice logs it in)',
    'grant role app1 to user alice',
  ]);
  const record = plan(wantedCert(), live())[0]!.action;
  t.deepEqual(record, {
    kind: 'record-managed',
    etcd: { users: ['alice'], roles: ['app1'] },
    stateDir: { users: ['alice'], roles: ['app1'] },
  });
});

test('equal: nothing to do', (t) => {
  t.deepEqual(summaries(wantedCert(), converged()), []);
});

test('drifted: a permission whose access changed is granted again, one no longer wanted is revoked, a role granted by hand to a managed user is revoked', (t) => {
  const wanted = wantedCert({ roles: { app1: { permissions: [{ prefix: '/app1/', access: 'read' }] } } });
  const state = converged({
    roles: new Map([['app1', [permissionOf({ prefix: '/app1/', access: 'readwrite' }), permissionOf({ key: '/other', access: 'write' })]]]),
    users: new Map([['alice', { roles: ['app1', 'ops'] }]]),
  });
  t.deepEqual(summaries(wanted, state), [
    'revoke write key "/other" from role app1',
    'grant read prefix "/app1/" to role app1',
    'revoke role ops from user alice',
  ]);
});

test('removed from the inventory: the managed user and role are deleted, users first, and the set narrowed last', (t) => {
  const changes = plan(wantedCert({ roles: {}, users: {} }), converged());
  t.deepEqual(
    changes.map((change) => change.action.kind),
    ['delete-user', 'delete-role', 'record-managed'],
  );
  t.deepEqual(changes.at(-1)!.action, { kind: 'record-managed', etcd: { users: [], roles: [] }, stateDir: { users: [], roles: [] } });
});

test('a run killed after deleting: what is already gone is only forgotten', (t) => {
  const state = converged({ users: new Map(), roles: new Map() });
  t.deepEqual(summaries(wantedCert({ roles: {}, users: {} }), state), [`forget user alice, role app1 in ${RECORDS}`]);
});

test('users and roles made by hand are never read into the plan, changed or deleted', (t) => {
  const state = converged({
    users: new Map([
      ['alice', { roles: ['app1'] }],
      ['bob', { roles: ['ops'] }],
    ]),
    roles: new Map([
      ['app1', [permissionOf(app1.permissions[0]!)]],
      ['ops', []],
    ]),
  });
  t.deepEqual(summaries(wantedCert(), state), []);
  t.deepEqual(
    summaries(wantedCert({ roles: {}, users: {} }), state).filter((summary) => /bob|ops/.test(summary)),
    [],
  );
});

test('refused: the inventory names a user or role etcd has that the tool did not create', (t) => {
  const state = live({ users: new Map([['alice', { roles: [] }]]), roles: new Map([['app1', []]]) });
  const error = t.throws(() => plan(wantedCert(), state), { instanceOf: AccessRefusal });
  t.regex(error.message, /etcd already has role app1, user alice, which the tool did not create/);
});

test('password mode: a new user carries its password; a managed user whose password etcd rejects gets the inventory one; neither is in a summary', (t) => {
  const password = new Secret('s3cret-pass');
  const wanted = wantedCert({ certificateMode: false, users: { alice: { roles: ['app1'], password } } });
  const added = plan(wanted, live()).find((change) => change.action.kind === 'add-user')!;
  t.deepEqual(added.action, { kind: 'add-user', user: 'alice', password });
  t.is(added.summary, 'create user alice (password from the inventory, sent over TLS only)');
  const changed = plan(wanted, converged({ passwordsDiffer: ['alice'] }));
  t.deepEqual(
    changed.map((change) => change.summary),
    ["change the password of user alice (to the inventory's)"],
  );
  t.false(JSON.stringify(changed).includes('s3cret-pass'));
  t.deepEqual(summaries(wanted, converged()), []);
});

test('the managed set is read strictly: anything else is an error, never an empty set', (t) => {
  t.deepEqual(parseManaged(null), { users: [], roles: [] });
  t.deepEqual(parseManaged('{"users":["a"],"roles":["r"]}'), { users: ['a'], roles: ['r'] });
  for (const bad of ['not json', '[]', '{"users":"a","roles":[]}', '{"users":[1],"roles":[]}', 'null'])
    t.throws(() => parseManaged(bad), { message: /is not \{"users"/ }, bad);
});

const rangeRows: { name: string; key: string | Buffer; rangeEnd: string | Buffer; reaches: boolean }[] = [
  { name: 'every key ("" to \\0)', key: '', rangeEnd: Buffer.from([0]), reaches: true },
  { name: 'from "a" on', key: 'a', rangeEnd: Buffer.from([0]), reaches: true },
  { name: 'from "z" on', key: 'z', rangeEnd: Buffer.from([0]), reaches: false },
  { name: '["a", "f")', key: 'a', rangeEnd: 'f', reaches: true },
  { name: '["a", "etcd-kvm/"): the end is not in the range', key: 'a', rangeEnd: 'etcd-kvm/', reaches: false },
  { name: '["etcd-kvm/z", "zz")', key: 'etcd-kvm/z', rangeEnd: 'zz', reaches: true },
  { name: 'from "etcd-kvm0" on', key: 'etcd-kvm0', rangeEnd: Buffer.from([0]), reaches: false },
  { name: "the managed record's key alone", key: MANAGED_KEY, rangeEnd: Buffer.alloc(0), reaches: true },
  { name: 'the key "etcd-kvm" alone', key: 'etcd-kvm', rangeEnd: Buffer.alloc(0), reaches: false },
];
for (const row of rangeRows) {
  test(`the tool's keys ${row.reaches ? 'are' : 'are not'} reached by ${row.name}`, (t) => {
    t.is(reachesToolKeys(Buffer.from(row.key), Buffer.from(row.rangeEnd)), row.reaches);
  });
}

const exists = (name: string) => name !== 'gone';
const departureRows: { name: string; wanted: string[]; inEtcd: string[]; inStateDir: string[]; expected: ReturnType<typeof departures> }[] =
  [
    {
      name: 'named by both records',
      wanted: [],
      inEtcd: ['bob'],
      inStateDir: ['bob'],
      expected: { agreed: ['bob'], onlyInEtcd: [], onlyInStateDir: [], gone: [] },
    },
    {
      name: "named by etcd's record only",
      wanted: [],
      inEtcd: ['bob'],
      inStateDir: [],
      expected: { agreed: [], onlyInEtcd: ['bob'], onlyInStateDir: [], gone: [] },
    },
    {
      name: "named by the state directory's only",
      wanted: [],
      inEtcd: [],
      inStateDir: ['bob'],
      expected: { agreed: [], onlyInEtcd: [], onlyInStateDir: ['bob'], gone: [] },
    },
    {
      name: 'no longer in etcd, whoever names it',
      wanted: [],
      inEtcd: ['gone'],
      inStateDir: [],
      expected: { agreed: [], onlyInEtcd: [], onlyInStateDir: [], gone: ['gone'] },
    },
    {
      name: 'still wanted',
      wanted: ['bob'],
      inEtcd: ['bob'],
      inStateDir: [],
      expected: { agreed: [], onlyInEtcd: [], onlyInStateDir: [], gone: [] },
    },
  ];
for (const row of departureRows) {
  test(`a name out of the inventory, ${row.name}`, (t) => {
    t.deepEqual(departures(row.wanted, exists, row.inEtcd, row.inStateDir), row.expected);
  });
}

test('a disagreement between the records is said, with what to do; agreement says nothing', (t) => {
  const state = converged({
    users: new Map([
      ['alice', { roles: ['app1'] }],
      ['bob', { roles: [] }],
      ['carol', { roles: [] }],
    ]),
    managed: { users: ['alice', 'bob'], roles: ['app1'] },
  });
  t.deepEqual(accessWarnings(wantedCert(), state, { users: ['alice', 'carol'], roles: ['app1'] }), [
    `user bob is named in ${MANAGED_KEY} but not in the state directory's record (${STATE_RECORD}), so the tool cannot tell it made it: left alone (not deleted) and dropped from ${MANAGED_KEY}. If the tool made it before this record existed, delete it with etcdctl user delete bob; if not, something that can write ${MANAGED_KEY} added it (check the roles granted by hand)`,
    `user carol is in the state directory's record (${STATE_RECORD}) but missing from ${MANAGED_KEY}: left alone (not deleted). Delete it with etcdctl user delete carol if it is to go (the tool then forgets it), or put its name back in ${MANAGED_KEY}`,
  ]);
  t.deepEqual(accessWarnings(wantedCert(), converged(), converged().managed), []);
});
