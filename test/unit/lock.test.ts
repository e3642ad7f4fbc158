import test from 'ava';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { LockHeldError, RunLock } from '../../tasks/core/lock.ts';

const stateDir = () => mkdtempSync(join(tmpdir(), 'etcd-kvm-lock-'));

test('one run at a time: a second acquire fails naming the holder; release frees it', (t) => {
  const dir = stateDir();
  const first = RunLock.acquire(dir);
  t.is(first.tookOverFrom, undefined);
  const error = t.throws(() => RunLock.acquire(dir), { instanceOf: LockHeldError });
  t.regex(error!.message, new RegExp(`PID ${process.pid} on ${hostname()} since \\d{4}-`));
  first.release();
  t.false(existsSync(join(dir, 'run.lock')));
  RunLock.acquire(dir).release();
});

test('a lock whose process is gone is taken over, and says whose it was', (t) => {
  const dir = stateDir();
  // A PID that surely existed and is gone: a child that has exited.
  const gone = spawnSync('true').pid!;
  writeFileSync(join(dir, 'run.lock'), JSON.stringify({ pid: gone, host: hostname(), since: '2026-01-01T00:00:00.000Z' }));
  const lock = RunLock.acquire(dir);
  t.deepEqual(lock.tookOverFrom, { pid: gone, host: hostname(), since: '2026-01-01T00:00:00.000Z' });
  t.is((JSON.parse(readFileSync(join(dir, 'run.lock'), 'utf8')) as { pid: number }).pid, process.pid);
  lock.release();
});

test("another host's lock is never taken over: its process cannot be checked from here", (t) => {
  const dir = stateDir();
  writeFileSync(join(dir, 'run.lock'), JSON.stringify({ pid: 1, host: 'elsewhere.example', since: '2026-01-01T00:00:00.000Z' }));
  const error = t.throws(() => RunLock.acquire(dir), { instanceOf: LockHeldError });
  t.regex(error!.message, /PID 1 on elsewhere\.example .*remove the file if that run on elsewhere\.example is gone/);
});
