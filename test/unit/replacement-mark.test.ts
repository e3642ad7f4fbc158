import test from 'ava';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { commandLine } from '../../tasks/core/shell.ts';
import { isMarkedReplacing, markReplacingArgs, replacingQuestion } from '../../tasks/steps/depart.ts';
import { parseVirshBatch, virshBatch, type ProbeAnswer } from '../../tasks/libvirt/virsh.ts';
import { OWNER_NAMESPACE } from '../../tasks/render/domain.ts';

/**
 * The being-replaced mark: the question's answers read as a table, and the mark written and read back
 * by the real virsh, on libvirt's built-in test driver (test:///default: one domain, `test`, running;
 * its state lives as long as the one virsh process, so each case is one batch, as the probe asks).
 */

/** The test driver's domain, as the member the questions are about. */
const domain = { name: 'test' };

const ok = (output: string): ProbeAnswer => ({ code: 0, output });
const failed = (output: string): ProbeAnswer => ({ code: 1, output });

const answers: { name: string; answer: ProbeAnswer; marked: boolean }[] = [
  { name: 'the mark', answer: ok('<replacing member-id="d"/>'), marked: true },
  { name: 'the mark with its prefix', answer: ok('<etcd-kvm:replacing xmlns:etcd-kvm="urn:etcd-kvm:replacing:1"/>'), marked: true },
  {
    name: 'no such metadata (virsh 9.0)',
    answer: failed('error: metadata not found: Requested metadata element is not present'),
    marked: false,
  },
  { name: 'no domain (virsh 9.0)', answer: failed("error: failed to get domain 'etcd-2'"), marked: false },
];

for (const row of answers) {
  test(`replacing mark: ${row.name}`, (t) => {
    t.is(isMarkedReplacing('etcd-2', row.answer), row.marked);
  });
}

test('replacing mark: any other failure is no answer', (t) => {
  t.throws(() => isMarkedReplacing('etcd-2', failed('error: failed to connect to the hypervisor')), {
    message: /^cannot read whether domain etcd-2 is being replaced: error: failed to connect to the hypervisor$/,
  });
});

/** Runs `commands` in one virsh on the test driver; each command's answer, as the probe reads a batch (errors with the output, as Virsh asks). */
async function virshTestDriver(commands: Record<string, readonly string[]>): Promise<Record<string, ProbeAnswer>> {
  const script = `${commandLine(['virsh', '-c', 'test:///default', virshBatch(Object.entries(commands))])} 2>&1`;
  // virsh exits 1 when a command of the batch failed; its output is the answer all the same.
  const { stdout } = await promisify(execFile)('sh', ['-c', script]).catch((error: { stdout: string }) => error);
  return parseVirshBatch(stdout).answers;
}

/** virsh's arguments as the question carries them. */
const question = (member: { name: string }) => replacingQuestion(member) as readonly string[];

test('replacing mark on real virsh: a running domain, marked live and persistent, reads marked live and after a stop', async (t) => {
  const seen = await virshTestDriver({
    before: question(domain),
    mark: markReplacingArgs(domain, '13', true),
    live: question(domain),
    destroy: ['destroy', 'test'],
    persistent: question(domain),
  });
  t.false(isMarkedReplacing('test', seen.before!));
  t.is(seen.mark!.code, 0);
  t.true(isMarkedReplacing('test', seen.live!));
  t.true(isMarkedReplacing('test', seen.persistent!));
  t.regex(seen.persistent!.output, /member-id="d"/);
});

test('replacing mark on real virsh: a shut-off domain is marked in its persistent definition only (libvirt refuses --live)', async (t) => {
  const seen = await virshTestDriver({
    destroy: ['destroy', 'test'],
    live: markReplacingArgs(domain, '13', true),
    config: markReplacingArgs(domain, '13', false),
    read: question(domain),
    start: ['start', 'test'],
    started: question(domain),
  });
  t.is(seen.live!.code, 1);
  t.regex(seen.live!.output, /domain is not running/);
  t.is(seen.config!.code, 0);
  t.true(isMarkedReplacing('test', seen.read!));
  t.true(isMarkedReplacing('test', seen.started!));
});

test('replacing mark on real virsh: gone with the domain once it is undefined', async (t) => {
  const seen = await virshTestDriver({
    mark: markReplacingArgs(domain, '13', true),
    destroy: ['destroy', 'test'],
    undefine: ['undefine', 'test'],
    after: question(domain),
  });
  t.is(seen.undefine!.code, 0);
  t.false(isMarkedReplacing('test', seen.after!));
});

test("replacing mark on real virsh: apart from the owner's mark", async (t) => {
  const seen = await virshTestDriver({
    mark: markReplacingArgs(domain, '13', true),
    owner: ['metadata', '--domain', 'test', '--uri', OWNER_NAMESPACE],
  });
  t.regex(seen.owner!.output, /metadata not found/);
});
