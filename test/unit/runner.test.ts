import test from 'ava';
import { Runner } from '../../tasks/core/runner.ts';
import type { Step } from '../../tasks/core/step.ts';

/** A step over an in-memory "host": wants `wanted`, holds `current`; apply may be made to misbehave. */
function fakeStep(state: Map<string, number>, wanted: number, options: { applyBy?: number; failOn?: string } = {}) {
  const applied: string[] = [];
  const step: Step<number, number> = {
    name: 'fake',
    targets: [...state.keys()],
    async check(target) {
      if (target === options.failOn) throw new Error('probe failed: connection refused');
      return state.get(target)!;
    },
    plan(current) {
      return current === wanted ? [] : [{ summary: `set ${current} -> ${wanted}`, diff: { label: 'value', before: `${current}\n`, after: `${wanted}\n` }, action: wanted }];
    },
    async apply(changes, target) {
      applied.push(target);
      state.set(target, options.applyBy === undefined ? changes[0]!.action : state.get(target)! + options.applyBy);
    },
  };
  return { step, applied };
}

test('apply runs only where the plan is not empty, and a second run is all ok', async (t) => {
  const state = new Map([['a', 1], ['b', 2]]);
  const { step, applied } = fakeStep(state, 2);
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  const results = await runner.runStep(step);
  t.deepEqual(results.map((r) => [r.host, r.status]), [['a', 'changed'], ['b', 'ok']]);
  t.deepEqual(applied, ['a']);
  t.deepEqual(results[0]!.changes.map((c) => c.summary), ['set 1 -> 2']);
  const again = await new Runner({ dryRun: false, renderer: 'silent' }).runStep(fakeStep(state, 2).step);
  t.deepEqual(again.map((r) => r.status), ['ok', 'ok']);
});

test('dry-run reports the change with its diff and applies nothing', async (t) => {
  const state = new Map([['a', 1]]);
  const { step, applied } = fakeStep(state, 5);
  const [result] = await new Runner({ dryRun: true, renderer: 'silent' }).runStep(step);
  t.is(result!.status, 'changed');
  t.deepEqual(result!.changes[0]!.diff, { label: 'value', before: '1\n', after: '5\n' });
  t.deepEqual(applied, []);
  t.is(state.get('a'), 1);
});

test('a step that does not converge after apply fails on that host', async (t) => {
  const state = new Map([['a', 1]]);
  const { step } = fakeStep(state, 5, { applyBy: 1 });
  const [result] = await new Runner({ dryRun: false, renderer: 'silent' }).runStep(step);
  t.is(result!.status, 'failed');
  t.is(result!.error, 'did not converge: after applying, it still plans set 2 -> 5');
});

test('a failed host is skipped by later steps while the others go on', async (t) => {
  const state = new Map([['a', 1], ['b', 1]]);
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  const first = await runner.runStep(fakeStep(state, 2, { failOn: 'a' }).step);
  t.deepEqual(first.map((r) => r.status), ['failed', 'changed']);
  t.is(first[0]!.error, 'probe failed: connection refused');
  const second = await runner.runStep(fakeStep(state, 3).step);
  t.deepEqual(second.map((r) => r.status), ['skipped', 'changed']);
  t.true(runner.failed);
});

/** A rolling step over in-memory hosts; `failOn` makes one apply fail; `log` records the order of applies. */
function rollingStep(state: Map<string, number>, wanted: number, waves: string[][], failOn?: string) {
  const log: string[] = [];
  const step: Step<number, number> = {
    ...fakeStep(state, wanted).step,
    name: 'rolling',
    async apply(_changes, target) {
      log.push(`start ${target}`);
      await new Promise((resolve) => setTimeout(resolve, 5));
      if (target === failOn) throw new Error(`${target} did not come back`);
      state.set(target, wanted);
      log.push(`end ${target}`);
    },
    async rollingOrder(pending) {
      seen.push(pending.map((p) => p.target));
      return waves;
    },
  };
  const seen: string[][] = [];
  return { step, log, seen };
}

test('a rolling step applies wave after wave, one finished before the next starts', async (t) => {
  const state = new Map([['a', 1], ['b', 1], ['c', 1], ['d', 2]]);
  const { step, log, seen } = rollingStep(state, 2, [['c'], ['a'], ['b']]);
  const results = await new Runner({ dryRun: false, renderer: 'silent' }).runStep(step);
  t.deepEqual(seen, [['a', 'b', 'c']], 'only targets with changes are ordered');
  t.deepEqual(log, ['start c', 'end c', 'start a', 'end a', 'start b', 'end b']);
  t.deepEqual(results.map((r) => [r.host, r.status, r.rollPosition]), [['a', 'changed', 2], ['b', 'changed', 3], ['c', 'changed', 1], ['d', 'ok', undefined]]);
});

