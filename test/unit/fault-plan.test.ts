import test from 'ava';
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { FAULT_KINDS, FAULTS, faultsNamed, faultTarget, holdFor, sizeRefusal } from '../../tasks/faults/plan.ts';
import { faultDrillLines, faultDrillMarkdown } from '../../tasks/faults/report.ts';
import { faultDrillSvg } from '../../tasks/faults/timeline.ts';
import { scratchDir } from '../helpers/scratch.ts';
import type { FaultDrillReport } from '../../tasks/faults/run.ts';
import { baseDocument, load } from '../helpers/inventory.ts';

/** A fault drill's plan: which faults, on which member, done and undone by which command. */

const ORDER = ['etcd-1', 'etcd-2', 'etcd-3'];

test('the faults named, in the order given; every fault when none is; a name that is none refused with the list', (t) => {
  t.deepEqual(
    (faultsNamed(undefined) as { faults: { kind: string }[] }).faults.map((fault) => fault.kind),
    [...FAULT_KINDS],
  );
  t.deepEqual(
    (faultsNamed(['kill', 'pause']) as { faults: { kind: string }[] }).faults.map((fault) => fault.kind),
    ['kill', 'pause'],
  );
  t.deepEqual(faultsNamed(['pause', 'unplug']), {
    refused: '--faults: unplug: not a fault (the faults: pause, link, kill, leader-link, reset, slow-disk)',
  });
});

const targets: { name: string; kind: keyof typeof FAULTS; leader: string; turn: number; expected: string }[] = [
  { name: 'a follower, the first in turn', kind: 'pause', leader: 'etcd-1', turn: 0, expected: 'etcd-2' },
  { name: 'a follower, the next in turn', kind: 'link', leader: 'etcd-1', turn: 1, expected: 'etcd-3' },
  { name: 'followers wrap around', kind: 'kill', leader: 'etcd-1', turn: 2, expected: 'etcd-2' },
  { name: 'never the leader, wherever it is', kind: 'pause', leader: 'etcd-2', turn: 0, expected: 'etcd-1' },
  { name: 'never the leader, in turn', kind: 'reset', leader: 'etcd-2', turn: 1, expected: 'etcd-3' },
  { name: 'the leader when the fault is the leader', kind: 'leader-link', leader: 'etcd-3', turn: 3, expected: 'etcd-3' },
];

for (const row of targets)
  test(`the fault's member: ${row.name}`, (t) => {
    t.is(faultTarget(FAULTS[row.kind], ORDER, row.leader, row.turn), row.expected);
  });

test('three voting members or more: one fault at a time keeps the quorum', (t) => {
  t.is(sizeRefusal(3), undefined);
  t.is(sizeRefusal(5), undefined);
  t.regex(sizeRefusal(2)!, /needs three voting members or more \(this cluster has 2\)/);
  t.regex(sizeRefusal(1)!, /this cluster has 1/);
});

test('each fault is done and undone by real commands: virsh on the hypervisor, or systemd in the member', (t) => {
  const member = load(baseDocument()).members[1]!;
  const mac = member.interfaces[0]!.mac;
  const done = Object.fromEntries(FAULT_KINDS.map((kind) => [kind, [FAULTS[kind].inject(member), FAULTS[kind].heal?.(member)]]));
  t.deepEqual(done, {
    pause: [
      { on: 'hypervisor', virsh: ['suspend', 'etcd-2'] },
      { on: 'hypervisor', virsh: ['resume', 'etcd-2'] },
    ],
    link: [
      { on: 'hypervisor', virsh: ['domif-setlink', 'etcd-2', mac, 'down'] },
      { on: 'hypervisor', virsh: ['domif-setlink', 'etcd-2', mac, 'up'] },
    ],
    kill: [{ on: 'member', argv: ['sudo', 'systemctl', 'kill', '--signal=SIGKILL', 'etcd.service'] }, undefined],
    'leader-link': [
      { on: 'hypervisor', virsh: ['domif-setlink', 'etcd-2', mac, 'down'] },
      { on: 'hypervisor', virsh: ['domif-setlink', 'etcd-2', mac, 'up'] },
    ],
    reset: [{ on: 'hypervisor', virsh: ['reset', 'etcd-2'] }, undefined],
    'slow-disk': [
      { on: 'hypervisor', virsh: ['blkdeviotune', 'etcd-2', member.volumes.data ? 'vdb' : 'vda', '--total-iops-sec', '20', '--live'] },
      { on: 'hypervisor', virsh: ['blkdeviotune', 'etcd-2', member.volumes.data ? 'vdb' : 'vda', '--total-iops-sec', '0', '--live'] },
    ],
  });
});

