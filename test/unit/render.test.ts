import test from 'ava';
import { patienceOf } from '../../tasks/core/runner.ts';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { XMLParser } from 'fast-xml-parser';
import { parse } from 'yaml';
import { renderAll } from '../../tasks/deploy/context.ts';
import { etcdEnvironment, parseEnvironmentFile, renderEnvironmentFile } from '../../tasks/render/etcd.ts';
import { renderGuest, renderMember, renderMemberAndGuest } from '../../tasks/render/member.ts';
import { renderedFilesStep } from '../../tasks/steps/rendered-files.ts';
import { Secret } from '../../tasks/core/secret.ts';
import { PkiStore } from '../../tasks/pki/store.ts';
import { baseDocument, load } from '../helpers/inventory.ts';
import { fileOf, firstBootStep, writeFilesOf } from '../helpers/render.ts';
import type { Inventory } from '../../tasks/inventory/model.ts';

const identity = { cluster: 'test', id: '0d6f6c3e-3f0b-4a4b-9a57-2c1f0e8b7a10', adoptsUnmarked: false };
const pendingPki = { members: new Map(), identity };

function rendered(inventory: Inventory, memberIndex = 0) {
  return renderMember({ inventory, pki: pendingPki, firstStart: 'new' }, inventory.members[memberIndex]!);
}

test('etcd settings: https URLs on the first interface, cluster-wide initial cluster, modes as configured', (t) => {
  const doc = baseDocument();
  doc.etcd = { client_cert_auth: false, grpc_gateway_enabled: true, auto_compaction_mode: 'periodic', auto_compaction_retention: '1h' };
  doc.members[0]!.authentication_bootstrap = { bootstrap: true, root_password: 'x' };
  const inventory = load(doc);
  const env = Object.fromEntries(etcdEnvironment(inventory, inventory.members[1]!, 'existing'));
  t.like(env, {
    ETCD_NAME: 'etcd-2',
    ETCD_LISTEN_CLIENT_URLS: 'https://10.10.0.12:2379,https://127.0.0.1:2379',
    ETCD_ADVERTISE_CLIENT_URLS: 'https://10.10.0.12:2379',
    ETCD_LISTEN_PEER_URLS: 'https://10.10.0.12:2380',
    ETCD_INITIAL_CLUSTER: 'etcd-1=https://10.10.0.11:2380,etcd-2=https://10.10.0.12:2380,etcd-3=https://10.10.0.13:2380',
    ETCD_INITIAL_CLUSTER_STATE: 'existing',
    ETCD_INITIAL_CLUSTER_TOKEN: 'test-token',
    ETCD_CLIENT_CERT_AUTH: 'false',
    ETCD_PEER_CLIENT_CERT_AUTH: 'true',
    ETCD_ENABLE_GRPC_GATEWAY: 'true',
    ETCD_AUTO_COMPACTION_MODE: 'periodic',
    ETCD_AUTO_COMPACTION_RETENTION: '1h',
    ETCD_QUOTA_BACKEND_BYTES: String(8 * 1024 ** 3),
  });
});

// etcd's raft timing: rendered only where it differs from etcd's defaults (100 / 1000 ms), so a cluster deployed before
// these settings existed keeps its environment file and is not rolled for nothing.
const raftTimings: { name: string; etcd: Record<string, number>; heartbeat?: string; election?: string }[] = [
  { name: "etcd's defaults, unset: neither variable", etcd: {} },
  { name: "etcd's defaults, given: neither variable", etcd: { heartbeat_interval: 100, election_timeout: 1000 } },
  { name: 'both changed', etcd: { heartbeat_interval: 500, election_timeout: 5000 }, heartbeat: '500', election: '5000' },
  { name: 'the election timeout alone', etcd: { election_timeout: 2500 }, election: '2500' },
];
for (const row of raftTimings) {
  test(`raft timing in etcd.env: ${row.name}`, (t) => {
    const doc = baseDocument();
    doc.etcd = row.etcd;
    const inventory = load(doc);
    const env = new Map(etcdEnvironment(inventory, inventory.members[0]!, 'existing'));
    t.is(env.get('ETCD_HEARTBEAT_INTERVAL'), row.heartbeat);
    t.is(env.get('ETCD_ELECTION_TIMEOUT'), row.election);
  });
}

