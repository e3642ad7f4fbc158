import test from 'ava';
import { spawn, spawnSync } from 'node:child_process';
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

test('an empty lock file (a run between creating and filling it) is never taken over', (t) => {
  const dir = stateDir();
  writeFileSync(join(dir, 'run.lock'), '');
  const error = t.throws(() => RunLock.acquire(dir), { instanceOf: LockHeldError });
  t.regex(error!.message, /run\.lock does not name a run .*If no run is going, remove the file/);
  t.is(readFileSync(join(dir, 'run.lock'), 'utf8'), '', 'left as it was');
});

test('a run taking over a stale lock right now is not raced: the second taker refuses', (t) => {
  const dir = stateDir();
  const gone = spawnSync('true').pid!;
  writeFileSync(join(dir, 'run.lock'), JSON.stringify({ pid: gone, host: hostname(), since: '2026-01-01T00:00:00.000Z' }));
  // Another live process (the parent of this test) is in the middle of taking over.
  writeFileSync(join(dir, 'run.lock.takeover'), JSON.stringify({ pid: process.ppid, host: hostname(), since: '2026-01-01T00:00:01.000Z' }));
  const error = t.throws(() => RunLock.acquire(dir), { instanceOf: LockHeldError });
  t.regex(error!.message, new RegExp(`another run \\(PID ${process.ppid} on .*\\) is taking over the stale lock`));
  t.is((JSON.parse(readFileSync(join(dir, 'run.lock'), 'utf8')) as { pid: number }).pid, gone, 'the stale lock is left to the taker');
});

/** A child process that waits for the same instant as its siblings, tries the lock, and holds it a while when it wins. */
const CHILD = `
import { RunLock } from ${JSON.stringify(join(import.meta.dirname, '../../tasks/core/lock.ts'))};
const [dir, startAt] = process.argv.slice(2);
while (Date.now() < Number(startAt)) {}
try {
  const lock = RunLock.acquire(dir);
  console.log('won');
  setTimeout(() => lock.release(), 2000);
} catch (error) {
  console.log('lost: ' + error.message);
}
`;

/** Each child's one line: "won", or "lost: " and why. */
function runChild(script: string, dir: string, startAt: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', script, dir, String(startAt)], { cwd: join(import.meta.dirname, '../..') });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.on('error', reject);
    child.on('close', () => resolve(out.trim()));
  });
}

test('runs taking over one stale lock at the same instant: exactly one wins', async (t) => {
  t.timeout(60_000);
  const script = join(stateDir(), 'child.ts');
  writeFileSync(script, CHILD);
  // Three state directories at once, five runs on each: a race lost once in a while still shows.
  const dirs = Array.from({ length: 3 }, () => {
    const dir = stateDir();
    writeFileSync(join(dir, 'run.lock'), JSON.stringify({ pid: spawnSync('true').pid!, host: hostname(), since: '2026-01-01T00:00:00.000Z' }));
    return dir;
  });
  // Long enough for every child to load before the instant they all try.
  const startAt = Date.now() + 4000;
  const outputs = await Promise.all(dirs.map((dir) => Promise.all(Array.from({ length: 5 }, () => runChild(script, dir, startAt)))));
  for (const runs of outputs) {
    t.is(runs.filter((out) => out === 'won').length, 1, runs.join('\n'));
    t.true(runs.every((out) => out === 'won' || out.startsWith('lost: ')), runs.join('\n'));
  }
});
