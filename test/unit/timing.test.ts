import test from 'ava';
import { deployTiming, formatOutside } from '../../tasks/core/timing.ts';
import { Runner } from '../../tasks/core/runner.ts';

test("a run's timing: what no phase and no named part accounts for is the rest of its work, rounded to the millisecond", (t) => {
  const timing = deployTiming({
    modulesLoadedAtMs: 412.4,
    workMs: 3460.6,
    cpuMs: 1160.2,
    phases: [
      { phase: 'pki', ms: 20.2 },
      { phase: 'guest', ms: 2000.4 },
    ],
    outside: [
      { name: 'open the state directory', ms: 10 },
      { name: 'run lock: look (connecting)', ms: 800 },
      { name: 'close connections', ms: 30 },
    ],
  });
  t.deepEqual(timing, {
    modulesLoadedAtMs: 412,
    workMs: 3461,
    cpuMs: 1160,
    phases: [
      { phase: 'pki', ms: 20 },
      { phase: 'guest', ms: 2000 },
    ],
    outside: [
      { name: 'open the state directory', ms: 10 },
      { name: 'run lock: look (connecting)', ms: 800 },
      { name: 'close connections', ms: 30 },
    ],
    unaccountedMs: 600,
  });
  t.is(
    formatOutside(timing),
    'outside the phases (wall-clock, in order): open the state directory 0.01 s, run lock: look (connecting) 0.80 s, close connections 0.03 s, unaccounted 0.60 s',
  );
});

test('Runner.timed records work outside the phases in order, also when it fails, and hands back its answer', async (t) => {
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  t.is(await runner.timed('first', async () => 'answer'), 'answer');
  await t.throwsAsync(
    runner.timed('second', async () => {
      await new Promise((resolve) => setTimeout(resolve, 30));
      throw new Error('broken');
    }),
    { message: 'broken' },
  );
  t.deepEqual(
    runner.spans.map(({ name }) => name),
    ['first', 'second'],
  );
  t.true(runner.spans[1]!.ms >= 25, String(runner.spans[1]!.ms));
});
