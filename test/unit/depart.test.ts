import test from 'ava';
import { MembershipRefusal } from '../../tasks/etcd/membership.ts';
import type { Member } from '../../tasks/inventory/model.ts';
import { loadInventory } from '../../tasks/inventory/load.ts';
import { departStep, stopMemberVm, type Departure, type DepartFacts } from '../../tasks/steps/depart.ts';
import { unconnected } from '../helpers/unconnected.ts';

/** A member's departure as a table: facts (etcd's list, leader, health, libvirt) in; changes or a refusal out. */

const lab = loadInventory('inventories/lab.yaml');
const [one, two, three] = lab.members as [Member, Member, Member];
const { clients, remote } = unconnected(lab);
const owner = { identity: { cluster: 'lab', id: '9e7c1f00-5a8e-4c61-8d0b-3f2a1b0c9d8e', adoptsUnmarked: false }, adopt: new Set<string>() };
const NOT_REACHABLE = (m: Member) => `${m.name} (etcd not reachable at ${m.etcdIp})`;

/** Who departs, and who else: by default etcd-3 alone, etcd-1 and etcd-2 staying. */
interface Who {
  member: Member;
  staying: Member[];
  alsoDeparting: Member[];
}
const ALONE: Who = { member: three, staying: [one, two], alsoDeparting: [] };
const step = (departure: Departure, who: Who = ALONE) => departStep({ inventory: lab, clients, remote, how: { departure, owner, ...who } });

const base = (): DepartFacts => ({
  live: { id: '13', name: 'etcd-3', peerURLs: ['https://192.168.150.13:2380'], isLearner: false },
  leaderId: '11',
  healthy: [one, two],
  unhealthy: [],
  itselfHealthy: true,
  vm: 'running',
  ownership: { kind: 'ours', running: true },
  markedReplacing: false,
  volumes: ['etcd-lab/etcd-3-os.qcow2', 'etcd-lab/etcd-3-data.qcow2'],
});

/** etcd-2 departing, as etcd lists it. */
const LIVE_TWO = { id: '12', name: 'etcd-2', peerURLs: ['https://192.168.150.12:2380'], isLearner: false };

interface Plan {
  name: string;
  departure: Departure;
  who?: Who;
  facts: (f: DepartFacts) => void;
  /** Each change by its kind, or `kind: summary` where the wording matters. */
  changes: string[];
}

