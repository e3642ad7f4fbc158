import test from 'ava';
import { guestReleaseOf } from '../../tasks/render/etcd-release.ts';
import { ReleaseStaging } from '../../tasks/steps/release-staging.ts';

/** The releases installed ahead of a roll: every member that installs one, one at a time in the roll's order, once; a failure is that member's own. */

const v3516 = guestReleaseOf({ major: 3, minor: 5, patch: 16 });
const v3530 = guestReleaseOf({ major: 3, minor: 5, patch: 30 });

const pendingOf = (installs: string[], others: string[] = [], release = v3516) => [
  ...installs.map((target) => ({
    target,
    changes: [{ action: { kind: 'install-release', release } }, { action: { kind: 'restart' } }],
  })),
  ...others.map((target) => ({ target, changes: [{ action: { kind: 'write' } }] })),
];
const MEMBERS = ['etcd-1', 'etcd-2', 'etcd-3', 'etcd-4'];
const stagedOf = (ahead: (member: string, release: typeof v3516) => boolean, release = v3516) => MEMBERS.filter((m) => ahead(m, release));

test("every member whose plan installs a release, one at a time in the roll's order (the leader last), once however many members apply", async (t) => {
  const started: string[] = [];
  let running = 0;
  let most = 0;
  const staging = new ReleaseStaging(async (member) => {
    started.push(member);
    most = Math.max(most, ++running);
    await new Promise((resolve) => setTimeout(resolve, 20));
    running--;
  });
  // etcd-1 leads: the roll takes it last.
  staging.learn(pendingOf(['etcd-1', 'etcd-2', 'etcd-3'], ['etcd-4']), ['etcd-4', 'etcd-2', 'etcd-3', 'etcd-1']);
  const [first, second] = await Promise.all([staging.staged(), staging.staged()]);
  t.deepEqual(stagedOf(first), ['etcd-1', 'etcd-2', 'etcd-3']);
  t.deepEqual(stagedOf(second), ['etcd-1', 'etcd-2', 'etcd-3']);
  // Another release than the one installed is not said to be there.
  t.deepEqual(stagedOf(first, v3530), []);
  t.deepEqual(started, ['etcd-2', 'etcd-3', 'etcd-1']);
  t.is(most, 1, 'never two members at once');
  await staging.staged();
  t.is(started.length, 3, 'installed once');
});

test("a member the roll's order does not name (it keeps running) installs after the ones it names", async (t) => {
  const started: string[] = [];
  const staging = new ReleaseStaging(async (member) => {
    started.push(member);
  });
  staging.learn(pendingOf(['etcd-1', 'etcd-2', 'etcd-3']), ['etcd-3', 'etcd-2']);
  await staging.staged();
  t.deepEqual(started, ['etcd-3', 'etcd-2', 'etcd-1']);
});

test("a member that installs two releases (the one it rolls to, and etcd.stage_version's) installs them one after the other", async (t) => {
  const started: string[] = [];
  const staging = new ReleaseStaging(async (member, release) => {
    started.push(`${member} ${release.dir}`);
  });
  const pending = pendingOf(['etcd-1', 'etcd-2']).map(({ target, changes }) => ({
    target,
    changes: [...changes, { action: { kind: 'install-release', release: v3530 } }],
  }));
  staging.learn(pending, ['etcd-1', 'etcd-2']);
  const ahead = await staging.staged();
  t.deepEqual(stagedOf(ahead), ['etcd-1', 'etcd-2']);
  t.deepEqual(stagedOf(ahead, v3530), ['etcd-1', 'etcd-2']);
  t.deepEqual(
    started.filter((line) => line.startsWith('etcd-1')),
    [`etcd-1 ${v3516.dir}`, `etcd-1 ${v3530.dir}`],
  );
});

test('a member whose install ahead failed is left to its own turn; the others are staged', async (t) => {
  const staging = new ReleaseStaging(async (member) => {
    if (member === 'etcd-2') throw new Error('no space left on device');
  });
  staging.learn(pendingOf(['etcd-1', 'etcd-2', 'etcd-3']), MEMBERS);
  t.deepEqual(stagedOf(await staging.staged()), ['etcd-1', 'etcd-3']);
});

test('one member alone, or none, installs nothing ahead', async (t) => {
  const installed: string[] = [];
  const install = async (member: string) => {
    installed.push(member);
  };
  const alone = new ReleaseStaging(install);
  alone.learn(pendingOf(['etcd-1'], ['etcd-2']), MEMBERS);
  t.deepEqual(stagedOf(await alone.staged()), []);
  const unlearned = new ReleaseStaging(install);
  t.deepEqual(stagedOf(await unlearned.staged()), []);
  t.deepEqual(installed, []);
});
