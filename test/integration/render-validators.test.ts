import test from 'ava';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { loadInventory } from '../../tasks/inventory/load.ts';
import { buildCloudInitIso, seedImage, seedIso } from '../../tasks/libvirt/cloud-init-iso.ts';
import { run, runAsync } from '../helpers/exec.ts';
import { fileOf, renderWithPki, writeFilesOf } from '../helpers/render.ts';

const INVENTORIES = [
  'inventories/lab.yaml',
  'inventories/examples/libvirt-network.yaml',
  'inventories/examples/macvtap.yaml',
  'inventories/examples/all-services.yaml',
];

for (const path of INVENTORIES) {
  test(`${path}: every rendered file passes the real validators`, async (t) => {
    const { inventory, rendered } = await renderWithPki(loadInventory(path));
    const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-validate-'));
    // Each validator is a process of its own (cloud-init's a Python start): the members are checked side by side.
    const validated = inventory.members.map(async (member) => {
      const files = rendered.get(member.name);
      const write = (name: string) => {
        const target = join(dir, `${member.name}-${name}`);
        writeFileSync(target, fileOf(files, name).content);
        return target;
      };

      const domain = await runAsync('virt-xml-validate', [write('domain.xml'), 'domain']);
      t.is(domain.status, 0, `${member.name} domain.xml: ${domain.stderr}${domain.stdout}`);

      const userData = await runAsync('cloud-init', ['schema', '--config-file', write('user-data')]);
      t.is(userData.status, 0, `${member.name} user-data: ${userData.stderr}${userData.stdout}`);
      t.regex(userData.stdout, /Valid cloud-config/);
      // Rules dropped into /etc/sudoers.d: one bad line there breaks sudo for every user of the guest.
      for (const file of writeFilesOf(fileOf(files, 'user-data').content).values()) {
        if (!file.path.startsWith('/etc/sudoers.d/')) continue;
        const target = join(dir, `${member.name}-${basename(file.path)}`);
        writeFileSync(target, file.content);
        const sudoers = await runAsync('visudo', ['--check', '--file', target]);
        t.is(sudoers.status, 0, `${member.name} ${file.path}: ${sudoers.stderr}${sudoers.stdout}`);
      }

      // cloud-init 22.4 (Debian 12) has no schema for network-config v2; its own parser and networkd
      // renderer (the code that runs in the guest) are the validator, and the output is checked for meaning.
      const out = join(dir, `${member.name}-networkd`);
      const converted = await runAsync('cloud-init', [
        'devel',
        'net-convert',
        '-p',
        write('network-config'),
        '-k',
        'yaml',
        '-d',
        out,
        '-D',
        'debian',
        '-O',
        'networkd',
      ]);
      t.is(converted.status, 0, `${member.name} network-config: ${converted.stderr}`);
      const networkd = readFileSync(join(out, 'etc/systemd/network/10-cloud-init-nic0.network'), 'utf8');
      const nic = member.interfaces[0]!;
      t.true(networkd.includes(`MACAddress=${nic.mac}`), networkd);
      t.true(networkd.includes(`Address=${nic.ip}/${nic.prefixLength}`), networkd);
      t.true(networkd.includes(`Gateway=${nic.gateway}`), networkd);
    });
    await Promise.all(validated);
  });
}

test('net-convert really rejects a broken network-config (the validator can fail)', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-validate-'));
  const bad = join(dir, 'network-config');
  writeFileSync(bad, 'version: 2\nethernets:\n  nic0:\n    addresses: 10.0.0.5/24\n');
  t.not(
    run('cloud-init', ['devel', 'net-convert', '-p', bad, '-k', 'yaml', '-d', join(dir, 'out'), '-D', 'debian', '-O', 'networkd']).status,
    0,
  );
  const badDomain = join(dir, 'domain.xml');
  writeFileSync(badDomain, "<domain type='qemu'><name>x</name><memory>1</memory><vcpu>one</vcpu></domain>");
  t.not(run('virt-xml-validate', [badDomain, 'domain']).status, 0);
  const badSudoers = join(dir, 'sudoers');
  writeFileSync(badSudoers, 'fluent-bit-updater ALL=(root) NOPASSWD systemctl reload fluent-bit.service\n');
  t.not(run('visudo', ['--check', '--file', badSudoers]).status, 0);
});

test("a seed ISO is built once per process for the same files (the check's digest and the upload), again for other files", async (t) => {
  const { inventory, rendered } = await renderWithPki(loadInventory('inventories/lab.yaml'));
  const [first, second] = inventory.members.map((member) => rendered.get(member.name)!);
  const once = seedIso(first!);
  t.is(seedIso(first!.map((file) => ({ ...file }))), once, 'the same content, another array: the same build');
  t.deepEqual((await once).bytes, (await buildCloudInitIso(first!)).bytes);
  const other = await seedIso(second!);
  t.not(other.sha256, (await once).sha256);
});

test('a seed ISO padded with zeros to a larger volume (rewritten in place) still reads back: the same volume label and files', async (t) => {
  const { inventory, rendered } = await renderWithPki(loadInventory('inventories/lab.yaml'));
  const files = rendered.get(inventory.members[0]!.name)!;
  const iso = await buildCloudInitIso(files);
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-seed-'));
  const padded = join(dir, 'padded.iso');
  writeFileSync(padded, seedImage(iso, iso.bytes.length + 1024 * 1024), { mode: 0o600 });
  const label = run('xorriso', ['-indev', padded, '-pvd_info']);
  t.regex(label.stdout + label.stderr, /Volume Id\s*:\s*cidata/);
  for (const name of ['user-data', 'meta-data', 'network-config']) {
    const out = join(dir, name);
    const extracted = run('xorriso', ['-osirrox', 'on', '-indev', padded, '-extract', `/${name}`, out]);
    t.is(extracted.status, 0, extracted.stderr);
    t.is(readFileSync(out, 'utf8'), fileOf(files, name).content, name);
  }
});
