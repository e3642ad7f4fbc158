import test from 'ava';
import { etcdEnvironment, renderUnitFile } from '../../tasks/render/etcd.ts';
import { guestReleaseOf, snapshotRestoreProgram, versionSettings } from '../../tasks/render/etcd-release.ts';
import { renderInstaller } from '../../tasks/render/guest/dependencies.ts';
import { parseVersion } from '../../tasks/upgrade/version.ts';
import { baseDocument, load } from '../helpers/inventory.ts';

/** What a member's etcd is told, per version it runs: the settings whose name or default differs. */

const settings = (version: string) => Object.fromEntries(versionSettings(parseVersion(version)!));

const rows: { version: string; settings: Record<string, string> }[] = [
  { version: '3.4.23', settings: { ETCD_LOGGER: 'zap', ETCD_SNAPSHOT_COUNT: '10000' } },
  { version: '3.5.16', settings: { ETCD_SNAPSHOT_COUNT: '10000' } },
  { version: '3.6.5', settings: { ETCD_SNAPSHOT_COUNT: '10000' } },
];
for (const row of rows) {
  test(`version settings: etcd ${row.version}`, (t) => {
    t.deepEqual(settings(row.version), row.settings);
  });
}

function releaseInventory(version: string) {
  const doc = baseDocument();
  doc.etcd = { version, binaries: 'release' };
  return load(doc);
}

test('binaries: release: the environment file names the release of etcd.version, and the unit waits for a release to be installed', (t) => {
  const inventory = releaseInventory('v3.5.16');
  const unit = renderUnitFile(inventory, inventory.members[0]!);
  t.regex(unit, /^ExecStart=\/usr\/bin\/env \$\{ETCDKVM_BINARY\}$/m);
  t.regex(unit, /^ConditionPathExistsGlob=\/opt\/etcd-kvm\/etcd-v\*-linux-amd64\/etcd$/m);
  t.is(guestReleaseOf(parseVersion('v3.5.16')!).dir, '/opt/etcd-kvm/etcd-v3.5.16-linux-amd64');
  const env = Object.fromEntries(etcdEnvironment(inventory, inventory.members[0]!, 'existing'));
  t.like(env, { ...settings('3.5.16'), ETCDKVM_BINARY: '/opt/etcd-kvm/etcd-v3.5.16-linux-amd64/etcd' });
  // etcd warns of every ETCD_* variable it has no flag for: the tool's own is not one.
  t.false(Object.keys(env).some((key) => key.startsWith('ETCD_') && key.includes('BINARY')));
});

test('3.7 starts with no --experimental-* flag (etcd 3.7 upgrade guide): from 3.6 on, no member environment holds one', (t) => {
  for (const version of ['v3.6.11', 'v3.7.0']) {
    const inventory = releaseInventory(version);
    for (const member of inventory.members) {
      const keys = etcdEnvironment(inventory, member, 'existing').map(([key]) => key);
      t.true(keys.length > 10, `${version} ${member.name}: ${keys.length} settings`);
      t.deepEqual(
        keys.filter((key) => key.startsWith('ETCD_EXPERIMENTAL_')),
        [],
        `${version} ${member.name}`,
      );
    }
  }
  // Before 3.6 the corruption checks have no other names: the only experimental flags the tool renders.
  const before = releaseInventory('v3.5.33');
  t.deepEqual(
    etcdEnvironment(before, before.members[0]!, 'existing')
      .map(([key]) => key)
      .filter((key) => key.startsWith('ETCD_EXPERIMENTAL_')),
    [
      'ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK',
      'ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME',
      'ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED',
      'ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_TIME',
    ],
  );
});

test('binaries: release: a roll changes the environment file alone, never the unit (no daemon-reload per member)', (t) => {
  const [before, after] = ['v3.5.16', 'v3.6.5'].map((version) => {
    const inventory = releaseInventory(version);
    const member = inventory.members[0]!;
    return { unit: renderUnitFile(inventory, member), env: Object.fromEntries(etcdEnvironment(inventory, member, 'existing')) };
  });
  t.is(after!.unit, before!.unit);
  t.is(after!.env.ETCDKVM_BINARY, '/opt/etcd-kvm/etcd-v3.6.5-linux-amd64/etcd');
  t.not(after!.env.ETCDKVM_BINARY, before!.env.ETCDKVM_BINARY);
});

