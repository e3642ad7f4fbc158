import test from 'ava';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { X509Certificate } from 'node:crypto';
import { Runner } from '../../tasks/core/runner.ts';
import { PkiStore } from '../../tasks/pki/store.ts';
import { pkiStep } from '../../tasks/steps/pki.ts';
import { baseDocument, load, type Doc } from '../helpers/inventory.ts';
import { run } from '../helpers/exec.ts';
import { fileOf, renderWithPki, writeFilesOf } from '../helpers/render.ts';

function inventoryIn(stateDir: string, change: (doc: Doc) => void = () => {}) {
  const doc = baseDocument();
  (doc.cluster as Record<string, unknown>).state_dir = stateDir;
  (doc.defaults as Record<string, unknown>).domain = 'etcd.example';
  doc.pki = { extra_domains: ['etcd.service.internal'] };
  change(doc);
  return load(doc);
}

async function applyPki(stateDir: string, change?: (doc: Doc) => void) {
  const inventory = inventoryIn(stateDir, change);
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  const [result] = await runner.runStep(pkiStep({ inventory, store: new PkiStore(stateDir) }));
  return result!;
}

function snapshot(dir: string): Map<string, string> {
  const files = new Map<string, string>();
  const walk = (sub: string) => {
    for (const entry of readdirSync(join(dir, sub), { withFileTypes: true })) {
      const path = join(sub, entry.name);
      if (entry.isDirectory()) walk(path);
      else files.set(path, readFileSync(join(dir, path), 'utf8'));
    }
  };
  walk('');
  return files;
}

const x509Text = (path: string) => run('openssl', ['x509', '-in', path, '-noout', '-text']).stdout;

test('issued certificates verify with OpenSSL and carry the specified names and usages', async (t) => {
  const stateDir = mkdtempSync(join(tmpdir(), 'etcd-kvm-pki-'));
  const started = performance.now();
  const result = await applyPki(stateDir);
  t.log(`CA + 3 members + root client + SSH key: ${Math.round(performance.now() - started)} ms`);
  t.is(result.status, 'changed', result.error);

  const pki = join(stateDir, 'pki');
  const ca = x509Text(join(pki, 'ca.crt'));
  t.regex(ca, /Basic Constraints: critical\s+CA:TRUE/);
  t.regex(ca, /Key Usage: critical\s+Certificate Sign, CRL Sign/);

  for (const name of ['etcd-1', 'etcd-2', 'etcd-3']) {
    const cert = join(pki, 'members', `${name}.crt`);
    const verified = run('openssl', ['verify', '-CAfile', join(pki, 'ca.crt'), cert]);
    t.is(verified.status, 0, verified.stderr);
    const text = x509Text(cert);
    const ip = `10.10.0.1${name.slice(-1)}`;
    for (const san of [
      `DNS:${name}`,
      `DNS:${name}.etcd.example`,
      'DNS:etcd.service.internal',
      'DNS:localhost',
      `IP Address:${ip}`,
      'IP Address:127.0.0.1',
    ]) {
      t.true(text.includes(san), `${name} lacks ${san}`);
    }
    t.regex(text, /Extended Key Usage:\s+TLS Web Server Authentication, TLS Web Client Authentication/);
    t.regex(text, /Key Usage: critical\s+Digital Signature, Key Encipherment/);
    t.regex(text, /Basic Constraints: critical\s+CA:FALSE/);
    t.regex(text, new RegExp(`Subject: CN ?= ?${name}`));
  }

  const root = join(pki, 'clients', 'root.crt');
  t.is(run('openssl', ['verify', '-CAfile', join(pki, 'ca.crt'), root]).status, 0);
  const rootText = x509Text(root);
  t.regex(rootText, /Subject: CN ?= ?root/);
  t.regex(rootText, /Extended Key Usage:\s+TLS Web Client Authentication\n/);
  t.false(rootText.includes('Subject Alternative Name'));

  // Every key is 0600, every directory 0700.
  for (const [path] of snapshot(stateDir)) {
    if (path.endsWith('.key')) t.is(statSync(join(stateDir, path)).mode & 0o777, 0o600, path);
  }
  for (const dir of ['', 'pki', 'pki/members', 'pki/clients', 'ssh']) t.is(statSync(join(stateDir, dir)).mode & 0o777, 0o700, dir);

  // The tool's SSH key is a real OpenSSH key pair.
  const fingerprint = run('ssh-keygen', ['-l', '-f', join(stateDir, 'ssh', 'admin.key')]);
  t.is(fingerprint.status, 0, fingerprint.stderr);
  t.regex(fingerprint.stdout, /ECDSA/);

  // Each member's host key is one OpenSSH reads, and known_hosts pins it under the member's IP and name.
  const knownHosts = readFileSync(join(stateDir, 'ssh', 'known_hosts'), 'utf8');
  for (const [member, ip] of [
    ['etcd-1', '10.10.0.11'],
    ['etcd-2', '10.10.0.12'],
  ] as const) {
    const hostKey = join(stateDir, 'ssh', 'hosts', `${member}.key`);
    t.is(statSync(hostKey).mode & 0o777, 0o600);
    const derived = run('ssh-keygen', ['-y', '-f', hostKey]);
    t.is(derived.status, 0, derived.stderr);
    const found = run('ssh-keygen', ['-F', ip, '-f', join(stateDir, 'ssh', 'known_hosts')]);
    t.true(found.stdout.includes(derived.stdout.trim()), `${member} pinned under ${ip}`);
    t.regex(knownHosts, new RegExp(`^${ip.replace(/\./g, '\\.')},${member} ecdsa-sha2-nistp256 `, 'm'));
  }
});

