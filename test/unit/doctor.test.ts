import test from 'ava';
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { controlNodeChecks, type DoctorCheck, doctorChecks, formatDoctor } from '../../tasks/doctor/checks.ts';
import {
  controlNodeFacts,
  type DoctorFacts,
  groundQuestions,
  libvirtVersion,
  networkFacts,
  poolFacts,
  reachedFacts,
  volumeFacts,
} from '../../tasks/doctor/facts.ts';
import { groundAsked } from '../../tasks/doctor/ground.ts';
import type { ProbeAnswer } from '../../tasks/libvirt/virsh.ts';
import { baseDocument, load } from '../helpers/inventory.ts';
import { scratchDir } from '../helpers/scratch.ts';

const ok = (output: string): ProbeAnswer => ({ code: 0, output });
const error = (output: string): ProbeAnswer => ({ code: 1, output: `error: ${output}` });
const GIB = 1024 ** 3;

/** Two hypervisors, etcd-3 on the second over macvtap; 4 GiB OS disks and 1 GiB data disks. Loaded once. */
const inventory = (() => {
  let loaded: ReturnType<typeof load> | undefined;
  return () => (loaded ??= twoHypervisors());
})();

function twoHypervisors() {
  const doc = baseDocument();
  doc.hypervisors = { hv: { address: '127.0.0.1', domain_type: 'qemu' }, hv2: { address: '127.0.0.2', pool: 'fast' } };
  doc.defaults = { ...(doc.defaults as object), os_volume_size_gib: 4, data_volume_size_gib: 1 };
  doc.members[0]!.hypervisor = 'hv';
  doc.members[1]!.hypervisor = 'hv';
  doc.members[2] = {
    name: 'etcd-3',
    hypervisor: 'hv2',
    reach_via: 'direct',
    macvtap_interfaces: [{ interface: 'eno1', ip: '10.10.0.13', prefix_length: 24, gateway: '10.10.0.1' }],
  };
  return load(doc);
}

test('the ground asked of each hypervisor: its members, their pools and base image, networks, macvtap devices and volumes', (t) => {
  const [hv, hv2] = groundAsked(inventory());
  t.like(hv, { members: ['etcd-1', 'etcd-2'], pools: ['default', 'images'], networks: ['net'], macvtapDevices: [] });
  t.deepEqual(hv!.baseImages, [{ pool: 'images', volume: 'base.qcow2' }]);
  t.deepEqual(
    hv!.volumes.map((volume) => [volume.member, volume.pool, volume.bytes]),
    [
      ['etcd-1', 'default', 4 * GIB],
      ['etcd-1', 'default', GIB],
      ['etcd-2', 'default', 4 * GIB],
      ['etcd-2', 'default', GIB],
    ],
  );
  t.like(hv2, { members: ['etcd-3'], pools: ['fast', 'images'], networks: [], macvtapDevices: ['eno1'] });
});

test("virsh's answers read: libvirt's version, a pool's state and free bytes, a network, a volume; missing apart from failing", (t) => {
  t.is(libvirtVersion(ok('Compiled against library: libvirt 9.0.0\nRunning against daemon: 9.0.0\n')), '9.0.0');
  t.is(libvirtVersion(error('failed to connect to the hypervisor')), undefined);
  t.deepEqual(poolFacts('p', ok('Name:  p\nState:          running\nCapacity:       100\nAvailable:      4096\n')), {
    name: 'p',
    state: 'running',
    availableBytes: 4096,
  });
  t.deepEqual(poolFacts('p', ok('Name:  p\nState:          inactive\n')), { name: 'p', state: 'inactive' });
  t.deepEqual(poolFacts('p', error("failed to get pool 'p'\nerror: Storage pool not found: no storage pool with matching name 'p'")), {
    name: 'p',
    state: 'missing',
  });
  t.deepEqual(poolFacts('p', error('failed to connect')), { name: 'p', error: 'failed to connect' });
  t.deepEqual(networkFacts('n', ok('Name: n\nActive:         yes\n')), { name: 'n', active: true });
  t.deepEqual(networkFacts('n', ok('Name: n\nActive:         no\n')), { name: 'n', active: false });
  t.deepEqual(networkFacts('n', error("Network not found: no network with matching name 'n'")), { name: 'n', missing: true });
  t.deepEqual(volumeFacts('p', 'v', ok('Name: v\nCapacity:       2147483648\n')), { pool: 'p', volume: 'v', bytes: 2 * GIB });
  t.deepEqual(volumeFacts('p', 'v', error("Storage volume not found: no storage vol with matching path 'v'")), {
    pool: 'p',
    volume: 'v',
    missing: true,
  });
  // The pool's absence leaves the volume's unknown: an error, not "missing".
  t.true('error' in volumeFacts('p', 'v', error("Storage pool not found: no storage pool with matching name 'p'")));
});