test("binaries: image: the image's etcd, no condition, no version settings; the corruption checks every version reads", (t) => {
  const inventory = load(baseDocument());
  const unit = renderUnitFile(inventory, inventory.members[0]!);
  t.regex(unit, /^ExecStart=\/usr\/bin\/etcd$/m);
  t.notRegex(unit, /ConditionPathExists/);
  const env = Object.fromEntries(etcdEnvironment(inventory, inventory.members[0]!, 'existing'));
  for (const key of ['ETCD_LOGGER', 'ETCD_SNAPSHOT_COUNT', 'ETCD_FEATURE_GATES', 'ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED'])
    t.false(key in env, key);
  t.like(env, { ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK: 'true', ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME: '4h' });
});

test('install_dependencies with binaries: release: the first-boot installer leaves etcd to the tool', (t) => {
  const doc = baseDocument();
  doc.etcd = { version: 'v3.5.16', binaries: 'release' };
  for (const member of doc.members) member.install_dependencies = true;
  const inventory = load(doc);
  const script = renderInstaller(inventory, inventory.members[0]!);
  t.notRegex(script, /etcd-io\/etcd/);
  t.regex(script, /the tool installs it from the control node/);
  const image = load({ ...doc, etcd: { version: 'v3.5.16', binaries: 'image' } });
  t.regex(renderInstaller(image, image.members[0]!), /releases\/download\/v3\.5\.16\/etcd-v3\.5\.16-linux-amd64\.tar\.gz/);
});

/** Which program restores a snapshot in a member: etcdutl where the tool knows the release has one, else etcdctl. */
const restoreRows: { binaries: 'release' | 'image'; installDependencies?: boolean; version: string; program: string[] }[] = [
  { binaries: 'release', version: 'v3.4.33', program: ['env', 'ETCDCTL_API=3', '/opt/etcd-kvm/etcd-v3.4.33-linux-amd64/etcdctl'] },
  { binaries: 'release', version: 'v3.5.16', program: ['/opt/etcd-kvm/etcd-v3.5.16-linux-amd64/etcdutl'] },
  { binaries: 'release', version: 'v3.6.5', program: ['/opt/etcd-kvm/etcd-v3.6.5-linux-amd64/etcdutl'] },
  // The image's etcd (Debian's 3.4 in the lab): its version is not the tool's to know, and its etcdctl restores.
  { binaries: 'image', version: '3.4.23', program: ['env', 'ETCDCTL_API=3', '/usr/bin/etcdctl'] },
  { binaries: 'image', installDependencies: true, version: 'v3.6.5', program: ['/usr/local/bin/etcdutl'] },
];

for (const row of restoreRows) {
  test(`snapshot restore program: binaries ${row.binaries}${row.installDependencies ? ' with install_dependencies' : ''}, etcd ${row.version}`, (t) => {
    const doc = baseDocument();
    doc.etcd = { version: row.version, binaries: row.binaries };
    if (row.installDependencies) doc.defaults = { ...(doc.defaults as object), install_dependencies: true };
    const inventory = load(doc);
    t.deepEqual(snapshotRestoreProgram(inventory, inventory.members[0]!), row.program);
  });
}

test('install_dependencies installs etcdutl beside etcdctl when the release has it', (t) => {
  const doc = baseDocument();
  doc.etcd = { version: 'v3.5.16' };
  doc.defaults = { ...(doc.defaults as object), install_dependencies: true };
  const inventory = load(doc);
  const script = renderInstaller(inventory, inventory.members[0]!);
  t.regex(
    script,
    /if \[ -x "\$work\/etcd-v3\.5\.16-linux-amd64\/etcdutl" \]; then install -m 0755 "\$work\/etcd-v3\.5\.16-linux-amd64\/etcdutl" \/usr\/local\/bin\/; fi/,
  );
});
