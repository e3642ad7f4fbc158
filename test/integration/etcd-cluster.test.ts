import test, { type ExecutionContext } from 'ava';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { parse, stringify } from 'yaml';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Runner } from '../../tasks/core/runner.ts';
import { EtcdClients } from '../../tasks/etcd/client.ts';
import { waitForHealth } from '../../tasks/etcd/health.ts';
import { clientIdentities } from '../../tasks/etcd/identities.ts';
import { PkiStore } from '../../tasks/pki/store.ts';
import { HypervisorConnections } from '../../tasks/remote/hypervisors.ts';
import { authStep } from '../../tasks/steps/auth.ts';
import { usersStep } from '../../tasks/steps/users.ts';
import { Secret } from '../../tasks/core/secret.ts';
import type { Inventory } from '../../tasks/inventory/model.ts';
import { silenceKnownWarnings } from '../../tasks/core/warnings.ts';
import { run } from '../helpers/exec.ts';
import { baseDocument, load } from '../helpers/inventory.ts';
import { Processes } from '../helpers/processes.ts';
import { renderWithPki } from '../helpers/render.ts';
import { versionOf } from '../../tasks/etcd/version.ts';
import { CANARY_KEY, gatherVerifyFacts } from '../../tasks/verify/facts.ts';
import { verifyChecks } from '../../tasks/verify/verdict.ts';
import { clearMismatch, compareMembers, MISMATCH_KEY, recordMismatch, refuseAfterMismatch } from '../../tasks/verify/consistency.ts';
import { FILE_SETTINGS, startRenderedMembers } from '../helpers/loopback-etcd.ts';

/**
 * Debian's etcd 3.4 forms a real 3-member cluster from the rendered configuration and the generated
 * certificates, on 127.0.0.1-3. Only file locations are moved from guest paths into a temporary
 * directory; every other ETCD_* variable is used exactly as rendered.
 */

const IPS = ['127.0.0.1', '127.0.0.2', '127.0.0.3'];

// As the CLIs do: etcd3's authenticator names the member by IP in password mode (see core/warnings.ts).
silenceKnownWarnings();

function loopbackInventory(clientCertAuth: boolean, clientPort: number) {
  const doc = baseDocument();
  // Reached directly: the hypervisor is never asked, and its address must not be a member's.
  doc.hypervisors = { hv: { address: '127.0.0.254' } };
  doc.etcd = {
    client_port: clientPort,
    peer_port: clientPort + 1,
    listen_localhost: false,
    client_cert_auth: clientCertAuth,
    grpc_gateway_enabled: !clientCertAuth,
  };
  doc.members.forEach((member, i) => {
    member.libvirt_networks = [{ network_name: 'net', ip: IPS[i], prefix_length: 8 }];
    // The tool reaches loopback members directly, without a hypervisor.
    member.reach_via = 'direct';
  });
  // Each test's cluster on loopback has ports of its own, the metrics listener's too.
  doc.monitoring = { metrics_port: clientPort + 2 };
  if (!clientCertAuth) doc.members[0]!.authentication_bootstrap = { bootstrap: true, root_password: 'loopback-root-pw' };
  // An application user: in certificate mode it gets a client certificate from the cluster CA.
  else doc.users = { alice: { roles: [] } };
  return load(doc);
}

/** The inventory's file, its state directory set to the one its PKI was made in (renderWithPki's), for the CLIs. */
function inventoryFileWithState(inventory: Inventory): string {
  const doc = parse(readFileSync(inventory.path, 'utf8')) as { cluster: Record<string, unknown> };
  doc.cluster.state_dir = inventory.stateDir;
  const path = join(inventory.stateDir, 'inventory.yaml');
  writeFileSync(path, stringify(doc));
  return path;
}

const processes = new Processes();
test.after.always(() => processes.stopAll());