test('leaves live pki.validity_period (a year by default), the CAs ca_validity_period (100 years); a leaf within early_renewal_period is issued again', async (t) => {
  const stateDir = mkdtempSync(join(tmpdir(), 'etcd-kvm-pki-'));
  t.is((await applyPki(stateDir, (doc) => ((doc.pki as Record<string, unknown>).intermediate = true))).status, 'changed');
  const pki = join(stateDir, 'pki');
  const hoursLeft = (path: string) => (new Date(new X509Certificate(readFileSync(path)).validTo).getTime() - Date.now()) / 3_600_000;
  for (const ca of ['ca.crt', 'peer-ca.crt', 'intermediate.crt']) t.true(Math.abs(hoursLeft(join(pki, ca)) - 876_000) < 1, ca);
  for (const leaf of ['members/etcd-1.crt', 'clients/root.crt']) t.true(Math.abs(hoursLeft(join(pki, leaf)) - 8_760) < 1, leaf);
  // A year's leaves are outside the 60 days' renewal: a second run keeps them; a renewal period past their end issues them again.
  t.is((await applyPki(stateDir, (doc) => ((doc.pki as Record<string, unknown>).intermediate = true))).status, 'ok');
  const renewed = await applyPki(stateDir, (doc) => {
    Object.assign(doc.pki as Record<string, unknown>, { intermediate: true, validity_period: 20_000, early_renewal_period: 9_000 });
  });
  t.is(renewed.status, 'changed', renewed.error);
  t.regex(JSON.stringify(renewed.changes), /inside the renewal period/);
  t.true(Math.abs(hoursLeft(join(pki, 'members/etcd-1.crt')) - 20_000) < 1);
  t.true(Math.abs(hoursLeft(join(pki, 'ca.crt')) - 876_000) < 1, 'the CA is kept');
});

test('a second run reuses every file byte for byte', async (t) => {
  const stateDir = mkdtempSync(join(tmpdir(), 'etcd-kvm-pki-'));
  await applyPki(stateDir);
  const before = snapshot(stateDir);
  const second = await applyPki(stateDir);
  t.is(second.status, 'ok');
  t.deepEqual(snapshot(stateDir), before);
});