const plans: Plan[] = [
  {
    name: 'leave, a follower: removed, VM stopped and undefined, volumes kept and named',
    departure: 'leave',
    facts: () => {},
    changes: [
      'remove',
      'undefine: stop and undefine VM etcd-3 on lab; its volumes stay (etcd-lab/etcd-3-os.qcow2, etcd-lab/etcd-3-data.qcow2: virsh vol-delete removes them)',
    ],
  },
  {
    name: 'leave, the leader: leadership moved first',
    departure: 'leave',
    facts: (f) => (f.leaderId = '13'),
    changes: ['move-leader: move leadership from etcd-3 to etcd-1 first', 'remove', 'undefine'],
  },
  {
    name: 'leave, already removed (a run stopped before the VM went): the VM alone',
    departure: 'leave',
    facts: (f) => delete f.live,
    changes: ['undefine'],
  },
  { name: 'leave, all done: nothing', departure: 'leave', facts: (f) => Object.assign(f, { live: undefined, vm: 'absent' }), changes: [] },
  {
    name: 'leave, a shut-off VM: undefined without a stop',
    departure: 'leave',
    facts: (f) => Object.assign(f, { live: undefined, vm: 'shut off' }),
    changes: [
      'undefine: undefine VM etcd-3 on lab; its volumes stay (etcd-lab/etcd-3-os.qcow2, etcd-lab/etcd-3-data.qcow2: virsh vol-delete removes them)',
    ],
  },
  {
    name: 'replace: the domain marked first, removed, stopped, its volumes deleted (data first), undefined last',
    departure: 'replace',
    facts: () => {},
    changes: [
      'mark-replacing: mark domain etcd-3 as being replaced (libvirt metadata): a run stopped from here on finishes the replacement',
      'remove: remove etcd-3 from the cluster (member ID d); it joins again empty and takes its data from the cluster',
      'stop: stop VM etcd-3 on lab',
      "delete-volumes: delete etcd-3's volumes etcd-lab/etcd-3-data.qcow2, etcd-lab/etcd-3-os.qcow2 (the old member's disks are never reused)",
      'undefine: undefine VM etcd-3 on lab (its being-replaced mark goes with it)',
    ],
  },
  {
    name: 'replace with the disks already gone: marked, removed, stopped, undefined',
    departure: 'replace',
    facts: (f) => (f.volumes = []),
    changes: ['mark-replacing', 'remove', 'stop', 'undefine'],
  },
  {
    name: 'replace, a shut-off VM: no stop',
    departure: 'replace',
    facts: (f) => Object.assign(f, { vm: 'shut off', ownership: { kind: 'ours', running: false } }),
    changes: ['mark-replacing', 'remove', 'delete-volumes', 'undefine'],
  },
  {
    name: 'replace resumed after the removal (the domain marked, etcd no longer lists it): the VM and its disks go',
    departure: 'replace',
    facts: (f) => Object.assign(f, { live: undefined, markedReplacing: true }),
    changes: ['stop', 'delete-volumes', 'undefine'],
  },
  {
    name: 'replace resumed after the volumes went: the marked domain alone',
    departure: 'replace',
    facts: (f) => Object.assign(f, { live: undefined, markedReplacing: true, vm: 'shut off', volumes: [] }),
    changes: ['undefine'],
  },
  {
    name: 'replace of a member etcd no longer lists whose domain is not marked (--replace after a removal by hand): marked before anything goes',
    departure: 'replace',
    facts: (f) => delete f.live,
    changes: ['mark-replacing', 'stop', 'delete-volumes', 'undefine'],
  },
  {
    name: 'replace without a domain: the disks go before the removal (etcd listing it, its disks gone, is then the only record)',
    departure: 'replace',
    facts: (f) => Object.assign(f, { vm: 'absent', ownership: { kind: 'absent' } }),
    changes: ['delete-volumes', 'remove'],
  },
  {
    name: 'replace of a member that never was (no domain, no volumes, not in etcd): nothing',
    departure: 'replace',
    facts: (f) => Object.assign(f, { live: undefined, vm: 'absent', ownership: { kind: 'absent' }, volumes: [] }),
    changes: [],
  },
  {
    name: "a VM made before marks existed: replaced as this cluster's",
    departure: 'replace',
    facts: (f) => (f.ownership = { kind: 'to-mark', running: true, why: 'made for this cluster before domains were marked' }),
    changes: ['mark-replacing', 'remove', 'stop', 'delete-volumes', 'undefine'],
  },
  // Three members, etcd-3 down, etcd-2 and etcd-3 both departing: etcd-3 first keeps the quorum throughout.
  {
    name: 'etcd-3 down and departing with etcd-2: etcd-3 first leaves etcd-1 and etcd-2, both healthy',
    departure: 'leave',
    who: { member: three, staying: [one], alsoDeparting: [two, three] },
    facts: (f) => Object.assign(f, { healthy: [one, two], itselfHealthy: false }),
    changes: ['remove', 'undefine'],
  },
  {
    name: 'then etcd-2: etcd-1 alone is a quorum of one',
    departure: 'leave',
    who: { member: two, staying: [one], alsoDeparting: [two, three] },
    facts: (f) => Object.assign(f, { live: LIVE_TWO, healthy: [one] }),
    changes: ['remove', 'undefine'],
  },
  {
    name: 'the leader departs while another departing member is healthy: leadership goes to a member that stays',
    departure: 'leave',
    who: { member: three, staying: [one], alsoDeparting: [two, three] },
    facts: (f) => Object.assign(f, { leaderId: '13', healthy: [two, one] }),
    changes: ['move-leader: move leadership from etcd-3 to etcd-1 first', 'remove', 'undefine'],
  },
  {
    name: 'a learner (not started) is removed whatever its own health: it has no vote',
    departure: 'leave',
    facts: (f) => Object.assign(f, { live: { ...base().live!, isLearner: true, name: '' }, itselfHealthy: false }),
    changes: ['remove: remove etcd-3 from the cluster (member ID d, a learner)', 'undefine'],
  },
];