// Raft's pre-vote: turned on where etcd does not turn it on by itself (3.4, and the image's etcd of unknown version).
const preVotes: { name: string; etcd: Record<string, unknown>; preVote?: string }[] = [
  { name: "the image's etcd (its version unknown)", etcd: {}, preVote: 'true' },
  { name: 'release v3.4.23', etcd: { binaries: 'release', version: 'v3.4.23' }, preVote: 'true' },
  { name: 'release v3.5.16 (on by default)', etcd: { binaries: 'release', version: 'v3.5.16' } },
  { name: 'release v3.6.5 (on by default)', etcd: { binaries: 'release', version: 'v3.6.5' } },
];
for (const row of preVotes) {
  test(`pre-vote in etcd.env: ${row.name}`, (t) => {
    const doc = baseDocument();
    doc.etcd = row.etcd;
    const inventory = load(doc);
    t.is(new Map(etcdEnvironment(inventory, inventory.members[0]!, 'existing')).get('ETCD_PRE_VOTE'), row.preVote);
  });
}

test('environment file values round-trip, quoting what systemd would split', (t) => {
  const variables: [string, string][] = [
    ['ETCD_NAME', 'etcd-1'],
    ['ETCD_ODD', 'a b "c" $d\\e'],
  ];
  const text = renderEnvironmentFile(variables);
  t.true(text.includes('ETCD_ODD="a b \\"c\\" \\$d\\\\e"'));
  t.deepEqual([...parseEnvironmentFile(text)], variables);
});

test('user-data: admin user, keys, TLS files with modes, etcd unit, data dir 0700 owned by etcd; the password only in the real file', (t) => {
  const doc = baseDocument();
  Object.assign(doc.defaults as object, {
    ssh_admin_user: 'ops',
    admin_user_password: 'hunter2-console',
    ssh_admin_public_key: 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOp ops@desk',
  });
  const inventory = load(doc);
  const sshHostKey = { privateKey: new Secret('HOST-KEY-PEM\n'), publicLine: 'ecdsa-sha2-nistp256 BBBB etcd-1 host key' };
  const pki = {
    caCert: 'CA-PEM\n',
    members: new Map([['etcd-1', { caCert: 'CA-PEM\n', cert: 'CERT-PEM\n', key: new Secret('KEY-PEM\n'), sshHostKey }]]),
    adminSshPublicKey: 'ecdsa-sha2-nistp256 AAAA tool',
    identity,
  };
  const files = renderMember({ inventory, pki, firstStart: 'new' }, inventory.members[0]!);
  const userData = fileOf(files, 'user-data');
  t.true(userData.content.startsWith('#cloud-config\n'));
  const config = parse(userData.content, { version: '1.1' });
  t.is(config.hostname, 'etcd-1');
  t.false(config.ssh_pwauth);
  t.is(config.users[0].name, 'ops');
  t.false(config.users[0].lock_passwd);
  t.deepEqual(config.users[0].ssh_authorized_keys, ['ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOp ops@desk', 'ecdsa-sha2-nistp256 AAAA tool']);
  t.deepEqual(config.chpasswd.users, [{ name: 'ops', password: 'hunter2-console', type: 'text' }]);
  // The pinned host key replaces whatever the image or cloud-init would generate.
  t.true(config.ssh_deletekeys);
  t.deepEqual(config.ssh_keys, { ecdsa_private: 'HOST-KEY-PEM\n', ecdsa_public: 'ecdsa-sha2-nistp256 BBBB etcd-1 host key' });
  const writes = writeFilesOf(userData.content);
  t.deepEqual(writes.get('/etc/etcd/tls/server.key'), {
    path: '/etc/etcd/tls/server.key',
    permissions: '0400',
    owner: 'etcd:etcd',
    defer: true,
    content: 'KEY-PEM\n',
  });
  t.is(writes.get('/etc/etcd/tls/server.crt')!.content, 'CERT-PEM\n');
  t.is(writes.get('/etc/etcd/tls/ca.crt')!.content, 'CA-PEM\n');
  t.regex(writes.get('/etc/systemd/system/etcd.service')!.content, /EnvironmentFile=\/etc\/etcd\/etcd.env\nExecStart=\/usr\/bin\/etcd/);
  t.deepEqual(config.runcmd[0], ['install', '-d', '-o', 'etcd', '-g', 'etcd', '-m', '0700', '/var/lib/etcd']);
  t.true(firstBootStep(config.runcmd, 'enable', 'etcd.service') >= 0);
  t.true(firstBootStep(config.runcmd, 'restart', 'etcd.service') >= 0);

  // The display copy masks every secret but keeps everything else.
  t.false(userData.display.includes('hunter2-console'));
  t.false(userData.display.includes('KEY-PEM'));
  t.true(userData.display.includes('CERT-PEM'));
  t.true(userData.display.includes('BBBB etcd-1 host key'));
  t.is((userData.display.match(/<redacted>/g) ?? []).length, 3);

  // renderAll renders the guest's fragments once each way for both its user-data and its desired guest: the same as apart.
  const context = { inventory, pki, firstStart: 'new' as const };
  const together = renderMemberAndGuest(context, inventory.members[0]!);
  t.deepEqual(together.files, files);
  t.deepEqual(together.guest, renderGuest(context, inventory.members[0]!));
  t.is(together.guest.files.find((file) => file.path === '/etc/etcd/tls/server.key')?.content, 'KEY-PEM\n');
});

