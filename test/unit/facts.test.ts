import test from 'ava';
import { FactCache } from '../../tasks/core/facts.ts';
import { Runner } from '../../tasks/core/runner.ts';
import type { Step } from '../../tasks/core/step.ts';

test('the fact cache keeps answers by target, kind and question until a change of that kind there drops them', async (t) => {
  const facts = new FactCache();
  facts.put('etcd-1', 'libvirt', 'dominfo', Promise.resolve('running'));
  facts.put('etcd-1', 'guest', 'files', Promise.resolve('digests'));
  facts.put('etcd-2', 'libvirt', 'dominfo', Promise.resolve('shut off'));
  t.is(await facts.get('etcd-1', 'libvirt', 'dominfo'), 'running');
  t.is(await facts.get('etcd-1', 'libvirt', 'dominfo'), 'running', 'kept for the next asker');
  facts.invalidate('etcd-1', ['libvirt']);
  t.is(facts.get('etcd-1', 'libvirt', 'dominfo'), undefined);
  t.false(facts.has('etcd-1', 'libvirt'));
  t.true(facts.has('etcd-1', 'guest'), 'another kind stays');
  t.is(await facts.get('etcd-2', 'libvirt', 'dominfo'), 'shut off', 'another target stays');
  t.is(await facts.take('etcd-1', 'guest', 'files'), 'digests');
  t.is(facts.take('etcd-1', 'guest', 'files'), undefined, 'taken once');
});

test('the runner drops what a change makes stale before the step re-checks: the re-check asks again', async (t) => {
  const runner = new Runner({ dryRun: false, renderer: 'silent', staleAfter: (step) => (step === 'disks' ? ['libvirt'] : []) });
  let size = 1;
  const asked: number[] = [];
  // The step reads its fact through the cache, as the remote steps do.
  const read = async () => {
    const kept = runner.facts.get<number>('etcd-1', 'libvirt', 'size');
    if (kept) return kept;
    asked.push(size);
    const answer = Promise.resolve(size);
    runner.facts.put('etcd-1', 'libvirt', 'size', answer);
    return answer;
  };
  const disks: Step<number, number> = {
    name: 'disks',
    targets: ['etcd-1'],
    check: read,
    plan: (current) => (current < 2 ? [{ summary: 'grow to 2', action: 2 }] : []),
    apply: async ([change]) => {
      size = change!.action;
    },
  };
  const [result] = await runner.runStep(disks);
  t.is(result!.status, 'changed', result!.error);
  t.deepEqual(asked, [1, 2], 'asked before the change, and again after it');
  // Nothing changed since: the next check takes the kept answer.
  t.is((await runner.runStep(disks))[0]!.status, 'ok');
  t.deepEqual(asked, [1, 2]);
});