/** Starts one etcd per member from its rendered user-data; only file locations move out of guest paths. */
async function startCluster(t: ExecutionContext, clientCertAuth: boolean, clientPort: number) {
  const { inventory, rendered } = await renderWithPki(loopbackInventory(clientCertAuth, clientPort));
  const { work, members } = startRenderedMembers(inventory, rendered, processes);
  for (const { rendered: env } of members.values()) {
    for (const [key, guestPath] of FILE_SETTINGS(clientCertAuth)) t.is(env.get(key), guestPath, `${key} points at the guest path`);
    t.is(env.get('ETCD_CLIENT_CERT_AUTH'), String(clientCertAuth));
    t.is(env.get('ETCD_PEER_CLIENT_CERT_AUTH'), 'true');
    t.is(env.get('ETCD_INITIAL_CLUSTER_STATE'), 'new');
  }
  return { inventory, work, peerAllowedCn: members.get('etcd-1')!.rendered.get('ETCD_PEER_CERT_ALLOWED_CN') };
}

test('a 3-member etcd cluster starts from the rendered config over TLS, and refuses clients without a certificate', async (t) => {
  const CLIENT_PORT = 22379;
  const { inventory, work, peerAllowedCn } = await startCluster(t, true, CLIENT_PORT);

  const pki = join(inventory.stateDir, 'pki');
  const endpoints = IPS.map((ip) => `https://${ip}:${CLIENT_PORT}`).join(',');
  const tls = ['--cacert', join(pki, 'ca.crt'), '--cert', join(pki, 'clients/root.crt'), '--key', join(pki, 'clients/root.key')];
  const etcdctl = (args: string[], extraTls = tls) =>
    run('etcdctl', ['--endpoints', endpoints, '--dial-timeout', '3s', ...extraTls, ...args], { env: { ...process.env, ETCDCTL_API: '3' } });

  // Three fresh members on loopback elect a leader in a few seconds; 60 s leaves room for a loaded CI machine.
  // Healthy means all three say so: once, an exit-0 health check right after the election had fewer
  // than three healthy lines and failed the count below (output not captured).
  const healthyCount = (result: { stdout: string; stderr: string }) => `${result.stdout}${result.stderr}`.match(/is healthy/g)?.length ?? 0;
  let health = etcdctl(['endpoint', 'health', '--cluster']);
  for (let waited = 0; (health.status !== 0 || healthyCount(health) !== 3) && waited < 60; waited++) {
    await sleep(1000);
    health = etcdctl(['endpoint', 'health', '--cluster']);
  }
  if (health.status !== 0) t.log(readFileSync(join(work, 'etcd-1', 'etcd.log'), 'utf8').slice(-3000));
  t.is(health.status, 0, health.stderr);
  // etcdctl 3.4 prints health lines on stderr.
  const healthLines = `${health.stdout}${health.stderr}`;
  t.is(healthLines.match(/is healthy/g)?.length, 3, healthLines);

  // The metrics listener the rendered environment opens: plain HTTP, no certificate, etcd's own series.
  for (const ip of IPS) {
    const metrics = run('curl', ['--silent', '--fail', '--max-time', '10', `http://${ip}:${CLIENT_PORT + 2}/metrics`]);
    t.is(metrics.status, 0, `${ip}: ${metrics.stderr}`);
    t.regex(metrics.stdout, /^etcd_server_has_leader 1$/m, ip);
    t.is(
      run('curl', ['--silent', '--fail', '--max-time', '10', `http://${ip}:${CLIENT_PORT + 2}/v3/kv/range`]).status,
      22,
      'no key-value API there',
    );
  }

  const members = etcdctl(['member', 'list', '-w', 'json']);
  const list = JSON.parse(members.stdout) as { members: { name: string; peerURLs: string[]; clientURLs: string[] }[] };
  t.deepEqual(list.members.map((m) => m.name).sort(), ['etcd-1', 'etcd-2', 'etcd-3']);
  for (const member of list.members) {
    t.true(member.peerURLs.every((url) => url.startsWith('https://')));
    t.true(member.clientURLs.every((url) => url.startsWith('https://')));
  }

  t.is(etcdctl(['put', 'greeting', 'hello']).status, 0);
  const got = run('etcdctl', ['--endpoints', `https://${IPS[2]}:${CLIENT_PORT}`, ...tls, 'get', 'greeting', '--print-value-only'], {
    env: { ...process.env, ETCDCTL_API: '3' },
  });
  t.is(got.stdout.trim(), 'hello');

  // The tool's own etcdctl command: every member's endpoint as the tool reaches it, root's identity from the state
  // directory, for etcdctl's run only.
  const withState = inventoryFileWithState(inventory);
  const toolEtcdctl = (args: string[]) => run(process.execPath, ['--import', 'tsx', 'tasks/commands/etcdctl.ts', '-i', withState, ...args]);
  const read = toolEtcdctl(['--', 'get', 'greeting', '--print-value-only']);
  t.is(read.status, 0, read.stderr);
  t.is(read.stdout.trim(), 'hello');
  const statuses = toolEtcdctl(['--', 'endpoint', 'status', '-w', 'json']);
  t.is(statuses.status, 0, statuses.stderr);
  t.is((JSON.parse(statuses.stdout) as unknown[]).length, 3, 'every member by default');
  t.is((JSON.parse(toolEtcdctl(['--member', 'etcd-2', '--', 'endpoint', 'status', '-w', 'json']).stdout) as unknown[]).length, 1);
  t.is(toolEtcdctl(['--', 'get', 'no-such-key', '--bogus-flag']).status, 1, "etcdctl's own exit");
  t.is(toolEtcdctl([]).status, 2, 'no arguments: bad input');
  t.is(toolEtcdctl(['--member', 'etcd-9', '--', 'get', 'x']).status, 2);

  // /version, as status reads it: the member's own version (the binary's) and the cluster's minor.
  const binary = /etcd Version: (\d+\.\d+\.\d+)/.exec(run('etcd', ['--version']).stdout)![1]!;
  const identities = clientIdentities(inventory, new PkiStore(inventory.stateDir));
  const clients = new EtcdClients(new HypervisorConnections(), CLIENT_PORT, identities.health);
  t.teardown(() => clients.close());
  t.deepEqual(await versionOf(clients, inventory.members[1]!, identities.root()), {
    etcdserver: binary,
    etcdcluster: `${binary.split('.').slice(0, 2).join('.')}.0`,
  });

  // verify, as root (the CLI's session): every check passes, and the HashKV it reports is etcdctl's at that revision.
  const asRoot = new EtcdClients(new HypervisorConnections(), CLIENT_PORT, identities.root);
  t.teardown(() => asRoot.close());
  const verified = await gatherVerifyFacts(inventory, asRoot, identities.root());
  t.deepEqual(
    verifyChecks(verified).filter((check) => !check.ok),
    [],
  );
  const hashed = etcdctl(['endpoint', 'hashkv', '--rev', String(verified.pinnedRevision), '-w', 'json']);
  const hashes = (JSON.parse(hashed.stdout) as { HashKV: { hash: number } }[]).map(({ HashKV }) => HashKV.hash);
  t.deepEqual(
    verified.members.map((member) => (member.hash && 'hash' in member.hash ? member.hash.hash : undefined)),
    hashes,
  );
  t.is(etcdctl(['get', CANARY_KEY, '--print-value-only']).stdout.trim(), '', 'the canary is deleted');

  // The deploy's comparison after its changes: the same HashKV, judged equal; a mismatch recorded refuses a run's
  // first change (its words from etcd), and is gone once cleared.
  const compared = await compareMembers(asRoot, inventory.members, identities.root());
  t.is(compared.kind, 'agree', compared.detail);
  t.regex(compared.detail, /^equal on 3 voting members at revision \d+: etcd-1 (\d+) \(never compacted\), etcd-2 \1 .*, etcd-3 \1 /);
  await t.notThrowsAsync(refuseAfterMismatch(asRoot, inventory.members, identities.root()));
  await recordMismatch(asRoot, inventory.members, identities.root(), { at: '2026-11-28T16:00:00.000Z', detail: 'etcd-3 differs' });
  t.is(JSON.parse(etcdctl(['get', MISMATCH_KEY, '--print-value-only']).stdout).detail, 'etcd-3 differs');
  await t.throwsAsync(refuseAfterMismatch(asRoot, inventory.members, identities.root()), {
    message: /after a run at 2026-11-28T16:00:00.000Z \(etcd-3 differs\)/,
  });
  await clearMismatch(asRoot, inventory.members, identities.root());
  await t.notThrowsAsync(refuseAfterMismatch(asRoot, inventory.members, identities.root()));

  // client-cert-auth: a client that presents no certificate is refused at the TLS handshake.
  const anonymous = etcdctl(['get', 'greeting'], ['--cacert', join(pki, 'ca.crt')]);
  t.not(anonymous.status, 0);
  t.regex(anonymous.stderr, /bad certificate|certificate required|context deadline exceeded/);

  // The peer port admits members only: their peer certificates (the peer CA's, common name etcd-kvm-peer) get
  // etcd's member list; root's client certificate, signed by the cluster CA, fails the TLS handshake.
  t.is(peerAllowedCn, 'etcd-kvm-peer');
  const peerUrl = `https://${IPS[0]}:${CLIENT_PORT + 1}/members`;
  const curlPeer = (cert: string, key: string) =>
    run('curl', [
      '--silent',
      '--show-error',
      '--http1.1',
      '--max-time',
      '10',
      '--cacert',
      join(pki, 'peer-ca.crt'),
      '--cert',
      cert,
      '--key',
      key,
      '-o',
      '/dev/null',
      '-w',
      '%{http_code}',
      peerUrl,
    ]);
  const asMember = curlPeer(join(pki, 'peers/etcd-2.crt'), join(pki, 'peers/etcd-2.key'));
  t.is(asMember.stdout, '200', asMember.stderr);
  for (const client of ['root', 'alice']) {
    const asUser = curlPeer(join(pki, `clients/${client}.crt`), join(pki, `clients/${client}.key`));
    t.is(asUser.stdout, '000', `${client}'s certificate must not pass the peer port's handshake`);
    t.regex(asUser.stderr, /alert|certificate|SSL/i);
  }

  // A certificate from another CA is refused too.
  const stranger = join(work, 'stranger');
  mkdirSync(stranger);
  const made = run('openssl', [
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-subj',
    '/CN=root',
    '-days',
    '1',
    '-keyout',
    join(stranger, 'root.key'),
    '-out',
    join(stranger, 'root.crt'),
  ]);
  t.is(made.status, 0, made.stderr);
  const foreign = etcdctl(
    ['get', 'greeting'],
    ['--cacert', join(pki, 'ca.crt'), '--cert', join(stranger, 'root.crt'), '--key', join(stranger, 'root.key')],
  );
  t.not(foreign.status, 0);
  t.false(foreign.stdout.includes('hello'));
});

