import test from 'ava';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { goneHere, LockHeldError, processScope, RunLock } from '../../tasks/core/lock.ts';

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

/** Where this test's PIDs mean its processes (the lock's judge of a gone run). */
const scope = processScope()!;

test('a lock whose process is gone is taken over, and says whose it was', (t) => {
  const dir = stateDir();
  // A PID that surely existed and is gone: a child that has exited.
  const gone = spawnSync('true').pid!;
  writeFileSync(join(dir, 'run.lock'), JSON.stringify({ pid: gone, host: hostname(), since: '2026-01-01T00:00:00.000Z', scope }));
  const lock = RunLock.acquire(dir);
  t.deepEqual(lock.tookOverFrom, { pid: gone, host: hostname(), since: '2026-01-01T00:00:00.000Z', scope });
  t.is((JSON.parse(readFileSync(join(dir, 'run.lock'), 'utf8')) as { pid: number }).pid, process.pid);
  lock.release();
});

test("another host's lock is never taken over: its process cannot be checked from here", (t) => {
  const dir = stateDir();
  writeFileSync(join(dir, 'run.lock'), JSON.stringify({ pid: 1, host: 'elsewhere.example', since: '2026-01-01T00:00:00.000Z' }));
  const error = t.throws(() => RunLock.acquire(dir), { instanceOf: LockHeldError });
  t.regex(error!.message, /PID 1 on elsewhere\.example .*remove the file if that run on elsewhere\.example is gone/);
});

test('a lock of a machine with this host name but another scope (a CI runner, a container, a cloned VM) is never taken over', (t) => {
  const dir = stateDir();
  const gone = spawnSync('true').pid!;
  // The same name, a PID that is no process here, and another kernel's boot: its run may be alive there.
  writeFileSync(
    join(dir, 'run.lock'),
    JSON.stringify({ pid: gone, host: hostname(), since: '2026-01-01T00:00:00.000Z', scope: 'another-boot pid:[4026531836]' }),
  );
  const error = t.throws(() => RunLock.acquire(dir), { instanceOf: LockHeldError });
  t.regex(error!.message, new RegExp(`PID ${gone} on ${hostname()} .*remove the file if that run on ${hostname()} is gone`));
  // A holder written by an older version (no scope) is never judged gone either.
  writeFileSync(join(dir, 'run.lock'), JSON.stringify({ pid: gone, host: hostname(), since: '2026-01-01T00:00:00.000Z' }));
  t.throws(() => RunLock.acquire(dir), { instanceOf: LockHeldError });
});

test('gone here: this scope and no such process; never this process, another scope, or none', (t) => {
  const gone = spawnSync('true').pid!;
  t.regex(scope, /^[0-9a-f-]{36} pid:\[\d+\]$/);
  t.true(goneHere({ pid: gone, scope }));
  t.false(goneHere({ pid: process.pid, scope }), 'this process');
  t.false(goneHere({ pid: process.ppid, scope }), 'a live process');
  t.false(goneHere({ pid: gone, scope: `${scope}x` }), 'another scope');
  t.false(goneHere({ pid: gone }), 'no scope');
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
  writeFileSync(join(dir, 'run.lock'), JSON.stringify({ pid: gone, host: hostname(), since: '2026-01-01T00:00:00.000Z', scope }));
  // Another live process (the parent of this test) is in the middle of taking over.
  writeFileSync(
    join(dir, 'run.lock.takeover'),
    JSON.stringify({ pid: process.ppid, host: hostname(), since: '2026-01-01T00:00:01.000Z', scope }),
  );
  const error = t.throws(() => RunLock.acquire(dir), { instanceOf: LockHeldError });
  t.regex(error!.message, new RegExp(`another run \\(PID ${process.ppid} on .*\\) is taking over the stale lock`));
  t.is((JSON.parse(readFileSync(join(dir, 'run.lock'), 'utf8')) as { pid: number }).pid, gone, 'the stale lock is left to the taker');
});

/**
 * A child process: for each state directory in turn, waits for that round's instant (the same for
 * every sibling), tries the lock, and says "won" or "lost: why". What it wins it holds until its
 * stdin closes, so a sibling that comes late still finds it held.
 */
const CHILD = `
import { RunLock } from ${JSON.stringify(join(import.meta.dirname, '../../tasks/core/lock.ts'))};
const [startAt, ...dirs] = process.argv.slice(2);
dirs.forEach((dir, round) => {
  while (Date.now() < Number(startAt) + round * ROUND_MS) {}
  try {
    RunLock.acquire(dir);
    console.log('won');
  } catch (error) {
    console.log('lost: ' + error.message);
  }
});
process.stdin.resume();
`;
const ROUND_MS = 500;

/** Each child's answer per round, once it has answered every round (it then waits for stdin to close). */
function runChild(script: string, startAt: number, dirs: readonly string[]): { answers: Promise<string[]>; end: () => void } {
  const child = spawn(process.execPath, ['--import', 'tsx', script, String(startAt), ...dirs], { cwd: join(import.meta.dirname, '../..') });
  const answers = new Promise<string[]>((resolve, reject) => {
    let out = '';
    const lines = () => out.split('\n').slice(0, -1);
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (lines().length >= dirs.length) resolve(lines());
    });
    child.on('error', reject);
    child.on('close', () => resolve(lines()));
  });
  return { answers, end: () => child.stdin.end() };
}

test('runs taking over one stale lock at the same instant: exactly one wins', async (t) => {
  t.timeout(60_000);
  const script = join(stateDir(), 'child.ts');
  writeFileSync(script, CHILD.replace('ROUND_MS', String(ROUND_MS)));
  // Rounds, each on its own state directory with a stale lock. The lock is padded (JSON allows the
  // spaces) so reading it takes a while: both runs judge it stale before either acts, every round.
  const dirs = Array.from({ length: 5 }, () => {
    const dir = stateDir();
    writeFileSync(
      join(dir, 'run.lock'),
      JSON.stringify({ pid: spawnSync('true').pid!, host: hostname(), since: '2026-01-01T00:00:00.000Z', scope }) + ' '.repeat(20_000_000),
    );
    return dir;
  });
  t.teardown(() => {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });
  // Long enough for every child to load before the first instant.
  const startAt = Date.now() + 4000;
  const children = Array.from({ length: 2 }, () => runChild(script, startAt, dirs));
  const answers = await Promise.all(children.map((child) => child.answers));
  for (const child of children) child.end();
  dirs.forEach((dir, round) => {
    const runs = answers.map((lines) => lines[round] ?? '(no answer)');
    t.is(runs.filter((out) => out === 'won').length, 1, `${dir}:\n${runs.join('\n')}`);
    t.true(
      runs.every((out) => out === 'won' || out.startsWith('lost: ')),
      runs.join('\n'),
    );
  });
});
