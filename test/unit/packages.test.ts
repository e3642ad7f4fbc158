import test from 'ava';
import { missingPackages, PACKAGE_SETS, parseInstalled } from '../../scripts/system/packages.ts';

const DPKG = [
  'curl install ok installed',
  'openssl install ok installed',
  'etcd-server deinstall ok config-files',
  'xorriso install ok unpacked',
  'libxml2-utils:amd64 install ok installed',
  '',
].join('\n');

test('dpkg-query output: only "install ok installed" counts; removed, half-installed and unknown packages do not', (t) => {
  t.deepEqual([...parseInstalled(DPKG)].sort(), ['curl', 'libxml2-utils', 'openssl']);
  t.deepEqual([...parseInstalled('')], []);
});

const cases: { name: string; wanted: string[]; installed: string[]; missing: string[] }[] = [
  {
    name: 'nothing installed: everything, in the order asked',
    wanted: ['xorriso', 'curl', 'sudo'],
    installed: [],
    missing: ['xorriso', 'curl', 'sudo'],
  },
  { name: 'everything installed: nothing', wanted: ['xorriso', 'curl'], installed: ['curl', 'xorriso', 'vim'], missing: [] },
  { name: 'some installed: the rest', wanted: ['xorriso', 'curl', 'sudo'], installed: ['curl'], missing: ['xorriso', 'sudo'] },
  { name: 'a name asked twice is installed once', wanted: ['curl', 'curl', 'sudo'], installed: ['sudo'], missing: ['curl'] },
];
for (const { name, wanted, installed, missing } of cases) {
  test(`missing packages: ${name}`, (t) => {
    t.deepEqual(missingPackages(wanted, new Set(installed)), missing);
  });
}

test('a removed package (config files left) is installed again', (t) => {
  t.deepEqual(missingPackages(['etcd-server', 'curl'], parseInstalled(DPKG)), ['etcd-server']);
});

test('the e2e set is the test tools plus the lab, each once', (t) => {
  const e2e = new Set<string>(PACKAGE_SETS.e2e);
  t.is(e2e.size, PACKAGE_SETS.e2e.length);
  for (const name of [...PACKAGE_SETS.test, ...PACKAGE_SETS.lab]) t.true(e2e.has(name), name);
});
