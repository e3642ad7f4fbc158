import test from 'ava';
import { FactCache } from '../../tasks/core/facts.ts';
import { DigestMemory, RACY_NS } from '../../tasks/guest/digest-memory.ts';
import type { GuestQuestions } from '../../tasks/guest/facts.ts';
import { sha256 } from '../../tasks/core/digest.ts';
import { GuestProbe } from '../../tasks/guest/probe.ts';
import { loadInventory } from '../../tasks/inventory/load.ts';
import { FakeGuests } from '../helpers/fake-guest-agent.ts';
import { unconnected } from '../helpers/unconnected.ts';

/**
 * A member's facts through its guest agent, as a no-op asks them: one process (guest/facts.ts
 * AGENT_PROBE_SCRIPT), then file calls for what its answer leaves to read. The agents are a
 * stand-in over in-memory files; the real ones are the lab's.
 */

const lab = loadInventory('inventories/lab.yaml');
const member = lab.members[0]!;
const ENV = '/etc/etcd/etcd.env';
const KEY = '/etc/etcd/tls/server.key';
const questions: GuestQuestions = {
  paths: [ENV, KEY],
  units: ['etcd.service'],
  environmentUnits: ['etcd.service'],
  dataDir: '/var/lib/etcd',
};
const LINK = 0o120777;

function guest(): FakeGuests {
  const guests = new FakeGuests('cluster-1', 64);
  const at = (path: string, content: string, mode?: number) => guests.write(member.name, path, content, mode ? { mode } : {});
  at(ENV, `ETCD_NAME=etcd-1\nETCD_QUOTA_BACKEND_BYTES=${'9'.repeat(100)}\n`);
  at(KEY, 'PRIVATE KEY', 0o100400);
  at('/run/systemd/generator', '', 0o40755);
  at('/etc/systemd/system/multi-user.target.wants/etcd.service', '', LINK);
  at('/run/cloud-init/result.json', '{"v1": {"errors": []}}');
  at('/var/lib/etcd/member', '', 0o40700);
  at('/sys/fs/cgroup/system.slice/etcd.service/cgroup.procs', '543\n601\n');
  at('/proc/543/environ', 'ETCD_NAME=etcd-1\0ETCD_QUOTA_BACKEND_BYTES=100\0');
  guests.nowNs += 10_000_000_000n;
  at('/run/systemd/units/invocation:etcd.service', '', LINK);
  guests.nowNs += 10_000_000_000n;
  return guests;
}

const probeOf = (guests: FakeGuests, digests = DigestMemory.empty()) => {
  const session = guests.session();
  return new GuestProbe(new FactCache(), unconnected(lab).memberSsh, { get: async () => session }, () => 'cluster-1', digests);
};
const noSsh = () => Promise.reject(new Error('the agent answers: no SSH'));
const managedOpened = (guests: FakeGuests) => guests.opened.filter(({ path }) => questions.paths.includes(path)).map(({ path }) => path);

test('every fact from one process (the shell, then stat) and file calls: digests, modes, owners, units, environment, data, cloud-init; every handle closed', async (t) => {
  const guests = guest();
  const facts = await probeOf(guests).askNow(member, questions, noSsh);
  t.like(facts.files.get(KEY), { digest: sha256('PRIVATE KEY'), mode: 0o400, owner: 'root:root' });
  // Read in several chunks (64 bytes each here): the whole file, not its first chunk.
  t.is(facts.files.get(ENV)!.digest, sha256(`ETCD_NAME=etcd-1\nETCD_QUOTA_BACKEND_BYTES=${'9'.repeat(100)}\n`));
  t.like(facts.units.get('etcd.service'), { active: 'active', sub: 'running', enabled: 'enabled' });
  t.is(facts.environments.get('etcd.service')?.get('ETCD_QUOTA_BACKEND_BYTES'), '100');
  t.true(facts.dataDirInitialized);
  t.deepEqual(facts.cloudInit, { state: 'done' });
  t.is(guests.calls.get(`${member.name} guest-exec`), 1, 'one process: the shell that becomes stat');
  t.is(guests.openHandles, 0);
});

