import test from 'ava';
import { chmodSync, existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { lookUpHost, parseJumpHop, parseSshConfig } from '../../tasks/inventory/ssh-config.ts';
import { baseDocument, load, problemsOf } from '../helpers/inventory.ts';

/** ssh_config: what it says about a host, and the inventory's values winning over it. */

const CONFIG = `
Host lab-hv
  HostName 192.168.160.1
  Port 2200
  User ops
  IdentityFile ~/.ssh/lab_key
  UserKnownHostsFile /etc/lab/known_hosts /etc/other
  ProxyJump jumper@edge:2223,inner
Host edge
  HostName 127.0.0.1
  IdentityFile keys/edge_key
Host *
  User fallback
  Match exec "touch /tmp/etcd-kvm-must-not-exist"
`;

test('a Host entry: HostName, Port, User, the first IdentityFile and known_hosts file, ProxyJump hops; relative paths from the home directory; no Match exec is run', (t) => {
  const config = parseSshConfig(CONFIG);
  t.deepEqual(lookUpHost(config, 'lab-hv'), {
    hostName: '192.168.160.1',
    port: 2200,
    user: 'ops',
    identityFile: join(homedir(), '.ssh/lab_key'),
    knownHosts: '/etc/lab/known_hosts',
    proxyJump: ['jumper@edge:2223', 'inner'],
  });
  t.deepEqual(lookUpHost(config, 'edge'), { hostName: '127.0.0.1', user: 'fallback', identityFile: join(homedir(), 'keys/edge_key') });
  t.deepEqual(lookUpHost(config, 'elsewhere'), { user: 'fallback' });
  t.deepEqual(parseJumpHop('jumper@edge:2223'), { user: 'jumper', host: 'edge', port: 2223 });
  t.deepEqual(parseJumpHop('[fd00::1]:22'), { host: 'fd00::1', port: 22 });
  t.deepEqual(parseJumpHop('inner'), { host: 'inner' });
});

const withConfig = (hypervisor: Record<string, unknown>, extra: Record<string, unknown> = {}) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-sshcfg-'));
  writeFileSync(join(dir, 'ssh_config'), CONFIG);
  const doc = baseDocument();
  doc.ssh_config = join(dir, 'ssh_config');
  doc.hypervisors = { hv: hypervisor };
  Object.assign(doc, extra);
  return load(doc).hypervisors[0]!;
};

test('precedence: the inventory wins, then the ssh_config entry of the address, then the defaults', (t) => {
  const fromConfig = withConfig({ address: 'lab-hv' });
  t.deepEqual(
    [fromConfig.address, fromConfig.port, fromConfig.user, fromConfig.privateKey, fromConfig.knownHosts],
    ['192.168.160.1', 2200, 'ops', join(homedir(), '.ssh/lab_key'), '/etc/lab/known_hosts'],
  );
  // ProxyJump becomes the jump chain, each hop looked up in the same file.
  t.deepEqual(
    fromConfig.jump.map((hop) => `${hop.name}: ${hop.user}@${hop.address}:${hop.port} ${hop.privateKey || '(agent)'}`),
    [`edge: jumper@127.0.0.1:2223 ${join(homedir(), 'keys/edge_key')}`, 'inner: fallback@inner:22 (agent)'],
  );

  const inventoryWins = withConfig(
    { address: 'lab-hv', port: 22, user: 'root', private_key: '', known_hosts: 'kh', jump: ['b'] },
    { bastions: { b: { address: '10.9.9.9' } } },
  );
  t.deepEqual([inventoryWins.address, inventoryWins.port, inventoryWins.user, inventoryWins.privateKey], ['192.168.160.1', 22, 'root', '']);
  t.true(inventoryWins.knownHosts.endsWith('/kh'), 'relative to the inventory');
  t.deepEqual(
    inventoryWins.jump.map((hop) => hop.address),
    ['10.9.9.9'],
  );

  const unmatched = withConfig({ address: '10.1.2.3' });
  t.deepEqual(
    [unmatched.address, unmatched.port, unmatched.user, unmatched.privateKey, unmatched.jump.length],
    ['10.1.2.3', 22, 'fallback', '', 0],
  );
});

test('ssh_config: false reads nothing; a path that cannot be read is bad input', (t) => {
  const doc = baseDocument();
  doc.ssh_config = false;
  doc.hypervisors = { hv: { address: 'lab-hv' } };
  const [hypervisor] = load(doc).hypervisors;
  t.deepEqual([hypervisor!.address, hypervisor!.port, hypervisor!.user], ['lab-hv', 22, 'root']);
  doc.ssh_config = '/nonexistent/ssh_config';
  t.deepEqual(problemsOf(doc), [
    'ssh_config: cannot read /nonexistent/ssh_config — give the path of an ssh_config file, or false not to read one',
  ]);
});

test('canonicalization runs no nslookup: reading an inventory spawns nothing, the host is looked up by the name given', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-canon-'));
  const marker = join(dir, 'nslookup-ran');
  // An nslookup that answers every name, first on PATH: the library would take lab-hv.a.example.
  writeFileSync(join(dir, 'nslookup'), `#!/bin/sh\necho "$@" >> ${marker}\nexit 0\n`);
  chmodSync(join(dir, 'nslookup'), 0o755);
  const config = [
    'Host lab-hv',
    '  CanonicalizeHostName yes',
    '  CanonicalDomains a.example b.example',
    '  User canon',
    'Host lab-hv.a.example',
    '  HostName 10.0.0.99',
    '',
  ].join('\n');
  writeFileSync(join(dir, 'ssh_config'), config);
  const doc = baseDocument();
  doc.ssh_config = join(dir, 'ssh_config');
  doc.hypervisors = { hv: { address: 'lab-hv' } };
  const path = process.env.PATH;
  process.env.PATH = `${dir}:${path ?? ''}`;
  try {
    const [hypervisor] = load(doc).hypervisors;
    t.deepEqual([hypervisor!.address, hypervisor!.user], ['lab-hv', 'canon']);
    t.deepEqual(lookUpHost(parseSshConfig(config), 'lab-hv'), { user: 'canon' });
  } finally {
    process.env.PATH = path;
  }
  t.false(existsSync(marker), 'nslookup was run');
});
