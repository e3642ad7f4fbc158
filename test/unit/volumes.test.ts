import test from 'ava';
import { patienceOf } from '../../tasks/core/runner.ts';
import type { Inventory, Member } from '../../tasks/inventory/model.ts';
import type { ProbeAnswer, Question } from '../../tasks/libvirt/virsh.ts';
import { volumesStep, type VolumesContext } from '../../tasks/steps/volumes.ts';
import { baseDocument, load } from '../helpers/inventory.ts';

/**
 * The volumes step's safety rule, against a fake hypervisor (the real one is exercised by test/e2e):
 * a missing OS disk is created only while no other member has one.
 */

type Disks = Record<string, 'present' | 'missing' | 'unreadable' | 'data-missing' | 'os-missing' | 'pool-missing'>;

const found: ProbeAnswer = { code: 0, output: 'Name: x\nCapacity:       2147483648 bytes\n' };
const absent: ProbeAnswer = {
  code: 1,
  output: "error: failed to get vol 'x'\nerror: Storage volume not found: no storage vol with matching path 'x'",
};
const noPool: ProbeAnswer = {
  code: 1,
  output: "error: failed to get pool 'typo'\nerror: Storage pool not found: no storage pool with matching name 'typo'",
};

function fakeHypervisor(disks: Disks): VolumesContext {
  const answer = (member: Member, question: Question): ProbeAnswer => {
    if ('shell' in question) throw new Error('unexpected shell question');
    if (question[0] === 'vol-path') return { code: 0, output: '/pools/images/base.qcow2\n' };
    if (question.at(-1) === 'base.qcow2') return found;
    const disk = disks[member.name];
    if (disk === 'pool-missing') return noPool;
    if (disk === 'data-missing') return question.at(-1)!.endsWith('-data.qcow2') ? absent : found;
    if (disk === 'os-missing') return question.at(-1)!.endsWith('-os.qcow2') ? absent : found;
    return disk === 'present' ? found : absent;
  };
  return {
    async probe(member: Member, questions: Record<string, Question>) {
      if (disks[member.name] === 'unreadable') throw new Error('hypervisor hv: cannot connect');
      return Object.fromEntries(Object.entries(questions).map(([name, question]) => [name, answer(member, question)]));
    },
    async virshFor() {
      throw new Error('the fake hypervisor creates no volume');
    },
  };
}

async function plans(inventory: Inventory, disks: Disks, { joining = false, formed = false } = {}): Promise<Record<string, string>> {
  const step = volumesStep({ inventory, members: inventory.members, context: fakeHypervisor(disks), joining, formed });
  const outcome: Record<string, string> = {};
  await Promise.all(
    step.targets.map(async (name) => {
      try {
        outcome[name] =
          step
            .plan(await step.check(name, patienceOf(false)), name)
            .map((change) => change.summary)
            .join('; ') || 'ok';
      } catch (error) {
        outcome[name] = `refused: ${(error as Error).message}`;
      }
    }),
  );
  return outcome;
}

test('a new cluster gets an overlay OS disk per member, sized to the larger of the base image and os_volume_size_gib', async (t) => {
  const doc = baseDocument();
  (doc.members[2] as Record<string, unknown>).os_volume_size_gib = 4;
  const outcome = await plans(load(doc), { 'etcd-1': 'missing', 'etcd-2': 'missing', 'etcd-3': 'missing' });
  t.is(outcome['etcd-1'], 'create OS disk default/etcd-1-os.qcow2 (2 GiB qcow2 overlay on images/base.qcow2)');
  t.is(outcome['etcd-3'], 'create OS disk default/etcd-3-os.qcow2 (4 GiB qcow2 overlay on images/base.qcow2)');
});

test('an OS disk missing beside its data disk in a formed cluster is made again on the base image: the data disk holds etcd (an image rebuild)', async (t) => {
  const doc = baseDocument();
  for (const member of doc.members as Record<string, unknown>[]) member.data_volume_size_gib = 1;
  (doc.cluster as Record<string, unknown>).is_initializing = false;
  const outcome = await plans(load(doc), { 'etcd-1': 'present', 'etcd-2': 'os-missing', 'etcd-3': 'present' }, { formed: true });
  t.is(
    outcome['etcd-2'],
    "create OS disk default/etcd-2-os.qcow2 (2 GiB qcow2 overlay on images/base.qcow2; etcd's data stays on default/etcd-2-data.qcow2)",
  );
  t.is(outcome['etcd-1'], 'ok');
});

