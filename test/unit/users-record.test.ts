import test from 'ava';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { formatManaged, STATE_RECORD } from '../../tasks/etcd/access.ts';
import { readStateRecord } from '../../tasks/steps/users.ts';

/** The state directory's record of the users and roles the tool made, as the users step reads it. */

const stateDirWith = (content?: string) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-users-'));
  if (content !== undefined) writeFileSync(join(dir, STATE_RECORD), content);
  return dir;
};

test('none yet (a state directory from before the record) is an empty record; a written one is read back', (t) => {
  t.deepEqual(readStateRecord(stateDirWith()), { users: [], roles: [] });
  t.deepEqual(readStateRecord(stateDirWith(`${formatManaged({ users: ['alice'], roles: ['app1'] })}\n`)), {
    users: ['alice'],
    roles: ['app1'],
  });
});

test('a damaged record is an error naming the file, never an empty record', (t) => {
  const dir = stateDirWith('{"users": "alice"}');
  t.throws(() => readStateRecord(dir), {
    message: `${join(dir, STATE_RECORD)} is not {"users": [...], "roles": [...]}; restore it, or delete it (the users and roles the tool made are then no longer recognised as its own)`,
  });
});