test('a file whose identity is unchanged since it was read is not read again; one written since is, and its digest is the new one', async (t) => {
  const guests = guest();
  const digests = DigestMemory.empty();
  await probeOf(guests, digests).askNow(member, questions, noSsh);
  t.deepEqual(managedOpened(guests).sort(), [ENV, KEY]);
  guests.opened.length = 0;
  const again = await probeOf(guests, digests).askNow(member, questions, noSsh);
  t.deepEqual(
    guests.opened.map(({ path }) => path),
    ['/proc/543/environ'],
    "a no-op reads no managed file: cloud-init's result and the units' processes come with stat's answer",
  );
  t.is(again.files.get(KEY)!.digest, sha256('PRIVATE KEY'));

  guests.write(member.name, ENV, 'ETCD_NAME=edited\n');
  const edited = await probeOf(guests, digests).askNow(member, questions, noSsh);
  t.deepEqual(managedOpened(guests), [ENV]);
  t.is(edited.files.get(ENV)!.digest, sha256('ETCD_NAME=edited\n'));
  // Changed in the very moment it was read: not trusted to keep its identity, so read again.
  guests.opened.length = 0;
  await probeOf(guests, digests).askNow(member, questions, noSsh);
  t.deepEqual(managedOpened(guests), [ENV], 'racy: read again');
  guests.nowNs += RACY_NS + 1n;
  guests.opened.length = 0;
  await probeOf(guests, digests).askNow(member, questions, noSsh);
  await probeOf(guests, digests).askNow(member, questions, noSsh);
  t.deepEqual(managedOpened(guests), [ENV], 'read once more, then remembered');
});

test('a managed path that is a directory has no digest and fails nothing (as sha256sum); a regular file the agent cannot read sends the probe to SSH', async (t) => {
  const guests = guest();
  guests.write(member.name, KEY, '', { mode: 0o40700 });
  const facts = await probeOf(guests).askNow(member, questions, noSsh);
  t.like(facts.files.get(KEY), { digest: '', mode: 0o700 });
  // A regular file whose read fails: not facts about it, the SSH way instead (refused here).
  const broken = guest();
  broken.failingReads.add(ENV);
  await t.throwsAsync(probeOf(broken).askNow(member, questions, noSsh), { message: 'the agent answers: no SSH' });
  // The same for a secret, or cloud-init's result, that the probe's shell cannot open: never "empty", never "still booting".
  for (const path of [KEY, '/run/cloud-init/result.json']) {
    const unreadable = guest();
    unreadable.failingReads.add(path);
    await t.throwsAsync(
      probeOf(unreadable).askNow(member, { ...questions, secrets: [KEY] }, noSsh),
      { message: 'the agent answers: no SSH' },
      path,
    );
  }
});

test("a secret's digest is never remembered: the key is read on every run (printed by the probe, no file call), and guest-files.json holds nothing of it", async (t) => {
  const guests = guest();
  const digests = DigestMemory.empty();
  const withSecret: GuestQuestions = { ...questions, secrets: [KEY] };
  const first = await probeOf(guests, digests).askNow(member, withSecret, noSsh);
  t.is(first.files.get(KEY)!.digest, sha256('PRIVATE KEY'));
  // Changed with its identity kept (same inode, size and times): a remembered digest would miss it.
  const file = guests.files.get(member.name)!.get(KEY)!;
  file.content = 'PRIVATE KAY';
  const second = await probeOf(guests, digests).askNow(member, withSecret, noSsh);
  t.is(second.files.get(KEY)!.digest, sha256('PRIVATE KAY'));
  t.deepEqual(managedOpened(guests), [ENV], 'the settings once; the key never through a file call');
  t.deepEqual(Object.keys(digests.entries[member.name] ?? {}), [ENV]);
});
