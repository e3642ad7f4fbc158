import test from 'ava';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { GUEST_PATHS, parseEnvironmentFile } from '../../tasks/render/etcd.ts';
import { run } from '../helpers/exec.ts';
import { baseDocument, load } from '../helpers/inventory.ts';
import { Processes } from '../helpers/processes.ts';
import { fileOf, renderWithPki, writeFilesOf } from '../helpers/render.ts';

/**
 * Debian's etcd 3.4 forms a real 3-member cluster from the rendered configuration and the generated
 * certificates, on 127.0.0.1-3. Only file locations are moved from guest paths into a temporary
 * directory; every other ETCD_* variable is used exactly as rendered.
 */

const CLIENT_PORT = 42379;
const PEER_PORT = 42380;
const IPS = ['127.0.0.1', '127.0.0.2', '127.0.0.3'];

function loopbackInventory(clientCertAuth: boolean) {
  const doc = baseDocument();
  doc.etcd = { client_port: CLIENT_PORT, peer_port: PEER_PORT, listen_localhost: false, client_cert_auth: clientCertAuth };
  doc.members.forEach((member, i) => {
    member.libvirt_networks = [{ network_name: 'net', ip: IPS[i], prefix_length: 8 }];
  });
  return load(doc);
}

const processes = new Processes();
test.after.always(() => processes.stopAll());

test('a 3-member etcd cluster starts from the rendered config over TLS, and refuses clients without a certificate', async (t) => {
  const { inventory, rendered } = await renderWithPki(loopbackInventory(true));
  const work = mkdtempSync(join(tmpdir(), 'etcd-kvm-etcd-'));

  for (const member of inventory.members) {
    const files = writeFilesOf(fileOf(rendered.get(member.name), 'user-data').content);
    const dir = join(work, member.name);
    mkdirSync(join(dir, 'data'), { recursive: true, mode: 0o700 });
    const local = (guestPath: string) => {
      const path = join(dir, guestPath.split('/').pop()!);
      writeFileSync(path, files.get(guestPath)!.content, { mode: 0o600 });
      return path;
    };
    const env = parseEnvironmentFile(files.get(GUEST_PATHS.environmentFile)!.content);
    env.set('ETCD_DATA_DIR', join(dir, 'data'));
    for (const [key, guestPath] of [
      ['ETCD_CERT_FILE', GUEST_PATHS.serverCert],
      ['ETCD_PEER_CERT_FILE', GUEST_PATHS.serverCert],
      ['ETCD_KEY_FILE', GUEST_PATHS.serverKey],
      ['ETCD_PEER_KEY_FILE', GUEST_PATHS.serverKey],
      ['ETCD_TRUSTED_CA_FILE', GUEST_PATHS.caCert],
      ['ETCD_PEER_TRUSTED_CA_FILE', GUEST_PATHS.caCert],
    ] as const) {
      t.is(env.get(key), guestPath, `${key} points at the guest path`);
      env.set(key, local(guestPath));
    }
    t.is(env.get('ETCD_CLIENT_CERT_AUTH'), 'true');
    t.is(env.get('ETCD_PEER_CLIENT_CERT_AUTH'), 'true');
    t.is(env.get('ETCD_INITIAL_CLUSTER_STATE'), 'new');
    processes.start('etcd', [], { env: { PATH: process.env.PATH, ...Object.fromEntries(env) }, logFile: join(dir, 'etcd.log') });
  }

  const pki = join(inventory.stateDir, 'pki');
  const endpoints = IPS.map((ip) => `https://${ip}:${CLIENT_PORT}`).join(',');
  const tls = ['--cacert', join(pki, 'ca.crt'), '--cert', join(pki, 'clients/root.crt'), '--key', join(pki, 'clients/root.key')];
  const etcdctl = (args: string[], extraTls = tls) => run('etcdctl', ['--endpoints', endpoints, '--dial-timeout', '3s', ...extraTls, ...args], { env: { ...process.env, ETCDCTL_API: '3' } });

  // Three fresh members on loopback elect a leader in a few seconds; 60 s leaves room for a loaded CI machine.
  let health = etcdctl(['endpoint', 'health', '--cluster']);
  for (let waited = 0; health.status !== 0 && waited < 60; waited++) {
    await sleep(1000);
    health = etcdctl(['endpoint', 'health', '--cluster']);
  }
  if (health.status !== 0) t.log(readFileSync(join(work, 'etcd-1', 'etcd.log'), 'utf8').slice(-3000));
  t.is(health.status, 0, health.stderr);
  // etcdctl 3.4 prints health lines on stderr.
  const healthLines = `${health.stdout}${health.stderr}`;
  t.is(healthLines.match(/is healthy/g)?.length, 3, healthLines);

  const members = etcdctl(['member', 'list', '-w', 'json']);
  const list = JSON.parse(members.stdout) as { members: { name: string; peerURLs: string[]; clientURLs: string[] }[] };
  t.deepEqual(list.members.map((m) => m.name).sort(), ['etcd-1', 'etcd-2', 'etcd-3']);
  for (const member of list.members) {
    t.true(member.peerURLs.every((url) => url.startsWith('https://')));
    t.true(member.clientURLs.every((url) => url.startsWith('https://')));
  }

  t.is(etcdctl(['put', 'greeting', 'hello']).status, 0);
  const got = run('etcdctl', ['--endpoints', `https://${IPS[2]}:${CLIENT_PORT}`, ...tls, 'get', 'greeting', '--print-value-only'], { env: { ...process.env, ETCDCTL_API: '3' } });
  t.is(got.stdout.trim(), 'hello');

  // client-cert-auth: a client that presents no certificate is refused at the TLS handshake.
  const anonymous = etcdctl(['get', 'greeting'], ['--cacert', join(pki, 'ca.crt')]);
  t.not(anonymous.status, 0);
  t.regex(anonymous.stderr, /bad certificate|certificate required|context deadline exceeded/);

  // A certificate from another CA is refused too.
  const stranger = join(work, 'stranger');
  mkdirSync(stranger);
  const made = run('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=root', '-days', '1', '-keyout', join(stranger, 'root.key'), '-out', join(stranger, 'root.crt')]);
  t.is(made.status, 0, made.stderr);
  const foreign = etcdctl(['get', 'greeting'], ['--cacert', join(pki, 'ca.crt'), '--cert', join(stranger, 'root.crt'), '--key', join(stranger, 'root.key')]);
  t.not(foreign.status, 0);
  t.false(foreign.stdout.includes('hello'));
});