test('user-data with admin_user_password_hash: cloud-init gets hashed_passwd on the admin user, no plain password and no chpasswd; the display masks the hash', (t) => {
  const hash = '$6$Zx8sQ2pLr4Tn$sFSBY8nzruOY1ZjsL68Qf0mWG20R1ZBkYxGJZ0csqqKGKk9S/f1MMB5W/1qvWS9LnDaVJ0bOs8KDNInld/MMw0';
  const doc = baseDocument();
  Object.assign(doc.defaults as object, { ssh_admin_user: 'ops', admin_user_password_hash: hash });
  const userData = fileOf(rendered(load(doc)), 'user-data');
  const config = parse(userData.content, { version: '1.1' });
  const admin = config.users[0];
  t.deepEqual(
    [admin.name, admin.hashed_passwd, admin.lock_passwd, admin.passwd, admin.plain_text_passwd],
    ['ops', hash, false, undefined, undefined],
  );
  t.is(config.chpasswd, undefined);
  t.false(config.ssh_pwauth);
  t.false(userData.display.includes(hash));
});

test('network-config: no interface takes router advertisements (a YAML boolean), so networkd never waits 12 s for a router at first boot', (t) => {
  const doc = baseDocument();
  (doc.members[0]!.libvirt_networks as Record<string, unknown>[]).push({ network_name: 'net2', ip: '10.20.0.11', prefix_length: 24 });
  const config = parse(fileOf(rendered(load(doc)), 'network-config').content, { version: '1.1' });
  const nics = Object.values(config.ethernets as Record<string, Record<string, unknown>>);
  t.is(nics.length, 2);
  for (const nic of nics) {
    // A string 'false' would be truthy to cloud-init's isinstance(…, bool) check and never rendered.
    t.is(nic['accept-ra'], false);
    t.is(nic.dhcp6, false);
  }
});