const describeChanges = (changes: { summary: string; action: { kind: string } }[], expected: string[]) =>
  changes.map((c, i) => (expected[i]?.includes(':') ? `${c.action.kind}: ${c.summary}` : c.action.kind));

for (const row of plans) {
  test(`depart: ${row.name}`, (t) => {
    const facts = base();
    row.facts(facts);
    t.deepEqual(describeChanges(step(row.departure, row.who).plan(facts, row.who?.member.name ?? 'etcd-3'), row.changes), row.changes);
  });
}

interface Refusal {
  name: string;
  departure: Departure;
  who?: Who;
  facts: (f: DepartFacts) => void;
  refused: RegExp;
}

const refusals: Refusal[] = [
  {
    name: 'a member that stays is unhealthy and the rest are no quorum',
    departure: 'leave',
    facts: (f) => Object.assign(f, { healthy: [one], unhealthy: [NOT_REACHABLE(two)] }),
    refused:
      /^refusing to remove etcd-3: right after it, only 1 of the 2 voting members etcd would have left are healthy, and they need 2 for a quorum \(not healthy: etcd-2 \(etcd not reachable at 192\.168\.150\.12\)\)\. Nothing was changed\.$/,
  },
  {
    name: 'no leader',
    departure: 'leave',
    facts: (f) => delete f.leaderId,
    refused: /^refusing to remove etcd-3: the cluster has no leader\. Nothing was changed\.$/,
  },
  // Finding: the quorum was counted over the members that stay, so etcd-2 (healthy) could go first and
  // leave {etcd-1, etcd-3} with one of two up: no quorum, and etcd-3's removal could never commit.
  {
    name: 'etcd-3 down and departing with etcd-2: etcd-2 first would leave etcd-1 and the down etcd-3, no quorum',
    departure: 'leave',
    who: { member: two, staying: [one], alsoDeparting: [two, three] },
    facts: (f) => Object.assign(f, { live: LIVE_TWO, healthy: [one], unhealthy: [NOT_REACHABLE(three)] }),
    refused:
      /^refusing to remove etcd-2: right after it, only 1 of the 2 voting members etcd would have left are healthy, and they need 2 for a quorum \(not healthy: etcd-3 \(etcd not reachable at 192\.168\.150\.13\)\)\. Nothing was changed\.$/,
  },
  {
    name: 'the same with --replace etcd-2,etcd-3',
    departure: 'replace',
    who: { member: two, staying: [one], alsoDeparting: [two, three] },
    facts: (f) => Object.assign(f, { live: LIVE_TWO, healthy: [one], unhealthy: [NOT_REACHABLE(three)] }),
    refused: /^refusing to remove etcd-2: right after it, only 1 of the 2 voting members etcd would have left are healthy/,
  },
  {
    name: 'two voting members, the departing one down: a quorum of two is two, the removal cannot commit',
    departure: 'leave',
    who: { member: two, staying: [one], alsoDeparting: [two] },
    facts: (f) => Object.assign(f, { live: LIVE_TWO, healthy: [one], itselfHealthy: false }),
    refused:
      /^refusing to remove etcd-2: only 1 of the cluster's 2 voting members are healthy, and committing the removal needs 2\. Nothing was changed\.$/,
  },
  {
    name: "another cluster's VM under the name: refused before etcd or libvirt is touched",
    departure: 'leave',
    facts: (f) => (f.ownership = { kind: 'refused', reason: 'domain etcd-3 belongs to cluster other (id 1)' }),
    refused: /^refusing to remove etcd-3: domain etcd-3 belongs to cluster other \(id 1\)\. Nothing was changed\.$/,
  },
];