/** hv's answers: every question answered as a healthy ground would, then `changes` over them. */
function answersFor(changes: Record<string, ProbeAnswer> = {}) {
  const asked = groundAsked(inventory())[0]!;
  const healthy: Record<string, ProbeAnswer> = {
    version: ok('Running against daemon: 9.0.0'),
    kvm: ok(''),
    pool0: ok('State: running\nAvailable: 53687091200\n'),
    pool1: ok('State: running\nAvailable: 53687091200\n'),
    base0: ok('Capacity: 2147483648\n'),
    net0: ok('Active: yes\n'),
    ...Object.fromEntries(asked.volumes.map((_, i) => [`vol${i}`, error('Storage volume not found: no storage vol with matching path')])),
    state0: ok('running\n'),
    ping0: ok('{"return":{}}'),
    state1: error('failed to get domain etcd-2'),
    ping1: error('failed to get domain etcd-2'),
  };
  return { asked, answers: { ...healthy, ...changes } };
}

const facts = (changes: Record<string, ProbeAnswer> = {}, domainType?: 'kvm'): DoctorFacts => {
  const { asked, answers } = answersFor(changes);
  const hypervisor = domainType ? { ...asked.hypervisor, domainType } : asked.hypervisor;
  return {
    control: { node: '20.20.2', tools: { xorriso: '/usr/bin/xorriso', etcdctl: '/usr/bin/etcdctl' } },
    hypervisors: [{ asked: { ...asked, hypervisor }, ...reachedFacts(asked, answers) }],
  };
};

const lines = (checks: DoctorCheck[]) => checks.map((check) => `${check.status} ${check.detail}`);

test("the tests' answers cover exactly the questions groundQuestions asks", (t) => {
  const { asked, answers } = answersFor();
  t.deepEqual(Object.keys(answers).sort(), Object.keys(groundQuestions(asked)).sort());
});

test('a ready ground: every check ok, the volumes to create against the free space, the running member with its agent', (t) => {
  const checks = doctorChecks(facts());
  t.deepEqual(lines(checks).slice(3), [
    'ok reached; libvirt 9.0.0',
    'ok domain type qemu: software emulation (the host has no vmx or svm in its CPU flags)',
    'ok pool default runs, 50.0 GiB free',
    'ok pool images runs, 50.0 GiB free',
    'ok base image base.qcow2 in pool images, 2.0 GiB',
    'ok network net is active',
    'ok 4 volumes to create in pool default, 10.0 GiB at their full size, 50.0 GiB free',
    'ok etcd-1 runs; its guest agent answers',
  ]);
  t.regex(formatDoctor(checks), /\ndoctor: the ground is ready$/);
});