const report = (changes: Partial<FaultDrillReport> = {}): FaultDrillReport => ({
  started: '2026-11-29T17:00:00.000Z',
  faults: [
    {
      kind: 'pause',
      member: 'etcd-2',
      says: FAULTS.pause.says,
      injectedMs: 5_000,
      settledMs: 27_400,
      leaderBefore: 'etcd-1',
      leaderAfter: 'etcd-1',
      elections: 0,
      longestWriteGapMs: 1_250,
      failedOperations: 3,
      verifyFailed: [],
    },
  ],
  history: { writes: { acknowledged: 410, failed: 2 }, reads: { answered: 400, failed: 1 }, problems: [] },
  operations: [],
  cleanup: "deleted the drill's 410 keys (etcd-kvm/drill/…/*)",
  passed: true,
  ...changes,
});

test('the report: a line per fault and what clients saw; the history; passed or not', (t) => {
  t.is(
    faultDrillLines(report()),
    [
      'pause on etcd-2: settled after 22.4 s; 0 election(s), etcd-1 still leads; verify passed',
      '  longest without an acknowledged write 1.3 s, 3 client operation(s) failed and were retried elsewhere',
      'history: every acknowledged write kept, every read linearizable (410 writes acknowledged, 2 failed; 400 reads, 1 failed)',
      "deleted the drill's 410 keys (etcd-kvm/drill/…/*)",
      'PASSED: no acknowledged write lost, the history linearizable, verify passed after every fault',
    ].join('\n'),
  );
  const lost = report({
    passed: false,
    history: {
      writes: { acknowledged: 410, failed: 2 },
      reads: { answered: 400, failed: 1 },
      problems: [{ kind: 'lost-write', says: 'write 7, acknowledged by etcd-1, 1.00–1.10 s, is gone' }],
    },
  });
  t.regex(faultDrillLines(lost), /^history: 1 problem\(s\): lost-write: write 7, acknowledged by etcd-1/m);
  t.regex(faultDrillLines(lost), /^FAILED/m);
  const markdown = faultDrillMarkdown(report(), 'lab');
  t.regex(markdown, /^# Fault drill of lab, 2026-11-29T17:00:00.000Z$/m);
  t.regex(markdown, /^\| pause \| etcd-2 \| 22\.4 s \| 1\.3 s \| 3 \| 0 \| passed \|$/m);
});

test("each fault is held as long as --hold says, the leader's cut at least long enough for the others to elect a new one", (t) => {
  const doc = baseDocument();
  const inventory = load({ ...doc, etcd: { ...(doc.etcd as object), heartbeat_interval: 500, election_timeout: 5000 } });
  t.is(holdFor(FAULTS.pause, inventory, 5_000), 5_000);
  t.is(holdFor(FAULTS['leader-link'], inventory, 5_000), 12_000);
  t.is(holdFor(FAULTS['leader-link'], inventory, 30_000), 30_000);
});

test('the timeline: an SVG that xmllint reads, a row per member, a band per fault on its member, a tick per failed operation', (t) => {
  const drawn = report({
    operations: [
      { kind: 'write', value: 1, member: 'etcd-1', invokedMs: 0, returnedMs: 40, ok: true },
      { kind: 'write', value: 2, member: 'etcd-2', invokedMs: 6_000, returnedMs: 11_000, ok: false, error: 'DEADLINE_EXCEEDED' },
      { kind: 'read', member: 'etcd-2', invokedMs: 7_000, returnedMs: 12_000, ok: false, error: 'DEADLINE_EXCEEDED' },
    ],
  });
  const svg = faultDrillSvg(drawn, ORDER);
  const dir = scratchDir('timeline');
  writeFileSync(join(dir, 'drill.svg'), svg);
  const lint = spawnSync('xmllint', ['--noout', join(dir, 'drill.svg')], { encoding: 'utf8' });
  t.is(lint.status, 0, lint.stderr);
  t.is((svg.match(/<g class="fault">/g) ?? []).length, 1);
  t.is((svg.match(/class="failed"/g) ?? []).length, 2);
  for (const member of ORDER) t.true(svg.includes(`>${member}</text>`), member);
  t.regex(svg, /<title>pause on etcd-2: a follower frozen/);
});