test('network-config matches NICs by MAC, quoted so YAML 1.1 cannot read an all-digit MAC as a number', (t) => {
  const doc = baseDocument();
  (doc.members[0]!.libvirt_networks as Record<string, unknown>[])[0]!.mac = '52:54:00:12:34:56';
  (doc.members[0]!.libvirt_networks as Record<string, unknown>[])[0]!.dns_servers = ['10.10.0.1'];
  const inventory = load(doc);
  const text = fileOf(rendered(inventory), 'network-config').content;
  t.true(text.includes('macaddress: "52:54:00:12:34:56"'));
  const config = parse(text, { version: '1.1' });
  t.deepEqual(config, {
    version: 2,
    ethernets: {
      nic0: {
        match: { macaddress: '52:54:00:12:34:56' },
        dhcp4: false,
        dhcp6: false,
        'accept-ra': false,
        addresses: ['10.10.0.11/24'],
        routes: [{ to: '0.0.0.0/0', via: '10.10.0.1', metric: 100 }],
        nameservers: { addresses: ['10.10.0.1'] },
      },
    },
  });
  t.deepEqual(parse(fileOf(rendered(inventory), 'meta-data').content), { 'instance-id': 'test-etcd-1', 'local-hostname': 'etcd-1' });
});

/** The domain XML as data: attributes as "@name", every element a list, text as "#text". */
type Xml = { [key: string]: Xml[] | string };
const xmlParser = new XMLParser({
  ignoreAttributes: false,
  attributeNamePrefix: '@',
  textNodeName: '#text',
  parseTagValue: false,
  parseAttributeValue: false,
  isArray: (_name, _path, _leaf, isAttribute) => !isAttribute,
});
const domainOf = (xml: string): Xml => ((xmlParser.parse(xml) as Xml).domain as Xml[])[0]!;
const all = (node: Xml, name: string): Xml[] => (node[name] as Xml[] | undefined) ?? [];
const one = (node: Xml, name: string): Xml => {
  const found = all(node, name);
  if (found.length !== 1) throw new Error(`expected one <${name}>, found ${found.length}`);
  return found[0]!;
};
const text = (node: Xml) => (typeof node === 'string' ? node : (node['#text'] as string));

test('domain XML: sizes, TCG or KVM CPU, disks, cdrom on virtio-scsi, NICs, escaping', (t) => {
  const doc = baseDocument();
  doc.hypervisors = { hv: { address: '127.0.0.1', domain_type: 'qemu', tcg_tb_cache_mib: 256, pool: 'p&q' } };
  Object.assign(doc.members[0]!, {
    vcpus: 2,
    memory: 2048,
    data_volume_size_gib: 5,
    macvtap_interfaces: [{ interface: 'ens3', ip: '10.30.0.5', prefix_length: 24, mac: '52:54:00:aa:bb:cc' }],
  });
  const domain = domainOf(fileOf(rendered(load(doc)), 'domain.xml').content);
  t.is(domain['@type'], 'qemu');
  t.is(text(one(domain, 'name')), 'etcd-1');
  t.like(one(domain, 'memory'), { '@unit': 'KiB', '#text': '2097152' });
  t.is(text(one(domain, 'vcpu')), '2');
  t.like(one(one(one(domain, 'features'), 'tcg'), 'tb-cache'), { '@unit': 'KiB', '#text': '262144' });
  t.is(all(domain, 'cpu').filter((cpu) => cpu['@mode'] === 'host-passthrough').length, 0, 'TCG cannot pass the host CPU through');

  const devices = one(domain, 'devices');
  const disks = all(devices, 'disk').map((disk) => ({
    device: disk['@device'],
    source: one(disk, 'source'),
    target: one(disk, 'target'),
    readonly: all(disk, 'readonly').length > 0,
  }));
  // The pool name with & is escaped in the text and arrives intact.
  t.deepEqual(
    disks.map((d) => [d.device, d.source['@pool'], d.source['@volume'], d.target['@dev'], d.target['@bus'], d.readonly]),
    [
      ['disk', 'p&q', 'etcd-1-os.qcow2', 'vda', 'virtio', false],
      ['disk', 'p&q', 'etcd-1-data.qcow2', 'vdb', 'virtio', false],
      ['cdrom', 'p&q', 'etcd-1-cloud-init.iso', 'sda', 'scsi', true],
    ],
  );
  t.true(
    all(devices, 'controller').some((c) => c['@type'] === 'scsi' && c['@model'] === 'virtio-scsi'),
    'the cdrom sits on virtio-scsi',
  );
  const nics = all(devices, 'interface').map((nic) => ({
    type: nic['@type'],
    source: one(nic, 'source'),
    mac: one(nic, 'mac')['@address'],
  }));
  t.is(nics.length, 2);
  t.like(nics[0], { type: 'network', source: { '@network': 'net' } });
  t.like(nics[1], { type: 'direct', source: { '@dev': 'ens3', '@mode': 'bridge' }, mac: '52:54:00:aa:bb:cc' });
  t.is(one(devices, 'console')['@type'], 'pty');

  doc.hypervisors = { hv: { address: '127.0.0.1' } };
  const kvm = domainOf(fileOf(rendered(load(doc)), 'domain.xml').content);
  t.is(kvm['@type'], 'kvm');
  t.is(one(kvm, 'cpu')['@mode'], 'host-passthrough');
  t.is(all(kvm, 'features').flatMap((features) => all(features, 'tcg')).length, 0);
});

