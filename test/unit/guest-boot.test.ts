import test from 'ava';
import { lookAtBoots, type BootLook } from '../../tasks/guest/agent.ts';
import { BootWaitFailed, waitForBoot, type BootWatch } from '../../tasks/guest/boot.ts';
import { VirshSession } from '../../tasks/libvirt/session.ts';
import { FakeVirshSession } from '../helpers/fake-virsh-session.ts';

/**
 * Waiting for a member's boot: one look through its agent (file calls, as libvirt answers them), and
 * the wait that looks again and tries SSH until the agent first answers, in simulated time.
 */

const OWNER = { namespace: 'urn:etcd-kvm:owner:1', id: '1234' };
const RESULT = '/run/cloud-init/result.json';
const STATUS = '/run/cloud-init/status.json';

/** Each domain's files as its agent sees them; libvirt's words for what fails. */
function fakeAgents(files: Record<string, string[] | 'no-agent' | 'foreign'>): { session: VirshSession; calls: string[] } {
  const calls: string[] = [];
  let handle = 1000;
  const fake = new FakeVirshSession((args) => {
    if (args[0] === 'metadata')
      return files[args[4]!] === 'foreign' ? '<owner cluster="other" id="9999"/>\n' : '<owner cluster="lab" id="1234"/>\n';
    const [, , , domain, json] = args as [string, string, string, string, string];
    const { execute, arguments: given } = JSON.parse(json) as { execute: string; arguments: { path?: string; handle?: number } };
    calls.push(`${domain} ${execute} ${given.path ?? given.handle}`);
    const there = files[domain]!;
    if (there === 'no-agent') return 'error: Guest agent is not responding: QEMU guest agent is not connected\n';
    if (execute === 'guest-file-close') return '{"return":{}}\n';
    if (there.includes(given.path!)) return `{"return":${handle++}}\n`;
    return `error: internal error: unable to execute QEMU agent command 'guest-file-open': failed to open file '${given.path}' (mode: 'r'): No such file or directory\n`;
  });
  return { session: new VirshSession(fake, 'hypervisor lab'), calls };
}

test("a look through the agent: cloud-init's result there, only its status, neither, no agent yet, not ours", async (t) => {
  const { session, calls } = fakeAgents({
    done: [STATUS, RESULT],
    booting: [STATUS],
    'no-cloud-init': [],
    starting: 'no-agent',
    foreign: 'foreign',
  });
  const looks = await lookAtBoots(session, ['done', 'booting', 'no-cloud-init', 'starting', 'foreign'], OWNER, RESULT, STATUS);
  t.deepEqual(looks, [
    'ended',
    'running',
    'ended',
    { unanswered: 'Guest agent is not responding: QEMU guest agent is not connected' },
    { unanswered: "not marked as this cluster's domain (owner id 1234)" },
  ]);
  // Nothing is opened in another cluster's domain; every handle opened is closed again.
  t.false(calls.some((call) => call.startsWith('foreign')));
  t.deepEqual(calls.filter((call) => call.includes('guest-file-close')).sort(), [
    'booting guest-file-close 1001',
    'done guest-file-close 1000',
  ]);
});

/** A scripted member: what the agent says at each look, when (simulated ms) its SSH first connects, and the calls made. */
function scripted(looks: (now: number) => BootLook, sshUpAt: number, fatal = false) {
  let clock = 0;
  const calls: string[] = [];
  const watch: BootWatch = {
    look: async () => {
      calls.push(`${clock} look`);
      return looks(clock);
    },
    connect: async () => {
      calls.push(`${clock} ssh`);
      if (fatal) return { connected: false, reason: 'hypervisor lab: cannot connect', fatal: true };
      return clock >= sshUpAt ? { connected: true } : { connected: false, reason: 'connection refused', fatal: false };
    },
  };
  const sleep = async (ms: number) => {
    clock += ms;
  };
  const timing = (windowMs: number) => ({ windowMs, pollMs: 500, retryMs: 2_000, now: () => clock, sleep });
  return { watch, timing, calls };
}

const silent: BootLook = { unanswered: 'QEMU guest agent is not connected' };

test('the agent answers first: SSH is not tried again, and the wait ends when the agent sees the boot end', async (t) => {
  const { watch, timing, calls } = scripted((now) => (now < 3_000 ? silent : now < 6_000 ? 'running' : 'ended'), 4_000);
  t.deepEqual(await waitForBoot(watch, timing(60_000)), { ended: 'agent' });
  // SSH tried at 0 and 2 s after that failed (refused); from 3000 on the agent answers and SSH is left alone, although it is up at 4000.
  t.deepEqual(
    calls.filter((call) => call.endsWith('ssh')),
    ['0 ssh', '2500 ssh'],
  );
  t.is(calls.at(-1), '6000 look');
});

test('an image without the agent: the wait goes on over SSH once it connects', async (t) => {
  const { watch, timing, calls } = scripted(() => silent, 5_000);
  t.deepEqual(await waitForBoot(watch, timing(60_000)), { ended: false, via: 'ssh' });
  t.deepEqual(
    calls.filter((call) => call.endsWith('ssh')),
    ['0 ssh', '2500 ssh', '5000 ssh'],
  );
});

test('a boot that does not end in the window fails with what the agent and SSH said last', async (t) => {
  const { watch, timing } = scripted((now) => (now < 1_000 ? silent : 'running'), Infinity);
  const error = await t.throwsAsync(waitForBoot(watch, timing(10_000)), { instanceOf: BootWaitFailed });
  t.is(error?.message, 'its boot did not end within 10 s (guest agent: the boot is still running; SSH: connection refused)');
});

test('an unreachable hypervisor ends the wait at once', async (t) => {
  const { watch, timing, calls } = scripted(() => silent, Infinity, true);
  await t.throwsAsync(waitForBoot(watch, timing(60_000)), { instanceOf: BootWaitFailed, message: 'hypervisor lab: cannot connect' });
  t.true(calls.length <= 3);
});

test('a dry-run looks once: ended, still booting, SSH only, or neither', async (t) => {
  t.deepEqual(await waitForBoot(scripted(() => 'ended', Infinity).watch, scripted(() => 'ended', Infinity).timing(0)), { ended: 'agent' });
  const booting = scripted(() => 'running', 0);
  t.deepEqual(await waitForBoot(booting.watch, booting.timing(0)), { ended: false, via: 'agent' });
  t.false(booting.calls.some((call) => call.endsWith('ssh')));
  const sshOnly = scripted(() => silent, 0);
  t.deepEqual(await waitForBoot(sshOnly.watch, sshOnly.timing(0)), { ended: false, via: 'ssh' });
  const neither = scripted(() => silent, Infinity);
  await t.throwsAsync(waitForBoot(neither.watch, neither.timing(0)), {
    message: 'neither its guest agent nor SSH answers (guest agent: QEMU guest agent is not connected; SSH: connection refused)',
  });
});
