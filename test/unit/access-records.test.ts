import test from 'ava';
import { Secret } from '../../tasks/core/secret.ts';
import { planAccess, type LiveAccess, type ManagedNames, type WantedAccess } from '../../tasks/etcd/access.ts';

/**
 * Who decides what the tool deletes: etcd's record (an ordinary key, which a role granted by hand can
 * write) and the state directory's (the control node's own). A user or role is deleted only when both
 * name it; otherwise it is left alone. Tables: the two records and etcd's users in, the plan out.
 */

const wanted: WantedAccess = {
  roles: { app1: { permissions: [] } },
  users: { alice: { roles: [], password: new Secret('') } },
  certificateMode: true,
};
/** etcd has alice and app1 (the tool's), bob and ops (made by hand, or by the tool: the records say). */
const live = (managed: ManagedNames): LiveAccess => ({
  users: new Map([
    ['alice', { roles: [] }],
    ['bob', { roles: [] }],
  ]),
  roles: new Map([
    ['app1', []],
    ['ops', []],
  ]),
  managed,
  passwordsDiffer: [],
});
const names = (users: string[], roles: string[] = ['app1']): ManagedNames => ({ users, roles });

const rows: { name: string; inEtcd: ManagedNames; inStateDir: ManagedNames; actions: unknown[] }[] = [
  {
    name: 'both records name bob: the tool made it, and deletes it',
    inEtcd: names(['alice', 'bob']),
    inStateDir: names(['alice', 'bob']),
    actions: [
      { kind: 'delete-user', user: 'bob' },
      { kind: 'record-managed', etcd: names(['alice']), stateDir: names(['alice']) },
    ],
  },
  {
    name: "an application added bob to etcd's record: left alone, and dropped from that record",
    inEtcd: names(['alice', 'bob']),
    inStateDir: names(['alice']),
    actions: [{ kind: 'record-managed', etcd: names(['alice']), stateDir: names(['alice']) }],
  },
  {
    name: "an application added role ops to etcd's record: left alone, and dropped from that record",
    inEtcd: names(['alice'], ['app1', 'ops']),
    inStateDir: names(['alice']),
    actions: [{ kind: 'record-managed', etcd: names(['alice']), stateDir: names(['alice']) }],
  },
  {
    name: "bob was taken out of etcd's record: left alone, and kept in the state directory's until an operator settles it",
    inEtcd: names(['alice']),
    inStateDir: names(['alice', 'bob']),
    actions: [],
  },
  {
    name: 'a state directory from before its record: what is wanted is recorded there; what left the inventory is left alone',
    inEtcd: names(['alice', 'bob'], ['app1', 'ops']),
    inStateDir: names([], []),
    actions: [
      { kind: 'record-managed', etcd: names(['alice', 'bob'], ['app1', 'ops']), stateDir: names(['alice']) },
      { kind: 'record-managed', etcd: names(['alice']), stateDir: names(['alice']) },
    ],
  },
  {
    name: 'both records name role ops: deleted after the users',
    inEtcd: names(['alice'], ['app1', 'ops']),
    inStateDir: names(['alice'], ['app1', 'ops']),
    actions: [
      { kind: 'delete-role', role: 'ops' },
      { kind: 'record-managed', etcd: names(['alice']), stateDir: names(['alice']) },
    ],
  },
  { name: 'the records agree on what is wanted: nothing to do', inEtcd: names(['alice']), inStateDir: names(['alice']), actions: [] },
];

for (const row of rows) {
  test(`records: ${row.name}`, (t) => {
    t.deepEqual(
      planAccess(wanted, live(row.inEtcd), row.inStateDir).map((change) => change.action),
      row.actions,
    );
  });
}