test('changing one member IP re-issues only that member certificate (and re-pins its host key under the new IP)', async (t) => {
  const stateDir = mkdtempSync(join(tmpdir(), 'etcd-kvm-pki-'));
  await applyPki(stateDir);
  const before = snapshot(stateDir);
  const result = await applyPki(stateDir, (doc) => {
    (doc.members[1]!.libvirt_networks as Record<string, unknown>[])[0]!.ip = '10.10.0.42';
  });
  t.is(result.status, 'changed');
  t.deepEqual(
    result.changes.map((c) => c.summary),
    [
      'issue certificate member/etcd-2 (its names or addresses changed)',
      'issue certificate peer/etcd-2 (its names or addresses changed)',
      "write ssh/known_hosts pinning the members' host keys",
    ],
  );
  const after = snapshot(stateDir);
  const changed = [...after.keys()].filter((path) => after.get(path) !== before.get(path)).sort();
  t.deepEqual(changed, [
    'pki/members/etcd-2.crt',
    'pki/members/etcd-2.key',
    'pki/peers/etcd-2.crt',
    'pki/peers/etcd-2.key',
    'ssh/known_hosts',
  ]);
  t.true(x509Text(join(stateDir, 'pki/peers/etcd-2.crt')).includes('IP Address:10.10.0.42'));
  t.regex(after.get('ssh/known_hosts') ?? '', /^10\.10\.0\.42,etcd-2 ecdsa-sha2-nistp256 /m);
  t.true(x509Text(join(stateDir, 'pki/members/etcd-2.crt')).includes('IP Address:10.10.0.42'));
});

test('each application user gets a client certificate (CN = its name, clientAuth); removed from the inventory, its certificate and key are deleted', async (t) => {
  const stateDir = mkdtempSync(join(tmpdir(), 'etcd-kvm-pki-'));
  const withUsers = (doc: Doc) => {
    doc.roles = { app1: { permissions: [{ prefix: '/app1/', access: 'readwrite' }] } };
    doc.users = { alice: { roles: ['app1'] }, bob: { roles: [] } };
  };
  t.is((await applyPki(stateDir, withUsers)).status, 'changed');
  const alice = join(stateDir, 'pki/clients/alice.crt');
  t.is(run('openssl', ['verify', '-CAfile', join(stateDir, 'pki/ca.crt'), alice]).status, 0);
  const text = x509Text(alice);
  t.regex(text, /Subject: .*CN ?= ?alice/);
  t.regex(text, /Extended Key Usage: \s*TLS Web Client Authentication\s*\n/);
  t.is(statSync(join(stateDir, 'pki/clients/alice.key')).mode & 0o777, 0o600);
  t.is((await applyPki(stateDir, withUsers)).status, 'ok');

  const removed = await applyPki(stateDir, (doc) => {
    withUsers(doc);
    doc.users = { alice: { roles: ['app1'] } };
  });
  t.deepEqual(
    removed.changes.map((c) => c.summary),
    ['delete certificate client/bob and its key (no such user in the inventory)'],
  );
  t.deepEqual(readdirSync(join(stateDir, 'pki/clients')).sort(), ['alice.crt', 'alice.key', 'root.crt', 'root.key']);
});

