import test from 'ava';
import { v2StoreCheckCommand, v2StoreVerdict, type V2StoreVerdict } from '../../tasks/upgrade/v2store.ts';

/** etcdutl's answers, as real 3.5.30 binaries gave them (exit code, stdout and stderr together), to verdicts. */
const rows: { name: string; code: number; output: string; verdict: V2StoreVerdict }[] = [
  { name: 'a clean store', code: 0, output: 'No custom content found in v2store.\n', verdict: { clean: true } },
  {
    name: 'v2 writes in a snapshot',
    code: 1,
    output: 'Error: detected custom content in v2store\n',
    verdict: { clean: false, detail: 'custom (non-membership) data in its v2 store' },
  },
  {
    name: 'no such etcdutl (a release the tool did not install)',
    code: 1,
    output: 'sudo: /opt/etcd-kvm/etcd-v3.5.30-linux-amd64/etcdutl: command not found\n',
    verdict: { unchecked: 'etcdutl check v2store exited 1: sudo: /opt/etcd-kvm/etcd-v3.5.30-linux-amd64/etcdutl: command not found' },
  },
  {
    name: 'an etcdutl without the command (exit 0, its help text): not a check',
    code: 0,
    output: 'Usage:\n  etcdutl check [command]\n',
    verdict: { unchecked: 'etcdutl check v2store exited 0: etcdutl check [command]' },
  },
  { name: 'nothing said', code: 2, output: '', verdict: { unchecked: 'etcdutl check v2store exited 2: (nothing)' } },
];

for (const row of rows)
  test(`v2StoreVerdict: ${row.name}`, (t) => {
    t.deepEqual(v2StoreVerdict(row.code, row.output), row.verdict);
  });

test('the check runs as the etcd user (the data directory is its own, 0700)', (t) => {
  t.deepEqual(v2StoreCheckCommand('/opt/etcd-kvm/etcd-v3.5.32-linux-amd64/etcdutl', '/var/lib/etcd'), [
    'sudo',
    '-u',
    'etcd',
    '/opt/etcd-kvm/etcd-v3.5.32-linux-amd64/etcdutl',
    'check',
    'v2store',
    '--data-dir',
    '/var/lib/etcd',
  ]);
});
