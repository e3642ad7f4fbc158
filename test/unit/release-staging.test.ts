import test from 'ava';
import { ReleaseStaging } from '../../tasks/steps/release-staging.ts';

/** The release installed ahead of a roll: every member that installs one, at once, once; a failure is that member's own. */

const pendingOf = (installs: string[], others: string[] = []) => [
  ...installs.map((target) => ({ target, changes: [{ action: { kind: 'install-release' } }, { action: { kind: 'restart' } }] })),
  ...others.map((target) => ({ target, changes: [{ action: { kind: 'write' } }] })),
];

test('every member whose plan installs a release, at the same time, once however many members apply', async (t) => {
  const started: string[] = [];
  let running = 0;
  let most = 0;
  const staging = new ReleaseStaging(async (member) => {
    started.push(member);
    most = Math.max(most, ++running);
    await new Promise((resolve) => setTimeout(resolve, 20));
    running--;
  });
  staging.learn(pendingOf(['etcd-1', 'etcd-2', 'etcd-3'], ['etcd-4']));
  const [first, second] = await Promise.all([staging.staged(), staging.staged()]);
  t.deepEqual([...first].sort(), ['etcd-1', 'etcd-2', 'etcd-3']);
  t.is(first, second);
  t.deepEqual(started.sort(), ['etcd-1', 'etcd-2', 'etcd-3']);
  t.is(most, 3);
  await staging.staged();
  t.is(started.length, 3, 'installed once');
});

test('a member whose install ahead failed is left to its own turn; the others are staged', async (t) => {
  const staging = new ReleaseStaging(async (member) => {
    if (member === 'etcd-2') throw new Error('no space left on device');
  });
  staging.learn(pendingOf(['etcd-1', 'etcd-2', 'etcd-3']));
  t.deepEqual([...(await staging.staged())].sort(), ['etcd-1', 'etcd-3']);
});

test('one member alone, or none, installs nothing ahead', async (t) => {
  const installed: string[] = [];
  const install = async (member: string) => {
    installed.push(member);
  };
  const alone = new ReleaseStaging(install);
  alone.learn(pendingOf(['etcd-1'], ['etcd-2']));
  t.deepEqual([...(await alone.staged())], []);
  const unlearned = new ReleaseStaging(install);
  t.deepEqual([...(await unlearned.staged())], []);
  t.deepEqual(installed, []);
});
