import test from 'ava';
import { backingPathOf, judgeImage, type ImageFacts } from '../../tasks/libvirt/os-image.ts';
import type { ProbeAnswer } from '../../tasks/libvirt/virsh.ts';
import { rebuildStep } from '../../tasks/steps/rebuild.ts';
import { baseDocument, load } from '../helpers/inventory.ts';
import { unconnected } from '../helpers/unconnected.ts';

/** Which image a member's OS disk was built from, against base_image: facts in, verdict out. */

// libvirt 9.0's vol-dumpxml of an overlay the volumes step made (trimmed), and its words for what is missing.
const overlayOn = (path: string): ProbeAnswer => ({
  code: 0,
  output: `<volume type='file'>\n  <name>etcd-2-os.qcow2</name>\n  <target>\n    <path>/pools/vms/etcd-2-os.qcow2</path>\n    <format type='qcow2'/>\n  </target>\n  <backingStore>\n    <path>${path}</path>\n    <format type='qcow2'/>\n  </backingStore>\n</volume>\n`,
});
const flat: ProbeAnswer = { code: 0, output: "<volume type='file'>\n  <name>etcd-2-os.qcow2</name>\n</volume>\n" };
const VOLUME_MISSING: ProbeAnswer = {
  code: 1,
  output: "error: failed to get vol 'x'\nerror: Storage volume not found: no storage vol with matching path 'x'\n",
};
const at = (path: string): ProbeAnswer => ({ code: 0, output: `${path}\n` });
const OLD = '/pools/images/debian-12-etcd.qcow2';
const NEW = '/pools/images/b.qcow2';

const member = (dataDisk: boolean) => {
  const doc = baseDocument();
  for (const m of doc.members as Record<string, unknown>[]) {
    m.base_image = { pool: 'images', volume: 'b.qcow2' };
    if (dataDisk) m.data_volume_size_gib = 1;
  }
  return load(doc).members[1]!;
};

const rows: { title: string; facts: Omit<ImageFacts, 'dataDisk'>; dataDisk: boolean; verdict: string }[] = [
  { title: 'built from base_image', facts: { osXml: overlayOn(NEW), basePath: at(NEW) }, dataDisk: true, verdict: 'current' },
  {
    title: 'built from another image, data disk: rebuilt',
    facts: { osXml: overlayOn(OLD), basePath: at(NEW) },
    dataDisk: true,
    verdict: 'rebuild debian-12-etcd.qcow2 → images/b.qcow2',
  },
  {
    title: 'built from another image, no data disk: replaced (its data is on the OS disk, so it comes from the cluster)',
    facts: { osXml: overlayOn(OLD), basePath: at(NEW) },
    dataDisk: false,
    verdict: 'replace debian-12-etcd.qcow2 → images/b.qcow2',
  },
  {
    title: 'the new image is not on the hypervisor: refused',
    facts: { osXml: overlayOn(OLD), basePath: VOLUME_MISSING },
    dataDisk: true,
    verdict: 'refused debian-12-etcd.qcow2 → images/b.qcow2: base image images/b.qcow2 is not on hypervisor',
  },
  {
    title: 'the image gone from the hypervisor, the member built from it: nothing to rebuild',
    facts: { osXml: overlayOn(NEW), basePath: VOLUME_MISSING },
    dataDisk: true,
    verdict: 'current',
  },
  {
    title: 'no OS disk yet: the volumes step makes it',
    facts: { osXml: VOLUME_MISSING, basePath: at(NEW) },
    dataDisk: true,
    verdict: 'current',
  },
  {
    title: 'an OS disk with no backing file: nothing to compare',
    facts: { osXml: flat, basePath: at(NEW) },
    dataDisk: true,
    verdict: 'current',
  },
];

for (const row of rows) {
  test(`image: ${row.title}`, (t) => {
    const verdict = judgeImage(member(row.dataDisk), { ...row.facts, dataDisk: row.dataDisk });
    const said =
      verdict.kind === 'current'
        ? 'current'
        : `${verdict.kind} ${verdict.from} → ${verdict.to}${verdict.kind === 'refused' ? `: ${verdict.why}` : ''}`;
    t.true(said.startsWith(row.verdict), said);
  });
}

test('image: a volume_id is the operator own disk, never judged', (t) => {
  const doc = baseDocument();
  (doc.members[1] as Record<string, unknown>).volume_id = 'mine.qcow2';
  const verdict = judgeImage(load(doc).members[1]!, { osXml: overlayOn(OLD), basePath: at(NEW), dataDisk: true });
  t.is(verdict.kind, 'current');
});

test('image: an unreadable OS volume is an error, never a verdict', (t) => {
  t.throws(() => judgeImage(member(true), { osXml: { code: 1, output: 'error: cannot connect\n' }, basePath: at(NEW), dataDisk: true }), {
    message: /cannot read etcd-2's OS volume: cannot connect/,
  });
});

test('image: the backing path read from vol-dumpxml', (t) => {
  t.is(backingPathOf(overlayOn(OLD).output), OLD);
  t.is(backingPathOf(flat.output), undefined);
});

test('rebuild step: a member without a data disk that the plan could not replace (the only voter) is refused, naming why, nothing changed', (t) => {
  const doc = baseDocument();
  const inventory = load(doc);
  const { remote, clients } = unconnected(inventory);
  const step = rebuildStep({ inventory, member: member(false), context: remote, clients });
  const error = t.throws(() => step.plan({ verdict: { kind: 'replace', from: 'a.qcow2', to: 'images/b.qcow2' }, running: true }, 'etcd-2'));
  t.regex(
    error.message,
    /^refusing to move etcd-2 onto images\/b\.qcow2 \(built from a\.qcow2\): it has no data disk.*only voting member.*Nothing was changed\.$/,
  );
});