for (const row of refusals) {
  test(`depart refused: ${row.name}`, (t) => {
    const facts = base();
    row.facts(facts);
    t.throws(() => step(row.departure, row.who).plan(facts, row.who?.member.name ?? 'etcd-3'), {
      instanceOf: MembershipRefusal,
      message: row.refused,
    });
  });
}

test("depart: a replacement refuses to delete the operator's own volumes", (t) => {
  const theirs = { ...three, volumes: { ...three.volumes, os: { existing: 'golden-etcd-3.qcow2' } } };
  const facts = { ...base(), volumes: ['etcd-lab/golden-etcd-3.qcow2'] };
  const replace = departStep({
    inventory: lab,
    clients,
    remote,
    how: { departure: 'replace', member: theirs, staying: [one, two], alsoDeparting: [], owner },
  });
  t.throws(() => replace.plan(facts, 'etcd-3'), {
    instanceOf: MembershipRefusal,
    message: /its volume\(s\) etcd-lab\/golden-etcd-3\.qcow2 are the operator's/,
  });
});

test('depart: the being-replaced mark is written live too only while the VM runs (libvirt refuses --live otherwise)', (t) => {
  const mark = (running: boolean) =>
    step('replace').plan({ ...base(), vm: running ? 'running' : 'shut off', ownership: { kind: 'ours', running } }, 'etcd-3')[0]!.action;
  t.deepEqual(mark(true), { kind: 'mark-replacing', active: true, memberId: '13' });
  t.deepEqual(mark(false), { kind: 'mark-replacing', active: false, memberId: '13' });
});

/** A hypervisor's virsh as the departure's VM stop uses it: what it was asked and told to run, in order. */
function recordingVirsh(agent: 'answers' | 'silent') {
  const said: string[] = [];
  return {
    said,
    virsh: {
      async ask(commands: readonly (readonly string[])[]) {
        for (const command of commands) said.push(`ask ${command.join(' ')}`);
        if (agent === 'silent') return commands.map(() => ({ ok: false, output: 'error: Guest agent is not responding' }));
        return commands.map((command) =>
          command.join(' ').includes('guest-exec-status')
            ? { ok: true, output: '{"return":{"exited":true,"exitcode":0}}' }
            : { ok: true, output: '{"return":{"pid":7}}' },
        );
      },
      async run(args: readonly string[]) {
        said.push(`run ${args.join(' ')}`);
        return '';
      },
    },
  };
}

test("a departing member's VM: its etcd stopped through the guest agent first (its clients' connections closed), then destroyed", async (t) => {
  const { said, virsh } = recordingVirsh('answers');
  await stopMemberVm(virsh, 'etcd-3');
  t.is(said.length, 3, said.join('\n'));
  t.regex(
    said[0]!,
    /^ask qemu-agent-command --timeout \d+ etcd-3 \{"execute":"guest-exec","arguments":\{"path":"\/bin\/systemctl","arg":\["stop","etcd"\]/,
  );
  t.regex(said[1]!, /^ask qemu-agent-command --timeout \d+ etcd-3 \{"execute":"guest-exec-status","arguments":\{"pid":7\}\}$/);
  t.is(said[2], 'run destroy etcd-3');
});

test('a departing member whose agent does not answer: its VM destroyed all the same, nothing waited for', async (t) => {
  const { said, virsh } = recordingVirsh('silent');
  await stopMemberVm(virsh, 'etcd-3');
  t.is(said.length, 2, said.join('\n'));
  t.is(said[1], 'run destroy etcd-3');
});
