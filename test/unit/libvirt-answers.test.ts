import test from 'ava';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { compareDomainXml, parseDomInfo } from '../../tasks/libvirt/domain-xml.ts';
import { volumeState } from '../../tasks/libvirt/volumes.ts';
import { isNotFound, missingObject, parseVirshBatch, Virsh, virshBatch, type Question, type VirshHost } from '../../tasks/libvirt/virsh.ts';
import { renderDomainXml } from '../../tasks/render/domain.ts';
import { loadInventory } from '../../tasks/inventory/load.ts';
import { VirshSession } from '../../tasks/libvirt/session.ts';
import { FakeVirshSession } from '../helpers/fake-virsh-session.ts';

/**
 * libvirt's answers, recorded from the lab (virsh 9.0, QEMU TCG): the batched probe's parser, the
 * semantic comparison of a rendered domain with libvirt's inactive definition, dominfo.
 */

const fixture = (name: string) => readFileSync(`test/fixtures/${name}`, 'utf8');
const LIVE = fixture('virsh-dumpxml-inactive-etcd-1.xml');

/**
 * A connection that answers with recorded output: the virsh batch with the recording up to the
 * batch's end marker, the pipelines (`sha256sum` here) with what the recording has after it.
 */
const replaying = (recorded: string): VirshHost => ({
  target: { label: 'hypervisor lab' },
  run: async () => {
    throw new Error('a replayed connection runs no command of its own');
  },
  exec: async (argv: readonly string[]) => {
    const end = recorded.indexOf('@@etcd-kvm@@\n');
    if (argv[2]!.includes('virsh')) return { command: 'sh', code: 0, stdout: end < 0 ? recorded : recorded.slice(0, end + 13), stderr: '' };
    return { command: 'sh', code: 0, stdout: end < 0 ? '' : recorded.slice(end + 13), stderr: '' };
  },
});

// What is asked does not matter to a replayed answer; only which questions are virsh commands and which pipelines.
const QUESTIONS: Record<string, Question> = {
  os: ['vol-info'],
  data: ['vol-info'],
  basePath: ['vol-path'],
  baseInfo: ['vol-info'],
  info: ['dominfo'],
  digest: { shell: 'sha256sum' },
  xml: ['dumpxml'],
  missing: ['dominfo'],
};

test('the batched probe splits a recorded answer into each question: exit code and output', async (t) => {
  const answers = await new Virsh(replaying(fixture('virsh-probe-lab-etcd-1.txt')), 'qemu:///system').probe(QUESTIONS);
  t.is(answers.os!.code, 0);
  t.regex(answers.os!.output, /^Name:\s+etcd-1-os\.qcow2$/m);
  t.is(answers.basePath!.output.trim(), '/var/lib/etcd-kvm-lab/pools/etcd-lab-images/debian-12-etcd.qcow2');
  t.regex(answers.digest!.output.trim(), /^[0-9a-f]{64} {2}-$/);
  t.true(answers.xml!.output.startsWith('<domain type='));
  t.like(parseDomInfo(answers.info!.output), { running: true, autostart: true, state: 'running' });
  t.is(answers.missing!.code, 1);
  t.true(isNotFound(answers.missing!, 'domain'));
  t.false(isNotFound(answers.os!, 'volume'));
});

test("with a session, virsh questions go to it and pipelines to their own execs; the answers read as a batch's", async (t) => {
  const recorded = fixture('virsh-probe-lab-etcd-1.txt');
  const batch = parseVirshBatch(recorded).answers;
  // The session answers each command with what the recorded batch answered for the question of that name.
  const session = new VirshSession(new FakeVirshSession(([, name]) => batch[name!]!.output), 'hypervisor lab');
  const questions = Object.fromEntries(
    Object.entries(QUESTIONS).map(([name, question]) => [name, 'shell' in question ? question : [question[0]!, name]]),
  );
  const answers = await new Virsh(replaying(recorded), 'qemu:///system', session).probe(questions);
  t.deepEqual(Object.fromEntries(Object.entries(answers).filter(([name]) => name !== 'digest')), batch);
  t.is(answers.digest!.code, 0);
  t.is(answers.digest!.output.trim(), '34ebf7b7ef3c7af3cd23c8e16a468db4f7711eb888be23dc24ab31eb33efc73a  -');
});

test('a volume question whose pool is missing says the pool is missing, never that the volume is', async (t) => {
  const answers = await new Virsh(replaying(fixture('virsh-probe-lab-no-pools.txt')), 'qemu:///system').probe(QUESTIONS);
  t.is(answers.os!.code, 1);
  t.is(missingObject(answers.os!), 'pool');
  t.false(isNotFound(answers.os!, 'volume'));
  t.true(isNotFound(answers.xml!, 'domain'));
  t.throws(() => volumeState(answers.os!, 'OS volume of etcd-1'), { message: /pool.*etcd-lab-gone.*check volume_pool/ });
});