test('a roll stops at the first failure: later waves are skipped and keep their state', async (t) => {
  const state = new Map([['a', 1], ['b', 1], ['c', 1]]);
  const { step, log } = rollingStep(state, 2, [['a'], ['b'], ['c']], 'b');
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  const results = await runner.runStep(step);
  t.deepEqual(log, ['start a', 'end a', 'start b']);
  t.deepEqual(results.map((r) => [r.host, r.status]), [['a', 'changed'], ['b', 'failed'], ['c', 'skipped']]);
  t.regex(results[1]!.error!, /b did not come back/);
  t.is(results[2]!.error, 'not changed: the roll stopped at b');
  t.is(state.get('c'), 1);
  t.true(runner.failed);
});

test('a dry-run of a rolling step reports the waves it would follow and applies nothing', async (t) => {
  const state = new Map([['a', 1], ['b', 1]]);
  const { step, log } = rollingStep(state, 2, [['b'], ['a']]);
  const results = await new Runner({ dryRun: true, renderer: 'silent' }).runStep(step);
  t.deepEqual(log, []);
  t.deepEqual(results.map((r) => [r.host, r.status, r.rollPosition]), [['a', 'changed', 2], ['b', 'changed', 1]]);
});

test('a roll order that leaves out a target with changes is a bug, not a silent skip', async (t) => {
  const state = new Map([['a', 1], ['b', 1]]);
  const { step } = rollingStep(state, 2, [['a']]);
  await t.throwsAsync(new Runner({ dryRun: false, renderer: 'silent' }).runStep(step), { message: /does not name each target/ });
});

test('after an interrupt the change in flight finishes and no other starts: later waves and steps are skipped', async (t) => {
  const state = new Map([['a', 1], ['b', 1]]);
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  const { step, log } = rollingStep(state, 2, [['a'], ['b']]);
  const interrupting: typeof step = {
    ...step,
    async apply(changes, target, current) {
      runner.interrupt('SIGINT');
      await step.apply(changes, target, current);
    },
  };
  const results = await runner.runStep(interrupting);
  t.deepEqual(log, ['start a', 'end a'], 'a finished; b never started');
  t.deepEqual(results.map((r) => [r.host, r.status]), [['a', 'changed'], ['b', 'skipped']]);
  t.regex(results[1]!.error!, /interrupted \(SIGINT\): not applied/);
  const later = await runner.runStep(fakeStep(new Map([['c', 1]]), 2).step);
  t.deepEqual(later.map((r) => [r.host, r.status, r.error]), [['c', 'skipped', 'interrupted (SIGINT): not started']]);
  t.is(runner.interrupted, 'SIGINT');
});

test("each phase's wall-clock time is kept in the order the phases ran, a failing one too; skipped ones have none", async (t) => {
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
  await runner.runPhases([
    { title: 'first', run: async () => { await pause(30); return 'done'; } },
    { title: 'not selected', run: async () => 'never', skip: 'not selected by --tags / --skip-tags' },
    { title: 'second', run: async () => { await pause(5); throw new Error('broken'); } },
  ]);
  t.deepEqual(runner.phaseTimes.map(({ phase }) => phase), ['first', 'second']);
  t.true(runner.phaseTimes[0]!.ms >= 25);
});

/** A read-only step counting its checks: what an early check saves, and when it must not be used. */
function countingStep(state: Map<string, number>) {
  const checks: string[] = [];
  const { step } = fakeStep(state, 2);
  const counting: Step<number, number> = { ...step, name: 'counted', check: async (target) => (checks.push(target), state.get(target)!) };
  return { step: counting, checks };
}

test('an early check is used once when nothing changed on its target since; a change there makes the step ask again', async (t) => {
  const state = new Map([['a', 2], ['b', 2]]);
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  const { step, checks } = countingStep(state);
  runner.checkEarly(step);
  t.deepEqual(checks, ['a', 'b'], 'asked at once');
  // Another step changes host b meanwhile (and the early answer for b is now stale: b holds 1).
  const other = fakeStep(new Map([['b', 1]]), 2);
  await runner.runStep({ ...other.step, name: 'other' });
  state.set('b', 1);
  const results = await runner.runStep(step);
  t.deepEqual(checks, ['a', 'b', 'b', 'b'], 'a from the early answer; b checked again, then re-checked after its apply');
  t.deepEqual(results.map((r) => [r.host, r.status]), [['a', 'ok'], ['b', 'changed']]);
  // Used once: the next run of the step checks again.
  await runner.runStep(step);
  t.deepEqual(checks.slice(4), ['a', 'b']);
});

test('an early check that failed is asked again when the step runs', async (t) => {
  const state = new Map([['a', 2]]);
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  let calls = 0;
  const { step } = fakeStep(state, 2);
  const flaky: Step<number, number> = { ...step, check: async (target) => (++calls === 1 ? Promise.reject(new Error('not yet')) : state.get(target)!) };
  runner.checkEarly(flaky);
  const results = await runner.runStep(flaky);
  t.is(calls, 2);
  t.deepEqual(results.map((r) => r.status), ['ok']);
});