test('pki.intermediate: the CA signs only the intermediate (path length 0), which signs members and clients; leaves carry the chain; the CA key can go offline', async (t) => {
  const stateDir = mkdtempSync(join(tmpdir(), 'etcd-kvm-pki-'));
  const twoTier = (doc: Doc) => {
    doc.pki = { intermediate: true };
    doc.users = { alice: {} };
  };
  const first = await applyPki(stateDir, twoTier);
  t.is(first.status, 'changed', first.error);
  t.true(first.changes.some((c) => c.summary === 'issue the intermediate CA (the CA is new)'));
  const pki = join(stateDir, 'pki');
  t.regex(x509Text(join(pki, 'intermediate.crt')), /CA:TRUE, pathlen:0/);
  for (const leaf of ['members/etcd-1.crt', 'members/etcd-3.crt', 'clients/root.crt', 'clients/alice.crt']) {
    const verified = run('openssl', [
      'verify',
      '-CAfile',
      join(pki, 'ca.crt'),
      '-untrusted',
      join(pki, 'intermediate.crt'),
      join(pki, leaf),
    ]);
    t.is(verified.status, 0, `${leaf}: ${verified.stderr}`);
    t.not(run('openssl', ['verify', '-CAfile', join(pki, 'ca.crt'), join(pki, leaf)]).status, 0, `${leaf} is not signed by the CA itself`);
    // The leaf file carries the intermediate after the leaf: what etcd and etcdctl present.
    t.is(readFileSync(join(pki, leaf), 'utf8').match(/BEGIN CERTIFICATE/g)?.length, 2, leaf);
    t.true(readFileSync(join(pki, leaf), 'utf8').endsWith(readFileSync(join(pki, 'intermediate.crt'), 'utf8')));
  }

  // The CA key offline: the run goes on with the intermediate and says so.
  const caKey = readFileSync(join(pki, 'ca.key'), 'utf8');
  rmSync(join(pki, 'ca.key'));
  const offline = await applyPki(stateDir, twoTier);
  t.is(offline.status, 'ok', offline.error);
  t.regex(offline.warnings?.join('\n') ?? '', /the CA's key is offline .* the intermediate CA signs alone, until \d{4}-/);
  // A new member certificate is still issued, by the intermediate.
  rmSync(join(pki, 'members/etcd-2.crt'));
  t.is((await applyPki(stateDir, twoTier)).status, 'changed');
  t.is(
    run('openssl', ['verify', '-CAfile', join(pki, 'ca.crt'), '-untrusted', join(pki, 'intermediate.crt'), join(pki, 'members/etcd-2.crt')])
      .status,
    0,
  );

  // An intermediate that must be issued again needs the CA's key: refused until it is back, then every leaf follows.
  rmSync(join(pki, 'intermediate.key'));
  const refused = await applyPki(stateDir, twoTier);
  t.is(refused.status, 'failed');
  t.regex(
    refused.error ?? '',
    /the intermediate CA must be issued \(its private key is missing\), and only the CA can sign it, but pki\/ca.key is not in the state directory/,
  );
  writeFileSync(join(pki, 'ca.key'), caKey, { mode: 0o600 });
  const reissued = await applyPki(stateDir, twoTier);
  t.is(reissued.status, 'changed', reissued.error);
  t.true(reissued.changes.some((c) => c.summary === 'issue certificate member/etcd-1 (the intermediate CA is new)'));
  t.is(
    run('openssl', ['verify', '-CAfile', join(pki, 'ca.crt'), '-untrusted', join(pki, 'intermediate.crt'), join(pki, 'clients/alice.crt')])
      .status,
    0,
  );
});

test("pki.intermediate_ca: the operator's intermediate signs members and clients, leaves carry it, members and clients trust the chain's root; a broken one is refused", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-operator-ca-'));
  const openssl = (args: string[]) => t.is(run('openssl', args).status, 0, args.join(' '));
  const file = (name: string) => join(dir, name);
  writeFileSync(file('ca.ext'), 'basicConstraints=critical,CA:TRUE,pathlen:0\nkeyUsage=critical,keyCertSign,cRLSign\n');
  openssl([
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-subj',
    '/CN=operator root',
    '-keyout',
    file('root.key'),
    '-out',
    file('root.crt'),
    '-days',
    '30',
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign',
  ]);
  openssl([
    'req',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-subj',
    '/CN=operator intermediate',
    '-keyout',
    file('int.key'),
    '-out',
    file('int.csr'),
  ]);
  openssl([
    'x509',
    '-req',
    '-in',
    file('int.csr'),
    '-CA',
    file('root.crt'),
    '-CAkey',
    file('root.key'),
    '-CAcreateserial',
    '-out',
    file('int.crt'),
    '-days',
    '30',
    '-extfile',
    file('ca.ext'),
  ]);
  const stateDir = mkdtempSync(join(tmpdir(), 'etcd-kvm-pki-'));
  const given =
    (chain: string, key = file('int.key')) =>
    (doc: Doc) => {
      doc.pki = { intermediate_ca: { certificate: file('int.crt'), key, chain } };
      // Operator CAs here live 30 days: inside the default renewal period, so renew only near the end.
      (doc.pki as Record<string, unknown>).early_renewal_period = 24;
    };
  const result = await applyPki(stateDir, given(file('root.crt')));
  t.is(result.status, 'changed', result.error);
  t.false(
    result.changes.some((c) => /create cluster CA|intermediate/.test(c.summary)),
    'no CA of its own',
  );
  const pki = join(stateDir, 'pki');
  for (const leaf of ['members/etcd-1.crt', 'clients/root.crt']) {
    const verified = run('openssl', ['verify', '-CAfile', file('root.crt'), '-untrusted', file('int.crt'), join(pki, leaf)]);
    t.is(verified.status, 0, verified.stderr);
    t.true(readFileSync(join(pki, leaf), 'utf8').endsWith(readFileSync(file('int.crt'), 'utf8')), `${leaf} carries the intermediate`);
  }
  // What members and clients trust is the chain's root.
  const { rendered } = await renderWithPki(inventoryIn(stateDir, given(file('root.crt'))));
  t.is(
    writeFilesOf(fileOf(rendered.get('etcd-1'), 'user-data').content).get('/etc/etcd/tls/ca.crt')?.content,
    readFileSync(file('root.crt'), 'utf8'),
  );
  t.is((await applyPki(stateDir, given(file('root.crt')))).status, 'ok');

  const wrongKey = await applyPki(stateDir, given(file('root.crt'), file('root.key')));
  t.is(wrongKey.status, 'failed');
  t.regex(wrongKey.error ?? '', /pki.intermediate_ca.key does not belong to pki.intermediate_ca.certificate/);
  const notTheRoot = await applyPki(stateDir, given(file('int.crt')));
  t.is(notTheRoot.status, 'failed');
  t.regex(notTheRoot.error ?? '', /chain must end with the self-signed root CA/);
});

