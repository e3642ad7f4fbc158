import test from 'ava';
import { checkHistory, longestWriteGapMs, type HistoryProblem, type Operation } from '../../tasks/faults/history.ts';

/** A fault drill's history check: facts in (what clients saw, what is left at the end), problems out. */

const write = (value: number, invokedMs: number, returnedMs: number, ok = true): Operation => ({
  kind: 'write',
  value,
  member: 'etcd-1',
  invokedMs,
  returnedMs,
  ok,
});
const read = (value: number | undefined, invokedMs: number, returnedMs: number, member = 'etcd-2'): Operation => ({
  kind: 'read',
  ...(value === undefined ? {} : { value }),
  member,
  invokedMs,
  returnedMs,
  ok: value !== undefined,
});
const kept = (...values: number[]) => new Map(values.map((value) => [value, String(value)]));

const table: { name: string; ops: Operation[]; final: Map<number, string>; problems: HistoryProblem['kind'][] }[] = [
  {
    name: 'writes acknowledged and kept, reads in order',
    ops: [write(1, 0, 10), read(1, 11, 20), write(2, 12, 30), read(2, 31, 40)],
    final: kept(1, 2),
    problems: [],
  },
  { name: 'an acknowledged write gone at the end', ops: [write(1, 0, 10), write(2, 11, 20)], final: kept(1), problems: ['lost-write'] },
  {
    name: 'a write that failed may be gone, or kept',
    ops: [write(1, 0, 10, false), write(2, 11, 20, false), write(3, 21, 30)],
    final: kept(2, 3),
    problems: [],
  },
  {
    name: 'a read older than a write acknowledged before it began',
    ops: [write(1, 0, 10), write(2, 11, 20), read(1, 21, 30)],
    final: kept(1, 2),
    problems: ['stale-read'],
  },
  {
    name: 'a write seen before it was acknowledged, but after it began: legal',
    ops: [write(1, 0, 50), read(1, 10, 20)],
    final: kept(1),
    problems: [],
  },
  {
    name: 'a failed write seen by a read: applied, and legal while it stays',
    ops: [write(1, 0, 10), write(2, 11, 20, false), read(2, 21, 30)],
    final: kept(1, 2),
    problems: [],
  },
  {
    name: 'a failed write applied late, after a later write was acknowledged (its link was cut): a read of it is legal',
    ops: [write(1, 0, 10), write(2, 11, 20, false), write(3, 21, 30), read(2, 31, 40), read(3, 41, 50), read(2, 51, 60)],
    final: kept(1, 2, 3),
    problems: [],
  },
  {
    name: 'an acknowledged write read after a later acknowledged one, a failed one between them: still stale',
    ops: [write(1, 0, 10), write(2, 11, 20, false), write(3, 21, 30), read(1, 31, 40)],
    final: kept(1, 2, 3),
    problems: ['stale-read'],
  },
  {
    name: 'a failed write read before it began: still from the future',
    ops: [write(1, 0, 10), read(2, 11, 15), write(2, 16, 20, false)],
    final: kept(1, 2),
    problems: ['future-read'],
  },
  {
    name: 'a value seen by a read, then gone',
    ops: [write(1, 0, 10), write(2, 11, 20, false), read(2, 21, 30)],
    final: kept(1),
    problems: ['seen-then-lost'],
  },
  {
    name: 'a value read before its write began',
    ops: [write(1, 0, 10), read(2, 11, 15), write(2, 16, 20)],
    final: kept(1, 2),
    problems: ['future-read'],
  },
  {
    name: 'a read going back behind a read that ended before it began',
    ops: [write(1, 0, 10), write(2, 11, 30, false), read(2, 12, 20, 'etcd-2'), read(1, 21, 25, 'etcd-3')],
    final: kept(1, 2),
    problems: ['read-went-back'],
  },
  {
    name: 'a read of the empty register before any write was acknowledged: legal',
    ops: [read(0, 0, 5), write(1, 1, 10)],
    final: kept(1),
    problems: [],
  },
  { name: 'a read that failed says nothing', ops: [write(1, 0, 10), read(undefined, 11, 20)], final: kept(1), problems: [] },
  { name: 'a write kept with another value', ops: [write(1, 0, 10)], final: new Map([[1, 'x']]), problems: ['wrong-value'] },
];

for (const row of table)
  test(`history: ${row.name}`, (t) => {
    const verdict = checkHistory(row.ops, row.final);
    t.deepEqual(
      verdict.problems.map((problem) => problem.kind),
      row.problems,
      verdict.problems.map((problem) => problem.says).join('\n'),
    );
  });

test('history: the counts, and what a problem says', (t) => {
  const verdict = checkHistory([write(1, 0, 1000), write(2, 1000, 2000, false), read(0, 1500, 2500), read(undefined, 2600, 2700)], kept());
  t.deepEqual(verdict.writes, { acknowledged: 1, failed: 1 });
  t.deepEqual(verdict.reads, { answered: 1, failed: 1 });
  t.deepEqual(verdict.problems, [
    { kind: 'lost-write', says: 'write 1, acknowledged by etcd-1, 0.00–1.00 s, is gone' },
    { kind: 'stale-read', says: 'read by etcd-2, 1.50–2.50 s, returned 0, but write 1 was acknowledged before it began' },
  ]);
});

test('the longest time without an acknowledged write, inside a window: from its start, between writes, to its end', (t) => {
  const ops = [write(1, 0, 100), write(2, 100, 400), write(3, 400, 450, false), write(4, 450, 1500), write(5, 1500, 1600)];
  t.is(longestWriteGapMs(ops, 0, 2000), 1100);
  t.is(longestWriteGapMs(ops, 0, 300), 200);
  t.is(longestWriteGapMs([], 0, 500), 500);
  t.is(longestWriteGapMs(ops, 1700, 2500), 800);
});
