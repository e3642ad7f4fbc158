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
