import test from 'ava';
import { patienceOf, Runner } from '../../tasks/core/runner.ts';
import { CONTROL_NODE, type Fact, type Step, type Target, type Wait } from '../../tasks/core/step.ts';

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
      return current === wanted
        ? []
        : [
            {
              summary: `set ${current} -> ${wanted}`,
              diff: { label: 'value', before: `${current}\n`, after: `${wanted}\n` },
              action: wanted,
            },
          ];
    },
    async apply(changes, target) {
      applied.push(target);
      state.set(target, options.applyBy === undefined ? changes[0]!.action : state.get(target)! + options.applyBy);
    },
  };
  return { step, applied };
}

test('apply runs only where the plan is not empty, and a second run is all ok', async (t) => {
  const state = new Map([
    ['a', 1],
    ['b', 2],
  ]);
  const { step, applied } = fakeStep(state, 2);
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  const results = await runner.runStep(step);
  t.deepEqual(
    results.map((r) => [r.host, r.status]),
    [
      ['a', 'changed'],
      ['b', 'ok'],
    ],
  );
  t.deepEqual(applied, ['a']);
  t.deepEqual(
    results[0]!.changes.map((c) => c.summary),
    ['set 1 -> 2'],
  );
  const again = await new Runner({ dryRun: false, renderer: 'silent' }).runStep(fakeStep(state, 2).step);
  t.deepEqual(
    again.map((r) => r.status),
    ['ok', 'ok'],
  );
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

test('the gate is asked once, before the first change is applied, and never by a run that changes nothing', async (t) => {
  const asked: string[] = [];
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  runner.gateChanges(async () => void asked.push('gate'));
  const converged = new Map([['a', 2]]);
  await runner.runStep(fakeStep(converged, 2).step);
  t.deepEqual(asked, [], 'nothing to change: not asked');
  const state = new Map([
    ['a', 1],
    ['b', 1],
  ]);
  const { step, applied } = fakeStep(state, 2);
  const results = await runner.runStep(step);
  t.deepEqual(
    results.map((r) => r.status),
    ['changed', 'changed'],
  );
  t.deepEqual(applied.sort(), ['a', 'b']);
  t.deepEqual(asked, ['gate'], 'two changes, asked once');

  const dry = new Runner({ dryRun: true, renderer: 'silent' });
  dry.gateChanges(async () => void asked.push('dry'));
  await dry.runStep(fakeStep(new Map([['a', 1]]), 2).step);
  t.deepEqual(asked, ['gate'], 'a dry-run applies nothing, so it never asks');
});

test('a signal while the gate is passed (the lock being taken) still stops the changes waiting on it', async (t) => {
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  let open!: () => void;
  runner.gateChanges(() => new Promise<void>((resolve) => (open = resolve)));
  const { step, applied } = fakeStep(new Map([['a', 1]]), 2);
  const running = runner.runStep(step);
  await new Promise((resolve) => setImmediate(resolve));
  runner.interrupt('SIGINT');
  open();
  const [result] = await running;
  t.deepEqual([result!.status, result!.error], ['skipped', 'interrupted (SIGINT): not applied']);
  t.deepEqual(applied, []);
});

test('a gate that refuses fails the changes waiting on it, applies nothing, and skips every later change and phase', async (t) => {
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  runner.gateChanges(() => Promise.reject(new Error('another run holds the lock')));
  const state = new Map([
    ['a', 1],
    ['b', 1],
  ]);
  const { step, applied } = fakeStep(state, 2);
  const results = await runner.runStep(step);
  t.deepEqual(
    results.map((r) => [r.status, r.error]),
    [
      ['failed', 'another run holds the lock'],
      ['failed', 'another run holds the lock'],
    ],
  );
  t.deepEqual(applied, []);
  const later = await runner.runStep(fakeStep(new Map([['c', 1]]), 2).step);
  t.deepEqual(
    later.map((r) => [r.status, r.error]),
    [['skipped', 'the run may change nothing (its first change was refused): not started']],
  );
  const shown: string[] = [];
  runner.on((event) => {
    if (event.type === 'phase-ended') shown.push(event.outcome.kind === 'skipped' ? event.outcome.reason : event.outcome.kind);
  });
  await runner.runPhases([{ title: 'next', run: async () => 'ran' }]);
  t.deepEqual(shown, ['the run may change nothing (its first change was refused)']);
  t.is(runner.interrupted, undefined, 'a refusal is not an interrupt (exit 1, not 130)');
});

test('a failed host is skipped by later steps while the others go on', async (t) => {
  const state = new Map([
    ['a', 1],
    ['b', 1],
  ]);
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  const first = await runner.runStep(fakeStep(state, 2, { failOn: 'a' }).step);
  t.deepEqual(
    first.map((r) => r.status),
    ['failed', 'changed'],
  );
  t.is(first[0]!.error, 'probe failed: connection refused');
  const second = await runner.runStep(fakeStep(state, 3).step);
  t.deepEqual(
    second.map((r) => r.status),
    ['skipped', 'changed'],
  );
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
  const state = new Map([
    ['a', 1],
    ['b', 1],
    ['c', 1],
    ['d', 2],
  ]);
  const { step, log, seen } = rollingStep(state, 2, [['c'], ['a'], ['b']]);
  const results = await new Runner({ dryRun: false, renderer: 'silent' }).runStep(step);
  t.deepEqual(seen, [['a', 'b', 'c']], 'only targets with changes are ordered');
  t.deepEqual(log, ['start c', 'end c', 'start a', 'end a', 'start b', 'end b']);
  t.deepEqual(
    results.map((r) => [r.host, r.status, r.rollPosition]),
    [
      ['a', 'changed', 2],
      ['b', 'changed', 3],
      ['c', 'changed', 1],
      ['d', 'ok', undefined],
    ],
  );
});

test('a roll stops at the first failure: later waves are skipped and keep their state', async (t) => {
  const state = new Map([
    ['a', 1],
    ['b', 1],
    ['c', 1],
  ]);
  const { step, log } = rollingStep(state, 2, [['a'], ['b'], ['c']], 'b');
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  const results = await runner.runStep(step);
  t.deepEqual(log, ['start a', 'end a', 'start b']);
  t.deepEqual(
    results.map((r) => [r.host, r.status]),
    [
      ['a', 'changed'],
      ['b', 'failed'],
      ['c', 'skipped'],
    ],
  );
  t.regex(results[1]!.error!, /b did not come back/);
  t.is(results[2]!.error, 'not changed: the roll stopped at b');
  t.is(state.get('c'), 1);
  t.true(runner.failed);
});

test('a dry-run of a rolling step reports the waves it would follow and applies nothing', async (t) => {
  const state = new Map([
    ['a', 1],
    ['b', 1],
  ]);
  const { step, log } = rollingStep(state, 2, [['b'], ['a']]);
  const results = await new Runner({ dryRun: true, renderer: 'silent' }).runStep(step);
  t.deepEqual(log, []);
  t.deepEqual(
    results.map((r) => [r.host, r.status, r.rollPosition]),
    [
      ['a', 'changed', 2],
      ['b', 'changed', 1],
    ],
  );
});

test('a roll order that leaves out a target with changes is a bug, not a silent skip', async (t) => {
  const state = new Map([
    ['a', 1],
    ['b', 1],
  ]);
  const { step } = rollingStep(state, 2, [['a']]);
  await t.throwsAsync(new Runner({ dryRun: false, renderer: 'silent' }).runStep(step), { message: /does not name each target/ });
});

test('after an interrupt the change in flight finishes and no other starts: later waves and steps are skipped', async (t) => {
  const state = new Map([
    ['a', 1],
    ['b', 1],
  ]);
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
  t.deepEqual(
    results.map((r) => [r.host, r.status]),
    [
      ['a', 'changed'],
      ['b', 'skipped'],
    ],
  );
  t.regex(results[1]!.error!, /interrupted \(SIGINT\): not applied/);
  const later = await runner.runStep(fakeStep(new Map([['c', 1]]), 2).step);
  t.deepEqual(
    later.map((r) => [r.host, r.status, r.error]),
    [['c', 'skipped', 'interrupted (SIGINT): not started']],
  );
  t.is(runner.interrupted, 'SIGINT');
});

test("each phase's wall-clock time is kept in the order the phases ran, a failing one too; skipped ones have none", async (t) => {
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
  await runner.runPhases([
    {
      title: 'first',
      run: async () => {
        await pause(30);
        return 'done';
      },
    },
    { title: 'not selected', run: async () => 'never', skip: 'not selected by --tags / --skip-tags' },
    {
      title: 'second',
      run: async () => {
        await pause(5);
        throw new Error('broken');
      },
    },
  ]);
  t.deepEqual(
    runner.phaseTimes.map(({ phase }) => phase),
    ['first', 'second'],
  );
  t.true(runner.phaseTimes[0]!.ms >= 25);
});

/** A read-only step counting its checks: what an early check saves, and when it must not be used. */
function countingStep(state: Map<string, number>) {
  const checks: string[] = [];
  const { step } = fakeStep(state, 2);
  const check = async (target: string) => {
    checks.push(target);
    return state.get(target)!;
  };
  const counting: Step<number, number> = { ...step, name: 'counted', check };
  return { step: counting, checks };
}

test('an early check is used once when nothing changed on its target since; a change there of what it reads makes the step ask again', async (t) => {
  const state = new Map([
    ['a', 2],
    ['b', 2],
  ]);
  // `other` changes what `counted` reads; `unrelated` changes something else.
  const runner = new Runner({
    dryRun: false,
    renderer: 'silent',
    staleAfter: (step) => (step === 'other' ? ['counted-state'] : ['elsewhere']),
  });
  const { step, checks } = countingStep(state);
  runner.checkEarly(step, 'counted-state');
  await runner.runStep({ ...fakeStep(new Map([['a', 1]]), 2).step, name: 'unrelated' });
  t.deepEqual(checks, ['a', 'b'], 'asked at once');
  // Another step changes host b meanwhile (and the early answer for b is now stale: b holds 1).
  const other = fakeStep(new Map([['b', 1]]), 2);
  await runner.runStep({ ...other.step, name: 'other' });
  state.set('b', 1);
  const results = await runner.runStep(step);
  t.deepEqual(checks, ['a', 'b', 'b', 'b'], 'a from the early answer; b checked again, then re-checked after its apply');
  t.deepEqual(
    results.map((r) => [r.host, r.status]),
    [
      ['a', 'ok'],
      ['b', 'changed'],
    ],
  );
  // Used once: the next run of the step checks again.
  await runner.runStep(step);
  t.deepEqual(checks.slice(4), ['a', 'b']);
});

test('an early check that failed is asked again when the step runs', async (t) => {
  const state = new Map([['a', 2]]);
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  let calls = 0;
  const { step } = fakeStep(state, 2);
  const flaky: Step<number, number> = {
    ...step,
    check: async (target) => (++calls === 1 ? Promise.reject(new Error('not yet')) : state.get(target)!),
  };
  runner.checkEarly(flaky, 'state');
  const results = await runner.runStep(flaky);
  t.is(calls, 2);
  t.deepEqual(
    results.map((r) => r.status),
    ['ok'],
  );
});

/** A wait whose targets are ready after `readyAfter` looks (never, when absent). */
function countingWait(readyAfter: Record<string, number | undefined>, over: Partial<Wait<string>> = {}) {
  const looks = new Map<string, number>();
  const wait: Wait<string> = {
    name: 'settled',
    targets: Object.keys(readyAfter),
    // Ten times the looks the ready targets need: 200 ms failed 'b' once in a unit run beside the integration tests.
    deadlineMs: 2_000,
    pollMs: 10,
    async look(target) {
      const n = (looks.get(target) ?? 0) + 1;
      looks.set(target, n);
      const after = readyAfter[target];
      return after !== undefined && n >= after
        ? { ready: true, seen: 'yes', warnings: n > 1 ? [`ready after ${n} looks`] : [] }
        : { ready: false, reason: `look ${n}: not yet` };
    },
    pending: (reason) => `wait for it (now: ${reason})`,
    waiting: (reason) => `waiting: ${reason}`,
    failure: (target, reason) => `${target} not settled; last: ${reason}`,
    ...over,
  };
  return { wait, looks };
}

test('a wait looks until ready: ok (with what the look warned), or failed at its deadline saying what it last saw', async (t) => {
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  const { wait, looks } = countingWait({ a: 1, b: 3, c: undefined });
  const results = await runner.runWait(wait);
  t.deepEqual(
    results.map((r) => [r.host, r.status]),
    [
      ['a', 'ok'],
      ['b', 'ok'],
      ['c', 'failed'],
    ],
  );
  t.deepEqual([looks.get('a'), looks.get('b')], [1, 3]);
  t.deepEqual(results[1]!.warnings, ['ready after 3 looks']);
  t.regex(results[2]!.error!, /^c not settled; last: look \d+: not yet$/);
  t.true(looks.get('c')! > 3, 'looked again until the deadline');
  // The failed host is skipped by what follows, as after a failed step.
  t.deepEqual(
    (await runner.runWait(countingWait({ c: 1 }).wait)).map((r) => r.status),
    ['skipped'],
  );
});

test('a wait in a dry-run looks once: what is not ready yet is reported as the wait it would do', async (t) => {
  const runner = new Runner({ dryRun: true, renderer: 'silent' });
  const { wait, looks } = countingWait({ a: 1, b: 3 });
  const results = await runner.runWait(wait);
  t.deepEqual(
    results.map((r) => [r.host, r.status, r.changes.map((c) => c.summary)]),
    [
      ['a', 'ok', []],
      ['b', 'changed', ['wait for it (now: look 1: not yet)']],
    ],
  );
  t.deepEqual([...looks.values()], [1, 1]);
  t.false(runner.failed);
});

test('a look that says waiting cannot help fails at once with its reason', async (t) => {
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  const { wait, looks } = countingWait(
    { a: undefined },
    { look: async () => ({ ready: false, reason: 'its hypervisor is gone', final: true }) },
  );
  const [result] = await runner.runWait({ ...wait, deadlineMs: 60_000 });
  t.is(result!.status, 'failed');
  t.is(result!.error, 'its hypervisor is gone');
  t.is(looks.size, 0);
});

test('a fact is asked of every target: its answers, ok per target, a refusal fails that target alone', async (t) => {
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  const fact: Fact<number> = {
    name: 'size',
    targets: ['a', 'b'],
    ask: async (target) => (target === 'b' ? Promise.reject(new Error('no such thing')) : 3),
  };
  const { answers, results } = await runner.runFact(fact);
  t.deepEqual([...answers], [['a', 3]]);
  t.deepEqual(
    results.map((r) => [r.host, r.status, r.error]),
    [
      ['a', 'ok', undefined],
      ['b', 'failed', 'no such thing'],
    ],
  );
  t.true(runner.failed);
});

test('the patience a check gets: a run waits out the deadline and fails what is not ready; a dry-run looks once and hands back why', (t) => {
  const run = patienceOf(false);
  const dry = patienceOf(true);
  t.is(run.windowMs(90_000), 90_000);
  t.is(dry.windowMs(90_000), 0);
  t.throws(() => run.notReady(new Error('still booting')), { message: 'still booting' });
  t.is(dry.notReady(new Error('still booting')), 'still booting');
});

test('the run is told as events: phases in order, each ended with its line, skipped or failed with what to show; results as they are recorded', async (t) => {
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  const heard: string[] = [];
  runner.on((event) => {
    if (event.type === 'phases') heard.push(`phases ${event.titles.join(',')}`);
    if (event.type === 'phase-started') heard.push(`start ${event.title}`);
    if (event.type === 'phase-ended')
      heard.push(
        `end ${event.outcome.kind} ${'line' in event.outcome ? event.outcome.line : event.outcome.reason}${event.outcome.kind === 'failed' ? ` [${event.outcome.error}]` : ''}`,
      );
    if (event.type === 'result') heard.push(`result ${event.result.step}@${event.result.host} ${event.result.status}`);
  });
  const { step } = fakeStep(new Map([['a', 1]]), 2);
  await runner.runPhases([
    { title: 'grow', run: () => runner.runStep(step) },
    { title: 'fact', run: async () => 'three members' },
    { title: 'chosen out', run: async () => 'never', skip: 'not selected' },
    { title: 'broken', run: async () => Promise.reject(new Error('no such pool')) },
  ]);
  t.deepEqual(heard, [
    'phases grow,fact,chosen out,broken',
    'start grow',
    'result fake@a changed',
    'end done grow: 1 changed, 0 ok',
    'start fact',
    'end done fact: three members',
    'end skipped not selected',
    'start broken',
    'end failed broken [no such pool]',
  ]);
  t.deepEqual(
    runner.results.map((r) => r.host),
    ['a'],
    'the run log heard the result',
  );
});

test('a failure on the control node skips every later phase; a failure on a member, even one named localhost, only that member', async (t) => {
  const failing = <T extends Target>(target: T): Step<number, number, T> => ({
    name: 'broken',
    targets: [target],
    check: async () => {
      throw new Error('broken');
    },
    plan: () => [],
    apply: async () => undefined,
  });
  const runAfter = async (first: Step<number, number, Target>) => {
    const runner = new Runner({ dryRun: false, renderer: 'silent' });
    let ran = false;
    await runner.runPhases([
      { title: 'first', run: () => runner.runStep(first) },
      {
        title: 'later',
        run: async () => {
          ran = true;
          return 'done';
        },
      },
    ]);
    return { ran, runner };
  };
  const onControl = await runAfter(failing(CONTROL_NODE));
  t.false(onControl.ran);
  t.true(onControl.runner.hasFailed(CONTROL_NODE));
  t.deepEqual(
    onControl.runner.results.map((r) => [r.host, r.status]),
    [['localhost', 'failed']],
  );
  const onMember = await runAfter(failing('localhost'));
  t.true(onMember.ran);
  t.false(onMember.runner.hasFailed(CONTROL_NODE));
  t.true(onMember.runner.hasFailed('localhost'));
});

test('a phase that throws fails the run (exit 1), though no step on a host failed; the phases after it still run', async (t) => {
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  t.false(runner.failed);
  const ran: string[] = [];
  await runner.runPhases([
    {
      title: 'cluster',
      run: async () => {
        throw new Error('the cluster has lost its quorum for good');
      },
    },
    {
      title: 'after',
      run: async () => {
        ran.push('after');
        return 'ran';
      },
    },
  ]);
  t.true(runner.failed);
  t.deepEqual(ran, ['after']);
  t.deepEqual(runner.results, []);
});