const table: [string, Record<string, ProbeAnswer>, 'kvm' | undefined, string, RegExp][] = [
  ['a pool stopped', { pool0: ok('State: inactive\n') }, undefined, 'fail pool default is not running', /virsh pool-start default/],
  [
    'a pool missing',
    { pool1: error("Storage pool not found: no storage pool with matching name 'images'") },
    undefined,
    'fail pool images does not exist',
    /virsh pool-define-as images dir/,
  ],
  [
    'the base image missing',
    { base0: error("Storage volume not found: no storage vol with matching path 'base.qcow2'") },
    undefined,
    'fail base image base.qcow2 in pool images does not exist',
    /virsh vol-upload --pool images base\.qcow2/,
  ],
  ['the network stopped', { net0: ok('Active: no\n') }, undefined, 'fail network net is not active', /virsh net-start net/],
  [
    'the network missing',
    { net0: error("Network not found: no network with matching name 'net'") },
    undefined,
    'fail network net does not exist',
    /virsh net-define/,
  ],
  [
    'kvm asked, no /dev/kvm',
    { kvm: ok('cpu\n') },
    'kvm',
    'fail hypervisors.hv.domain_type is kvm, but the host has no /dev/kvm',
    /domain_type: qemu/,
  ],
  [
    'kvm asked, a /dev/kvm without vmx or svm (a PVM device)',
    { kvm: ok('device\n') },
    'kvm',
    'fail hypervisors.hv.domain_type is kvm, but the host has a /dev/kvm without vmx or svm in its CPU flags',
    /load kvm_intel or kvm_amd/,
  ],
  [
    'qemu where the host virtualises',
    { kvm: ok('device\ncpu\n') },
    undefined,
    'warn hypervisors.hv.domain_type is qemu (software emulation, many times slower) on a host with vmx or svm and /dev/kvm',
    /: kvm$/,
  ],
  [
    'too little space for the volumes',
    { pool0: ok('State: running\nAvailable: 1073741824\n') },
    undefined,
    'warn 4 volumes to create in pool default, 10.0 GiB at their full size, 1.0 GiB free: qcow2 volumes take less at first, but a member whose disk grows past the free space stops',
    /smaller os_volume_size_gib/,
  ],
  [
    'a running member without a guest agent',
    { ping0: error('Guest agent is not responding') },
    undefined,
    'warn etcd-1 runs, but its guest agent does not answer: the deploy reads and converges members through it',
    /qemu-guest-agent/,
  ],
];

for (const [title, changes, domainType, line, fix] of table)
  test(`doctor: ${title}`, (t) => {
    const checks = doctorChecks(facts(changes, domainType));
    const found = checks.find((check) => `${check.status} ${check.detail}` === line);
    t.truthy(found, lines(checks).join('\n'));
    t.regex(found!.fix!, fix);
    t.is(checks.filter((check) => check.status !== 'ok').length, 1, lines(checks).join('\n'));
    const failing = checks.some((check) => check.status === 'fail');
    t.regex(formatDoctor(checks), failing ? /\ndoctor: 1 failed, 0 warnings$/ : /\ndoctor: the ground is ready \(1 warnings\)$/);
  });

test('every volume there already: no space line; an unreachable hypervisor fails, naming its members and what to check', (t) => {
  const { asked } = answersFor();
  const present = Object.fromEntries(asked.volumes.map((_, i) => [`vol${i}`, ok('Capacity: 1\n')]));
  t.false(lines(doctorChecks(facts(present))).some((line) => line.includes('to create')));
  const checks = doctorChecks({
    ...facts(),
    hypervisors: [{ asked, reachable: false, reason: 'hypervisor hv at root@127.0.0.1:22: cannot connect: ECONNREFUSED' }],
  });
  t.deepEqual(lines(checks).slice(3), ['fail hypervisor hv at root@127.0.0.1:22: cannot connect: ECONNREFUSED']);
  t.regex(checks[3]!.fix!, /check hypervisors\.hv \(address, port, user, private_key\).*; its members: etcd-1, etcd-2$/);
});

test('the control node: xorriso is needed, etcdctl only by etcd-kvm etcdctl, Node.js 20 or newer; found on PATH as executables', (t) => {
  t.deepEqual(
    controlNodeChecks({ node: '18.19.0', tools: {} }).map((check) => [check.status, check.fix]),
    [
      ['fail', 'install Node.js 20 or newer'],
      ['fail', 'apt-get install xorriso'],
      ['warn', 'apt-get install etcd-client'],
    ],
  );
  const bin = join(scratchDir('doctor-path'), 'bin');
  mkdirSync(bin);
  writeFileSync(join(bin, 'xorriso'), '#!/bin/sh\n');
  chmodSync(join(bin, 'xorriso'), 0o755);
  // Not executable: not a program on PATH.
  writeFileSync(join(bin, 'etcdctl'), '');
  t.deepEqual(controlNodeFacts(bin).tools, { xorriso: join(bin, 'xorriso') });
});
