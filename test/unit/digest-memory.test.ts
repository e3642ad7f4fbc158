import test from 'ava';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DigestMemory, RACY_NS } from '../../tasks/guest/digest-memory.ts';

/** What a run remembers of the guests' files, kept in the state directory for the next run. */

const NOW = 1_795_525_000_000_000_000n;
const OLD = NOW - RACY_NS - 1n;

test('remembered across runs, 0600 in the state directory; recalled only under the same identity', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-digests-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const first = DigestMemory.load(dir);
  first.remember('etcd-1', '/etc/etcd/etcd.env', '12 100 1.5 1.5', OLD, NOW, 'aa');
  first.save();
  t.is(statSync(join(dir, 'guest-files.json')).mode & 0o777, 0o600);
  const next = DigestMemory.load(dir);
  t.is(next.recall('etcd-1', '/etc/etcd/etcd.env', '12 100 1.5 1.5'), 'aa');
  t.is(next.recall('etcd-1', '/etc/etcd/etcd.env', '12 100 1.5 2.5'), undefined, 'changed since (its ctime moved)');
  t.is(next.recall('etcd-2', '/etc/etcd/etcd.env', '12 100 1.5 1.5'), undefined, "another member's file");
});

test('a file changed within RACY_NS of its read is not remembered, and what was remembered of it is forgotten', (t) => {
  const memory = DigestMemory.empty();
  memory.remember('etcd-1', '/f', 'a', OLD, NOW, 'aa');
  memory.remember('etcd-1', '/f', 'b', NOW - 1n, NOW, 'bb');
  t.is(memory.recall('etcd-1', '/f', 'a'), undefined);
  t.is(memory.recall('etcd-1', '/f', 'b'), undefined);
});

test('an unreadable or foreign file is forgotten, not an error: every file is read again', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-digests-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  for (const text of ['{not json', '[1, 2]', '{"etcd-1": "x"}', '{"etcd-1": {"/f": {"identity": 1}}}', 'null']) {
    writeFileSync(join(dir, 'guest-files.json'), text);
    const memory = DigestMemory.load(dir);
    t.is(memory.recall('etcd-1', '/f', 'a'), undefined);
    memory.remember('etcd-1', '/f', 'a', OLD, NOW, 'aa');
    t.is(memory.recall('etcd-1', '/f', 'a'), 'aa', text);
  }
  // Nothing new remembered: nothing written.
  DigestMemory.load(dir).save();
  t.is(readFileSync(join(dir, 'guest-files.json'), 'utf8'), 'null');
});

test('a state directory that cannot be written keeps nothing and says why; the run goes on', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-digests-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  // A directory where the file should be: the rename into place fails.
  mkdirSync(join(dir, 'guest-files.json'));
  const memory = DigestMemory.load(dir);
  memory.remember('etcd-1', '/f', 'a', OLD, NOW, 'aa');
  t.regex(
    memory.save() ?? '',
    /^could not keep the guests' file digests in .*guest-files\.json \(\w+\): the next run reads every file again$/,
  );
});