test('existing disks are ok; a disk missing next to existing ones is refused, never recreated', async (t) => {
  const outcome = await plans(load(baseDocument()), { 'etcd-1': 'present', 'etcd-2': 'missing', 'etcd-3': 'present' });
  t.is(outcome['etcd-1'], 'ok');
  t.is(outcome['etcd-3'], 'ok');
  t.regex(
    outcome['etcd-2']!,
    /^refused: refusing to create a new OS disk for etcd-2: the cluster already exists \(other members have their disks: etcd-1, etcd-3\)/,
  );
  t.regex(
    outcome['etcd-2']!,
    /remove the member from the cluster \(etcdctl member remove <its ID, from etcd-kvm status>\) or run with --replace etcd-2: it then joins as a learner/,
  );
});

test('a member joining a formed cluster (added as a learner) gets its fresh disks', async (t) => {
  const outcome = await plans(
    load(baseDocument()),
    { 'etcd-1': 'present', 'etcd-2': 'missing', 'etcd-3': 'present' },
    { joining: true, formed: true },
  );
  t.is(outcome['etcd-2'], 'create OS disk default/etcd-2-os.qcow2 (2 GiB qcow2 overlay on images/base.qcow2)');
});

test('a member that cannot be read counts as having a disk, and is named as unreadable', async (t) => {
  const outcome = await plans(load(baseDocument()), { 'etcd-1': 'missing', 'etcd-2': 'missing', 'etcd-3': 'unreadable' });
  t.regex(outcome['etcd-1']!, /other members have their disks: etcd-3 \(unreadable\)/);
  t.regex(outcome['etcd-3']!, /^refused: hypervisor hv: cannot connect/);
});

test('an existing cluster (is_initializing: false) never gets a fresh member disk', async (t) => {
  const doc = baseDocument();
  (doc.cluster as Record<string, unknown>).is_initializing = false;
  (doc.members[0]!.authentication_bootstrap as Record<string, unknown>).bootstrap = false;
  const outcome = await plans(load(doc), { 'etcd-1': 'missing', 'etcd-2': 'missing', 'etcd-3': 'missing' });
  t.regex(outcome['etcd-1']!, /cluster\.is_initializing is false/);
});

const withDataDisks = () => {
  const doc = baseDocument();
  for (const member of doc.members) (member as Record<string, unknown>).data_volume_size_gib = 1;
  return load(doc);
};

test('in a formed cluster a missing data disk is refused, never created empty (etcd would start on it with no data)', async (t) => {
  const outcome = await plans(withDataDisks(), { 'etcd-1': 'present', 'etcd-2': 'data-missing', 'etcd-3': 'present' }, { formed: true });
  t.is(outcome['etcd-1'], 'ok');
  t.regex(outcome['etcd-2']!, /^refused: refusing to create a new data disk for etcd-2: the cluster has formed.*--replace etcd-2/);
});

test('a missing data disk is created while the cluster forms, and for a member joining it', async (t) => {
  const forming = await plans(withDataDisks(), { 'etcd-1': 'present', 'etcd-2': 'data-missing', 'etcd-3': 'present' });
  t.is(forming['etcd-2'], 'create data disk default/etcd-2-data.qcow2 (1 GiB qcow2)');
  const joining = await plans(
    withDataDisks(),
    { 'etcd-1': 'present', 'etcd-2': 'data-missing', 'etcd-3': 'present' },
    { joining: true, formed: true },
  );
  t.is(joining['etcd-2'], 'create data disk default/etcd-2-data.qcow2 (1 GiB qcow2)');
});

test('a missing pool (a mistyped volume_pool) is no missing disk: the member stops there, nothing is created', async (t) => {
  const outcome = await plans(withDataDisks(), { 'etcd-1': 'present', 'etcd-2': 'pool-missing', 'etcd-3': 'present' }, { formed: true });
  t.regex(outcome['etcd-2']!, /^refused: cannot read volume .*no storage pool with matching name 'typo'.*check volume_pool/);
});