test('a missing CA with surviving leaves is refused, never replaced silently', async (t) => {
  const stateDir = mkdtempSync(join(tmpdir(), 'etcd-kvm-pki-'));
  await applyPki(stateDir);
  run('rm', [join(stateDir, 'pki', 'ca.crt'), join(stateDir, 'pki', 'ca.key')]);
  const result = await applyPki(stateDir);
  t.is(result.status, 'failed');
  t.regex(result.error!, /refusing to continue: the CA is missing from the state directory but certificates it signed exist/);
  t.throws(() => statSync(join(stateDir, 'pki', 'ca.crt')));
});

test('a stored CA key that does not belong to the stored CA certificate is refused (two runs at once used to cause it)', async (t) => {
  const stateDir = mkdtempSync(join(tmpdir(), 'etcd-kvm-pki-'));
  await applyPki(stateDir);
  const other = join(stateDir, 'other.key');
  t.is(run('openssl', ['genrsa', '-out', other, '2048']).status, 0);
  run('cp', [other, join(stateDir, 'pki', 'ca.key')]);
  const result = await applyPki(stateDir);
  t.is(result.status, 'failed');
  t.regex(result.error!, /refusing to continue: pki\/ca.key does not belong to pki\/ca.crt/);
});

test('an operator-supplied CA signs the member certificates', async (t) => {
  const own = mkdtempSync(join(tmpdir(), 'etcd-kvm-ownca-'));
  const made = run('openssl', [
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-subj',
    '/CN=operator CA',
    '-days',
    '30',
    '-keyout',
    join(own, 'ca.key'),
    '-out',
    join(own, 'ca.crt'),
  ]);
  t.is(made.status, 0, made.stderr);
  const stateDir = mkdtempSync(join(tmpdir(), 'etcd-kvm-pki-'));
  const result = await applyPki(stateDir, (doc) => {
    doc.pki = { ca: { certificate: join(own, 'ca.crt'), key: join(own, 'ca.key') } };
  });
  t.is(result.status, 'changed', result.error);
  t.false(result.changes.some((c) => c.summary.includes('create cluster CA')));
  t.is(run('openssl', ['verify', '-CAfile', join(own, 'ca.crt'), join(stateDir, 'pki/members/etcd-1.crt')]).status, 0);
  t.throws(() => statSync(join(stateDir, 'pki', 'ca.key')), undefined, 'the operator CA key is not copied into the state directory');
});

test('an operator CA whose key does not match its certificate is refused', async (t) => {
  const own = mkdtempSync(join(tmpdir(), 'etcd-kvm-ownca-'));
  t.is(
    run('openssl', [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-subj',
      '/CN=operator CA',
      '-days',
      '30',
      '-keyout',
      join(own, 'ca.key'),
      '-out',
      join(own, 'ca.crt'),
    ]).status,
    0,
  );
  t.is(run('openssl', ['genrsa', '-out', join(own, 'other.key'), '2048']).status, 0);
  const stateDir = mkdtempSync(join(tmpdir(), 'etcd-kvm-pki-'));
  const result = await applyPki(stateDir, (doc) => {
    doc.pki = { ca: { certificate: join(own, 'ca.crt'), key: join(own, 'other.key') } };
  });
  t.is(result.status, 'failed');
  t.is(result.error, "refusing to continue: pki.ca.key does not belong to pki.ca.certificate; give the CA's own key");
  t.throws(() => statSync(join(stateDir, 'pki')));
});