test('password mode: health and the auth bootstrap through the etcd client, root by password, anonymous refused, REST gateway answers', async (t) => {
  const CLIENT_PORT = 23379;
  const { inventory } = await startCluster(t, false, CLIENT_PORT);
  const store = new PkiStore(inventory.stateDir);
  const identities = clientIdentities(inventory, store);
  const clients = new EtcdClients(new HypervisorConnections(), CLIENT_PORT, identities.health);
  try {
    for (const member of inventory.members) await waitForHealth(inventory, clients, member, 60_000);
    // Password mode: /version needs no client certificate.
    t.regex((await versionOf(clients, inventory.members[2]!, identities.health())).etcdserver, /^\d+\.\d+\.\d+$/);
    const runner = new Runner({ dryRun: false, renderer: 'silent' });
    const [first] = await runner.runStep(authStep({ inventory, members: inventory.members, clients, identities }));
    t.is(first?.status, 'changed', first?.error);
    t.deepEqual(
      first?.changes.map((change) => change.summary),
      [
        'create role root',
        'create user root (password from the inventory, sent over TLS only)',
        'grant role root to user root',
        'enable authentication',
      ],
    );
    const [second] = await runner.runStep(authStep({ inventory, members: inventory.members, clients, identities }));
    t.is(second?.status, 'ok', second?.error);
  } finally {
    clients.close();
  }

  const ca = join(inventory.stateDir, 'pki', 'ca.crt');
  const etcdctl = (args: string[]) =>
    run('etcdctl', ['--endpoints', `https://${IPS[1]}:${CLIENT_PORT}`, '--dial-timeout', '3s', '--cacert', ca, ...args], {
      env: { ...process.env, ETCDCTL_API: '3' },
    });
  t.is(etcdctl(['--user', 'root:loopback-root-pw', 'put', 'greeting', 'hello']).status, 0);
  t.is(etcdctl(['--user', 'root:loopback-root-pw', 'get', 'greeting', '--print-value-only']).stdout.trim(), 'hello');
  const anonymous = etcdctl(['get', 'greeting']);
  t.not(anonymous.status, 0);
  t.regex(anonymous.stderr, /user name is empty/);
  t.not(etcdctl(['--user', 'root:wrong', 'get', 'greeting']).status, 0);
  // The tool's etcdctl command in password mode: root's password in etcdctl's environment, never on its command line.
  const viaTool = run(process.execPath, [
    '--import',
    'tsx',
    'tasks/commands/etcdctl.ts',
    '-i',
    inventoryFileWithState(inventory),
    '--',
    'get',
    'greeting',
    '--print-value-only',
  ]);
  t.is(viaTool.status, 0, viaTool.stderr);
  t.is(viaTool.stdout.trim(), 'hello');
  // The auth step takes auth on for the whole bootstrap done (steps/auth.ts AUTH_ON): etcd keeps user root and role root together while auth is on.
  for (const args of [
    ['user', 'revoke-role', 'root', 'root'],
    ['user', 'delete', 'root'],
    ['role', 'delete', 'root'],
  ])
    t.regex(etcdctl(['--user', 'root:loopback-root-pw', ...args]).stderr, /invalid auth management/, args.join(' '));

  // The grpc-gateway (REST, JSON with base64 keys) in password mode: authenticate, then read.
  const base = `https://${IPS[2]}:${CLIENT_PORT}`;
  const curl = (path: string, body: unknown, headers: string[] = []) =>
    run('curl', [
      '--silent',
      '--show-error',
      '--cacert',
      ca,
      ...headers.flatMap((h) => ['-H', h]),
      '-X',
      'POST',
      '-d',
      JSON.stringify(body),
      `${base}${path}`,
    ]);
  const auth = JSON.parse(curl('/v3/auth/authenticate', { name: 'root', password: 'loopback-root-pw' }).stdout) as { token?: string };
  t.truthy(auth.token);
  const range = JSON.parse(
    curl('/v3/kv/range', { key: Buffer.from('greeting').toString('base64') }, [`Authorization: ${auth.token}`]).stdout,
  ) as { kvs?: { value: string }[] };
  t.is(Buffer.from(range.kvs?.[0]?.value ?? '', 'base64').toString(), 'hello');
  const refused = curl('/v3/kv/range', { key: Buffer.from('greeting').toString('base64') });
  t.regex(refused.stdout, /user name is empty/);
});

