import test from 'ava';
import { judgeDisks, type DiskFacts } from '../../tasks/libvirt/lost-disks.ts';
import type { ProbeAnswer } from '../../tasks/libvirt/virsh.ts';

// libvirt 9.0's own words (virsh vol-info --bytes --pool P V on the lab's hypervisor).
const EXISTS: ProbeAnswer = {
  code: 0,
  output: 'Name:           etcd-2-os.qcow2\nType:           file\nCapacity:       4294967296 bytes\n',
};
const VOLUME_MISSING: ProbeAnswer = {
  code: 1,
  output:
    "error: failed to get vol 'etcd-2-os.qcow2'\nerror: Storage volume not found: no storage vol with matching path 'etcd-2-os.qcow2'\n",
};
const POOL_MISSING: ProbeAnswer = {
  code: 1,
  output: "error: failed to get pool 'etcd-typo'\nerror: Storage pool not found: no storage pool with matching name 'etcd-typo'\n",
};
const BROKEN: ProbeAnswer = { code: 1, output: 'error: failed to connect to the hypervisor\n' };

const rows: {
  title: string;
  facts: Omit<DiskFacts, 'etcdAnswers'>;
  etcd: boolean;
  gone: boolean;
  why: RegExp | undefined;
  asksEtcd: boolean;
}[] = [
  { title: 'both volumes there', facts: { os: EXISTS, data: EXISTS }, etcd: true, gone: false, why: undefined, asksEtcd: false },
  {
    title: 'OS volume gone, data volume there, etcd down: kept (the OS disk is made again, the data disk holds etcd)',
    facts: { os: VOLUME_MISSING, data: EXISTS },
    etcd: false,
    gone: false,
    why: undefined,
    asksEtcd: false,
  },
  {
    title: 'both volumes gone, etcd down: gone',
    facts: { os: VOLUME_MISSING, data: VOLUME_MISSING },
    etcd: false,
    gone: true,
    why: /OS volume is gone and its data volume is gone and its etcd does not answer/,
    asksEtcd: true,
  },
  {
    title: 'data volume gone, etcd down: gone',
    facts: { os: EXISTS, data: VOLUME_MISSING },
    etcd: false,
    gone: true,
    why: /data volume is gone/,
    asksEtcd: true,
  },
  {
    title: 'no data volume configured, OS gone, etcd down: gone',
    facts: { os: VOLUME_MISSING },
    etcd: false,
    gone: true,
    why: /^its OS volume is gone and/,
    asksEtcd: true,
  },
  {
    title: 'volume gone but etcd answers: kept',
    facts: { os: EXISTS, data: VOLUME_MISSING },
    etcd: true,
    gone: false,
    why: /still answers/,
    asksEtcd: true,
  },
  {
    title: 'pool missing (a mistyped volume_pool), etcd down: kept',
    facts: { os: POOL_MISSING, data: POOL_MISSING },
    etcd: false,
    gone: false,
    why: undefined,
    asksEtcd: false,
  },
  {
    title: 'one volume missing, the other unreadable: kept',
    facts: { os: VOLUME_MISSING, data: POOL_MISSING },
    etcd: false,
    gone: false,
    why: /could not say.*no storage pool/,
    asksEtcd: false,
  },
  { title: 'a broken connection: kept', facts: { os: BROKEN, data: BROKEN }, etcd: false, gone: false, why: undefined, asksEtcd: false },
];

for (const row of rows) {
  test(`lost disks: ${row.title}`, async (t) => {
    let asked = false;
    const etcdAnswers = async () => {
      asked = true;
      return row.etcd;
    };
    const verdict = await judgeDisks({ ...row.facts, etcdAnswers });
    t.is(verdict.gone, row.gone);
    t.is(asked, row.asksEtcd);
    if (row.why === undefined) t.is(verdict.why, undefined);
    else t.regex(verdict.why ?? '', row.why);
  });
}
