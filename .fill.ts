import { etcdctl, rootIdentity, endpoint } from './test/helpers/lab.ts';
const value = 'x'.repeat(100 * 1024);
for (let i = 0; i < 80; i++) { const r = etcdctl([endpoint('etcd-1')], rootIdentity, ['put', `e2e/fill/${i}`, value]); if (r.status) throw new Error(r.stderr); }
etcdctl([endpoint('etcd-1')], rootIdentity, ['del', '--prefix', 'e2e/fill/']);