test('password mode: application roles and users converge to the inventory; a user made by hand is left alone', async (t) => {
  const CLIENT_PORT = 24379;
  const { inventory } = await startCluster(t, false, CLIENT_PORT);
  const identities = clientIdentities(inventory, new PkiStore(inventory.stateDir));
  const clients = new EtcdClients(new HypervisorConnections(), CLIENT_PORT, identities.health);
  const ca = join(inventory.stateDir, 'pki', 'ca.crt');
  const etcdctl = (user: string, args: string[]) =>
    run('etcdctl', ['--endpoints', `https://${IPS[0]}:${CLIENT_PORT}`, '--dial-timeout', '3s', '--cacert', ca, '--user', user, ...args], {
      env: { ...process.env, ETCDCTL_API: '3' },
    });
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  const converge = async (roles: Inventory['roles'], users: Inventory['users']) => {
    const [result] = await runner.runStep(
      usersStep({ inventory: { ...inventory, roles, users }, members: inventory.members, clients, identities }),
    );
    t.not(result?.status, 'failed', result?.error);
    return result!;
  };
  const app1 = (access: 'read' | 'readwrite') => ({ app1: { permissions: [{ prefix: '/app1/', access }] } });
  try {
    for (const member of inventory.members) await waitForHealth(inventory, clients, member, 60_000);
    t.is((await runner.runStep(authStep({ inventory, members: inventory.members, clients, identities })))[0]?.status, 'changed');
    t.is(etcdctl('root:loopback-root-pw', ['user', 'add', 'handmade:handmade-pw']).status, 0);

    const created = await converge(app1('readwrite'), { alice: { roles: ['app1'], password: new Secret('alice-pw-1') } });
    t.is(created.status, 'changed');
    t.false(JSON.stringify(created).includes('alice-pw-1'));
    t.is(etcdctl('alice:alice-pw-1', ['put', '/app1/x', 'one']).status, 0);
    t.is(etcdctl('alice:alice-pw-1', ['get', '/app1/x', '--print-value-only']).stdout.trim(), 'one');
    t.regex(etcdctl('alice:alice-pw-1', ['put', '/app2/x', 'two']).stderr, /permission denied/);
    t.regex(etcdctl('alice:alice-pw-1', ['user', 'list']).stderr, /permission denied/);
    t.is((await converge(app1('readwrite'), { alice: { roles: ['app1'], password: new Secret('alice-pw-1') } })).status, 'ok');

    // A narrower permission and a new password, in one run.
    const changed = await converge(app1('read'), { alice: { roles: ['app1'], password: new Secret('alice-pw-2') } });
    t.deepEqual(
      changed.changes.map((change) => change.summary),
      ['grant read prefix "/app1/" to role app1', "change the password of user alice (to the inventory's)"],
    );
    t.not(etcdctl('alice:alice-pw-1', ['get', '/app1/x']).status, 0);
    t.is(etcdctl('alice:alice-pw-2', ['get', '/app1/x', '--print-value-only']).stdout.trim(), 'one');
    t.regex(etcdctl('alice:alice-pw-2', ['put', '/app1/x', 'three']).stderr, /permission denied/);

    // Gone from the inventory: gone from etcd; the hand-made user stays, and naming it is refused.
    const removed = await converge({}, {});
    t.deepEqual(
      removed.changes.map((change) => change.summary),
      [
        'delete user alice (no longer in the inventory)',
        'delete role app1 (no longer in the inventory)',
        'forget user alice, role app1 in etcd-kvm/managed-access and the state directory (managed-access.json)',
      ],
    );
    t.deepEqual(etcdctl('root:loopback-root-pw', ['user', 'list']).stdout.trim().split('\n').sort(), ['handmade', 'root']);
    t.deepEqual(etcdctl('root:loopback-root-pw', ['role', 'list']).stdout.trim().split('\n'), ['root']);
    // Nothing named, nothing made: a no-op of both steps adds no entry to etcd's log (user and role
    // reads are raft requests, etcd-io/etcd#18487), so it costs no member a write.
    const raftIndex = async () => (await (await clients.for(inventory.members[0]!, identities.root())).maintenance.status({})).raftIndex;
    const before = await raftIndex();
    t.is((await runner.runStep(authStep({ inventory, members: inventory.members, clients, identities })))[0]?.status, 'ok');
    t.is((await converge({}, {})).status, 'ok');
    t.is(await raftIndex(), before);
    const [refused] = await runner.runStep(
      usersStep({
        inventory: { ...inventory, roles: {}, users: { handmade: { roles: [], password: new Secret('other') } } },
        members: inventory.members,
        clients,
        identities,
      }),
    );
    t.is(refused?.status, 'failed');
    t.regex(refused?.error ?? '', /etcd already has user handmade, which the tool did not create/);
    t.is(etcdctl('handmade:handmade-pw', ['user', 'get', 'handmade']).status, 0, 'its password is unchanged');
  } finally {
    clients.close();
  }
});
