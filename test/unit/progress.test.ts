import test from 'ava';
import { Progress } from '../../tasks/core/progress.ts';
import { Runner } from '../../tasks/core/runner.ts';

test('progress: what each host waits on and for how long; a repeated state keeps its start; a done host leaves the line', (t) => {
  let now = 0;
  const progress = new Progress(() => now);
  const seen: string[] = [];
  progress.onChange((host, what) => seen.push(`${host}: ${what}`));
  t.is(progress.summary(), '');
  progress.update('etcd-1', 'waiting for SSH (booting)');
  progress.update('etcd-2', 'waiting for SSH (booting)');
  now = 40_000;
  progress.update('etcd-1', 'waiting for SSH (booting)');
  progress.update('etcd-2', 'SSH up, first boot running (cloud-init)');
  now = 52_400;
  t.is(progress.summary(), 'etcd-1: waiting for SSH (booting) (52 s) · etcd-2: SSH up, first boot running (cloud-init) (12 s)');
  progress.done('etcd-1');
  t.is(progress.summary(), 'etcd-2: SSH up, first boot running (cloud-init) (12 s)');
  t.deepEqual(
    seen,
    ['etcd-1: waiting for SSH (booting)', 'etcd-2: waiting for SSH (booting)', 'etcd-2: SSH up, first boot running (cloud-init)'],
    'a change is told once',
  );
});

test('the runner forgets the waits of a phase when it ends', async (t) => {
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  const run = async () => {
    runner.progress.update('etcd-1', 'waiting for etcd: no leader');
    return [];
  };
  await runner.runPhases([{ title: 'health', run }]);
  t.is(runner.progress.summary(), '');
});