test('a batch cut short answers nothing for certain: the first question is named', async (t) => {
  const recorded = fixture('virsh-probe-lab-etcd-1.txt');
  const cut = recorded.slice(0, recorded.indexOf('@@etcd-kvm@@xml'));
  await t.throwsAsync(new Virsh(replaying(cut), 'qemu:///system').probe(QUESTIONS), {
    message: /probe on hypervisor lab gave no answer for os/,
  });
});

test('a batch is one virsh argument: every word quoted for sh, which virsh reads the same way', (t) => {
  const batch = virshBatch([
    ['title', ['desc', '--title', "it's; shutdown x"]],
    ['state', ['domstate', 'etcd-1']],
  ]);
  t.is(batch, "echo @@etcd-kvm@@title; desc --title 'it'\\''s; shutdown x'; echo @@etcd-kvm@@state; domstate etcd-1; echo @@etcd-kvm@@");
});

test('a batch command failed when it printed an error line; pipelines after the batch keep their own exit codes', (t) => {
  const { answers, rest } = parseVirshBatch(
    "@@etcd-kvm@@a\nrunning\n\n@@etcd-kvm@@b\nerror: failed to get domain 'x'\n\n@@etcd-kvm@@\n@@etcd-kvm@@digest\nabc  -\n\n@@etcd-kvm@@rc 0\n",
  );
  t.deepEqual(answers, { a: { code: 0, output: 'running\n' }, b: { code: 1, output: "error: failed to get domain 'x'\n" } });
  t.true(rest.startsWith('@@etcd-kvm@@digest\n'));
});

test('dominfo: state and autostart, recorded', (t) => {
  t.deepEqual(parseDomInfo(fixture('virsh-dominfo-etcd-1.txt')), { running: true, active: true, autostart: true, state: 'running' });
  t.deepEqual(parseDomInfo('State:          shut off\nAutostart:      disable\n'), {
    running: false,
    active: false,
    autostart: false,
    state: 'shut off',
  });
});

test('dominfo: a domain is active until it is off; "in shutdown", paused or unread is not off', (t) => {
  const cases: [state: string, running: boolean, active: boolean][] = [
    ['running', true, true],
    ['in shutdown', false, true],
    ['paused', false, true],
    ['shut off', false, false],
    ['crashed', false, false],
  ];
  for (const [state, running, active] of cases) t.like(parseDomInfo(`State:          ${state}\n`), { state, running, active }, state);
  t.like(parseDomInfo('no state line'), { state: 'unknown', active: true });
});

/** etcd-1's domain as the tool renders it from the lab inventory, with `edit` applied to the inventory text first. */
function renderedEtcd1(edit: (yaml: string) => string = (yaml) => yaml): string {
  // Beside the original, so its relative paths resolve; .e2e-* names are ignored by git.
  const path = join('inventories', `.e2e-unit-${process.pid}.yaml`);
  writeFileSync(path, edit(readFileSync('inventories/lab.yaml', 'utf8')));
  try {
    const inventory = loadInventory(path);
    return renderDomainXml(
      { cluster: inventory.cluster.name, id: '5b0e7a4c-1d2e-4f3a-9b8c-7d6e5f4a3b2c', adoptsUnmarked: false },
      inventory.members.find((member) => member.name === 'etcd-1')!,
    );
  } finally {
    rmSync(path, { force: true });
  }
}

const cases: { name: string; rendered?: (yaml: string) => string; live?: (xml: string) => string; same: boolean; shows?: RegExp }[] = [
  { name: 'the lab definition against what libvirt made of it (uuid, addresses, controllers, q35 → pc-q35-7.2): the same', same: true },
  {
    name: 'more memory in the inventory: differs, and the diff shows both sizes',
    rendered: (y) => y.replace('memory: 1024', 'memory: 1152'),
    same: false,
    shows: /1179648/,
  },
  {
    name: 'a NIC whose MAC was changed by hand: differs',
    live: (x) => x.replace(/<mac address='([0-9a-f:]+)'\/>/, "<mac address='52:54:00:aa:bb:cc'/>"),
    same: false,
    shows: /52:54:00:aa:bb:cc/,
  },
  {
    name: 'a disk attached by hand, only in the live definition: differs (the description promises drift)',
    live: (x) =>
      x.replace(
        '</devices>',
        "<disk type='file' device='disk'><source file='/var/lib/extra.img'/><target dev='vdz' bus='virtio'/></disk></devices>",
      ),
    same: false,
    shows: /\/var\/lib\/extra\.img/,
  },
  {
    name: 'a device libvirt adds by itself (another controller, an input): the same',
    live: (x) =>
      x.replace('</devices>', "<controller type='pci' index='9' model='pcie-root-port'/><input type='tablet' bus='usb'/></devices>"),
    same: true,
  },
];
for (const row of cases) {
  test(`domain comparison: ${row.name}`, (t) => {
    const rendered = renderedEtcd1(row.rendered);
    const live = row.live ? row.live(LIVE) : LIVE;
    const comparison = compareDomainXml(rendered, live);
    t.is(comparison.same, row.same, `${comparison.live}\n---\n${comparison.wanted}`);
    if (row.shows) t.regex(`${comparison.live}\n${comparison.wanted}`, row.shows);
  });
}