test('render step: first run creates, unchanged is ok, a changed field shows a diff, a secret-only change is redacted', async (t) => {
  const stateDir = mkdtempSync(join(tmpdir(), 'etcd-kvm-rec-'));
  const step = (inventory: Inventory) =>
    renderedFilesStep({ stateDir, rendered: renderAll(inventory, inventory.members, new PkiStore(stateDir), 'new').files });
  const doc = baseDocument();
  const first = step(load(doc));
  const empty = await first.check('etcd-1', patienceOf(false));
  t.deepEqual(
    first.plan(empty, 'etcd-1').map((c) => c.summary),
    ['create domain.xml', 'create user-data', 'create meta-data', 'create network-config'],
  );
  await first.apply(first.plan(empty, 'etcd-1'), 'etcd-1', empty);
  t.deepEqual(first.plan(await first.check('etcd-1', patienceOf(false)), 'etcd-1'), []);

  (doc.members[0] as Record<string, unknown>).memory = 4096;
  const bigger = step(load(doc));
  const changes = bigger.plan(await bigger.check('etcd-1', patienceOf(false)), 'etcd-1');
  t.deepEqual(
    changes.map((c) => c.summary),
    ['update domain.xml'],
  );
  t.regex(changes[0]!.diff!.before, /<memory unit='KiB'>1048576<\/memory>/);
  t.regex(changes[0]!.diff!.after, /<memory unit='KiB'>4194304<\/memory>/);
  await bigger.apply(changes, 'etcd-1', await bigger.check('etcd-1', patienceOf(false)));

  (doc.members[0] as Record<string, unknown>).admin_user_password = 'first';
  const withPassword = step(load(doc));
  await withPassword.apply(
    withPassword.plan(await withPassword.check('etcd-1', patienceOf(false)), 'etcd-1'),
    'etcd-1',
    await withPassword.check('etcd-1', patienceOf(false)),
  );
  (doc.members[0] as Record<string, unknown>).admin_user_password = 'second';
  const rotated = step(load(doc));
  const secretChange = rotated.plan(await rotated.check('etcd-1', patienceOf(false)), 'etcd-1');
  t.deepEqual(
    secretChange.map((c) => c.summary),
    ['update user-data (only secret content changed; redacted)'],
  );
  t.is(secretChange[0]!.diff, undefined);
  const record = readFileSync(join(stateDir, 'rendered', 'etcd-1.json'), 'utf8');
  t.false(record.includes('first'), 'the record holds no secret');
});
