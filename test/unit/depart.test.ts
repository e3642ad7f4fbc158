import test from 'ava';
import type { EtcdClients } from '../../tasks/etcd/client.ts';
import { MembershipRefusal } from '../../tasks/etcd/membership.ts';
import { loadInventory } from '../../tasks/inventory/load.ts';
import type { RemoteContext } from '../../tasks/libvirt/context.ts';
import { departStep, type Departure, type DepartFacts } from '../../tasks/steps/membership.ts';

/** A member's departure as a table: facts (etcd's list, leader, health, libvirt) in; changes or a refusal out. */

const lab = loadInventory('inventories/lab.yaml');
const [one, two, three] = lab.members as [typeof lab.members[0], typeof lab.members[0], typeof lab.members[0]];
const unused = {} as EtcdClients & RemoteContext;
const owner = { identity: { cluster: 'lab', id: '9e7c1f00-5a8e-4c61-8d0b-3f2a1b0c9d8e', adoptsUnmarked: false }, adopt: new Set<string>() };
const step = (departure: Departure) => departStep(lab, unused, unused, { departure, member: three, staying: [one, two], alsoDeparting: [], owner });

const base = (): DepartFacts => ({
  live: { id: '13', name: 'etcd-3', peerURLs: ['https://192.168.150.13:2380'], isLearner: false },
  leaderId: '11',
  healthy: [one, two],
  unhealthy: [],
  vm: 'running',
  ownership: { kind: 'ours', running: true },
  volumes: ['etcd-lab/etcd-3-os.qcow2', 'etcd-lab/etcd-3-data.qcow2'],
});

interface Case {
  name: string;
  departure: Departure;
  facts: (f: DepartFacts) => void;
  changes?: string[];
  refused?: RegExp;
}

const cases: Case[] = [
  {
    name: 'leave, a follower: removed, VM stopped and undefined, volumes kept and named',
    departure: 'leave',
    facts: () => {},
    changes: ['remove', 'undefine: stop and undefine VM etcd-3 on lab; its volumes stay (etcd-lab/etcd-3-os.qcow2, etcd-lab/etcd-3-data.qcow2: virsh vol-delete removes them)'],
  },
  { name: 'leave, the leader: leadership moved first', departure: 'leave', facts: (f) => (f.leaderId = '13'), changes: ['move-leader: move leadership from etcd-3 to etcd-1 first', 'remove', 'undefine'] },
  { name: 'leave, already removed (a run stopped before the VM went): the VM alone', departure: 'leave', facts: (f) => delete f.live, changes: ['undefine'] },
  { name: 'leave, all done: nothing', departure: 'leave', facts: (f) => Object.assign(f, { live: undefined, vm: 'absent' }), changes: [] },
  { name: 'leave, a shut-off VM: undefined without a stop', departure: 'leave', facts: (f) => Object.assign(f, { live: undefined, vm: 'shut off' }), changes: ['undefine: undefine VM etcd-3 on lab; its volumes stay (etcd-lab/etcd-3-os.qcow2, etcd-lab/etcd-3-data.qcow2: virsh vol-delete removes them)'] },
  {
    name: 'a member that stays is unhealthy and the rest are no quorum: refused',
    departure: 'leave',
    facts: (f) => Object.assign(f, { healthy: [one], unhealthy: ['etcd-2 (etcd not reachable)'] }),
    refused: /refusing to remove etcd-3: only 1 of the 2 members that stay are healthy, and they need 2 for a quorum \(not healthy: etcd-2 \(etcd not reachable\)\)\. Nothing was changed\./,
  },
  { name: 'no leader: refused', departure: 'leave', facts: (f) => delete f.leaderId, refused: /the cluster has no leader/ },
  {
    name: 'replace: removed, VM undefined, its volumes deleted',
    departure: 'replace',
    facts: () => {},
    changes: ['remove: remove etcd-3 from the cluster (member ID d); it joins again empty and takes its data from the cluster', 'undefine: stop and undefine VM etcd-3 on lab', "delete-volumes: delete etcd-3's volumes etcd-lab/etcd-3-os.qcow2, etcd-lab/etcd-3-data.qcow2 (the old member's disks are never reused)"],
  },
  { name: 'replace with the disks already gone: removed, VM undefined', departure: 'replace', facts: (f) => (f.volumes = []), changes: ['remove', 'undefine'] },
  {
    name: "another cluster's VM under the name: refused before etcd or libvirt is touched",
    departure: 'leave',
    facts: (f) => (f.ownership = { kind: 'refused', reason: 'domain etcd-3 belongs to cluster other (id 1)' }),
    refused: /^refusing to remove etcd-3: domain etcd-3 belongs to cluster other \(id 1\)\. Nothing was changed\.$/,
  },
  { name: 'a VM made before marks existed: replaced as this cluster\'s', departure: 'replace', facts: (f) => (f.ownership = { kind: 'to-mark', running: true, why: 'made for this cluster before domains were marked' }), changes: ['remove', 'undefine', 'delete-volumes'] },
];

for (const row of cases) {
  test(`depart: ${row.name}`, (t) => {
    const facts = base();
    row.facts(facts);
    if (row.refused) {
      t.throws(() => step(row.departure).plan(facts, 'etcd-3'), { instanceOf: MembershipRefusal, message: row.refused });
      return;
    }
    const changes = step(row.departure).plan(facts, 'etcd-3');
    // A row names each change by its kind, and by its summary where the wording matters.
    t.deepEqual(changes.map((c, i) => (row.changes![i]?.includes(':') ? `${c.action.kind}: ${c.summary}` : c.action.kind)), row.changes);
  });
}

test("depart: a replacement refuses to delete the operator's own volumes", (t) => {
  const theirs = { ...three, volumes: { ...three.volumes, os: { existing: 'golden-etcd-3.qcow2' } } };
  const facts = { ...base(), volumes: ['etcd-lab/golden-etcd-3.qcow2'] };
  const replace = departStep(lab, unused, unused, { departure: 'replace', member: theirs, staying: [one, two], alsoDeparting: [], owner });
  t.throws(() => replace.plan(facts, 'etcd-3'), { instanceOf: MembershipRefusal, message: /its volume\(s\) etcd-lab\/golden-etcd-3\.qcow2 are the operator's/ });
});
