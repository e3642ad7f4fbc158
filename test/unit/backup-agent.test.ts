import test from 'ava';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { backupTimestamp, dumpObjectName, masterKeyFromHex, openDataKey, openStream } from '../../tasks/backup/format.ts';
import { DEFRAG_LOCK_KEY, runLockKey } from '../../tasks/inventory/lock-keys.ts';
import { AGENT_USER } from '../../tasks/inventory/tool-users.ts';
import {
  AGENT_PATHS,
  BACKUP_PACKAGES,
  BACKUP_UNITS,
  DEFRAG_UNITS,
  METRICS_UNITS,
  VERIFY_UNITS,
} from '../../tasks/render/guest/member-agent.ts';
import { MANIFEST_PATH } from '../../tasks/render/guest/textfile.ts';
import { GUEST_PATHS } from '../../tasks/render/etcd.ts';
import { baseDocument, load, problemsOf } from '../helpers/inventory.ts';
import { fileOf, renderWithPki } from '../helpers/render.ts';
import { parse } from 'yaml';

/**
 * The member agent (agent/etcd-kvm-agent.py) writes what the tool's restore reads: its sealing
 * and retention are run here with the machine's python3 and checked against the tool's own format
 * code; its S3 signature against AWS's published example (and, in test/integration/s3-signatures.test.ts, against
 * AWS's own signer for names with a space, '+' and non-ASCII letters). Its rendering and the inventory's rules.
 */

function agent<T>(command: string, argument: unknown): T {
  const done = spawnSync('python3', ['test/helpers/agent-harness.py', command, JSON.stringify(argument)], { encoding: 'utf8' });
  if (done.status !== 0) throw new Error(`agent-harness ${command}: ${done.stderr}`);
  return JSON.parse(done.stdout) as T;
}

async function opened(dump: Buffer, dataKey: Uint8Array): Promise<Buffer> {
  const pieces: Uint8Array[] = [];
  const source = (async function* () {
    yield dump;
  })();
  for await (const piece of openStream(source, dataKey)) pieces.push(piece);
  return Buffer.concat(pieces);
}

test('a snapshot the agent seals is opened by the restore with the master key, chunk by chunk', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-agent-'));
  // Two whole chunks and a short one: the last chunk's length is where layouts disagree.
  const snapshot = randomBytes(2 * 1024 * 1024 + 4321);
  writeFileSync(join(dir, 'snapshot.db'), snapshot);
  const master = 'c4'.repeat(32);
  const sealed = agent<{ key: string; sha256: string }>('seal', {
    source: join(dir, 'snapshot.db'),
    destination: join(dir, 'sealed'),
    master_key: master,
  });
  const dump = readFileSync(join(dir, 'sealed'));
  t.is(dump.length, snapshot.length + 3 * (24 + 16));
  const dataKey = openDataKey(Buffer.from(sealed.key, 'hex'), masterKeyFromHex(master));
  t.deepEqual(await opened(dump, dataKey), snapshot);
  t.throws(() => openDataKey(Buffer.from(sealed.key, 'hex'), masterKeyFromHex('c5'.repeat(32))), { message: /does not decrypt/ });
});

// Which snapshots the agent trusts and prunes: test/unit/backup-trust.test.ts, against the tool's own tables.
test('the agent names snapshots as the tool does', (t) => {
  const when = new Date('2026-11-25T03:04:05.678Z');
  t.is(agent<string>('dump-name', { prefix: 'lab', when: '2026-11-25T03:04:05.678+00:00' }), dumpObjectName('lab', backupTimestamp(when)));
});

test("a backup run whose process start /proc cannot tell: the schedule's elapse nearest to its start, to the second, from systemd's calendar", (t) => {
  const tick = (started: string, schedule: string) => agent<string>('tick', { started, schedule });
  // Three members' runs around one minute's boundary name the same tick (they named two minutes when ticks were minutes).
  for (const started of ['2026-11-25T02:30:59.80+00:00', '2026-11-25T02:31:00.30+00:00', '2026-11-25T02:30:59.95+00:00'])
    t.is(tick(started, '*:*:00'), '2026-11-25T02:31:00Z', started);
  // Finer than a minute: each elapse is a tick of its own; a run less than half a period late still names its own.
  t.is(tick('2026-11-25T02:31:00.40+00:00', '*:*:0/20'), '2026-11-25T02:31:00Z');
  t.is(tick('2026-11-25T02:31:09.00+00:00', '*:*:0/20'), '2026-11-25T02:31:00Z');
  t.is(tick('2026-11-25T02:31:19.70+00:00', '*:*:0/20'), '2026-11-25T02:31:20Z');
  // A daily schedule off the hour, and the shorthands.
  t.is(tick('2026-11-25T02:30:03.10+00:00', '*-*-* 02:30:00'), '2026-11-25T02:30:00Z');
  t.is(tick('2026-11-25T02:29:58.00+00:00', '*-*-* 02:30:00'), '2026-11-25T02:30:00Z');
  t.is(tick('2026-11-25T03:00:01.00+00:00', 'hourly'), '2026-11-25T03:00:00Z');
  // What systemd cannot read: the minute, as before.
  t.is(tick('2026-11-25T03:04:05.678+00:00', 'not a calendar'), '2026-11-25T03:04:00Z');
});

test("a timer's run: its tick is the latest elapse at or before the moment systemd started it, however late the program gets going", (t) => {
  const tick = (fired: string, started: string, schedule = '*:*:00') => agent<string>('tick', { started, schedule, fired });
  // A busy guest's Python started a minute after its timer fired (the lab, 2026-11-28 08:29: named 08:30 before, a second backup).
  t.is(tick('2026-11-28T08:29:00.62Z', '2026-11-28T08:29:59.90+00:00'), '2026-11-28T08:29:00Z');
  // Fired late, once the last run ended (systemd fires the elapse it missed then): still that elapse.
  t.is(tick('2026-11-28T08:33:38.00Z', '2026-11-28T08:33:39.00+00:00'), '2026-11-28T08:33:00Z');
  // Members whose clocks differ by a fraction of a second each fire at the elapse on their own clock.
  for (const fired of ['2026-11-25T02:31:00.001Z', '2026-11-25T02:31:00.450Z', '2026-11-25T02:31:01.900Z'])
    t.is(tick(fired, '2026-11-25T02:31:03.00+00:00'), '2026-11-25T02:31:00Z', fired);
  // A clock a minute ahead fires its 03:00 a minute early, and names 03:00 as the others will: one backup for it.
  t.is(tick('2026-11-25T03:00:00.30Z', '2026-11-25T02:59:00.40+00:00', 'hourly'), '2026-11-25T03:00:00Z');
  // Finer than a minute: the elapse it fired for, not the nearest one to a late start.
  t.is(tick('2026-11-25T02:31:19.80Z', '2026-11-25T02:31:19.95+00:00', '*:*:0/20'), '2026-11-25T02:31:00Z');
  // A daily schedule, fired on time.
  t.is(tick('2026-11-25T02:30:00.20Z', '2026-11-25T02:30:09.00+00:00', '*-*-* 02:30:00'), '2026-11-25T02:30:00Z');
  // A start reckoned a few clock ticks before its elapse (/proc's precision) is still that elapse's.
  t.is(tick('2026-11-25T02:30:59.98Z', '2026-11-25T02:31:05.00+00:00'), '2026-11-25T02:31:00Z');
});

test("the agent reckons its process's start from /proc, not from when its Python got going", (t) => {
  // The harness's start is before its imports and the agent's: a fraction of a second ago, never in the future.
  const ago = agent<number>('forked-at', {});
  t.true(ago >= 0 && ago < 30, `${ago} s`);
  const slow = spawnSync('sh', ['-c', 'sleep 1.5; exec python3 test/helpers/agent-harness.py forked-at "{}"'], { encoding: 'utf8' });
  // exec keeps the shell's process, started 1.5 s before Python: the agent counts from the process's start.
  t.true(Number(slow.stdout) >= 1.4, slow.stdout + slow.stderr);
});

test("the agent signs S3 requests (botocore's signer) as AWS's Signature Version 4 example does", (t) => {
  // "Example: GET Bucket Lifecycle", from AWS's S3 API reference (sig-v4-header-based-auth).
  const { headers } = agent<{ headers: Record<string, string> }>('sign', {
    method: 'GET',
    url: 'https://examplebucket.s3.amazonaws.com/',
    region: 'us-east-1',
    access_key: 'AKIAIOSFODNN7EXAMPLE',
    secret_key: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY',
    payload_hash: 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
    now: '20130524T000000Z',
    query: { lifecycle: '' },
  });
  t.is(
    headers.authorization,
    'AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543',
  );
  // The snapshot's revision travels as object metadata: signed, as S3 requires of every x-amz- header sent.
  const { url, headers: withRevision } = agent<{ url: string; headers: Record<string, string> }>('sign', {
    method: 'PUT',
    base: 'http://192.168.150.1:9000/etcd-backups',
    name: 'lab-2026-11-25T02:48:00Z.dump',
    region: 'us-east-1',
    access_key: 'S3RVER',
    secret_key: 'S3RVER',
    payload_hash: 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
    now: '20261125T024800Z',
    extra: { 'x-amz-meta-revision': '42' },
  });
  t.is(url, 'http://192.168.150.1:9000/etcd-backups/lab-2026-11-25T02%3A48%3A00Z.dump', "the name encoded once, ':' too");
  t.is(withRevision['x-amz-meta-revision'], '42');
  t.regex(withRevision.authorization!, /SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-meta-revision, /);
});

const s3 = { endpoint: 'https://s3.example.org', bucket: 'bkt', object_prefix: 'lab', access_key: 'AK', secret_key: 'SK' };
const withBackup = (backup: Record<string, unknown>, restore: Record<string, unknown> = { s3, encryption_key: 'ab'.repeat(32) }) => {
  const doc = baseDocument();
  return { ...doc, backup, defaults: { ...(doc.defaults as object), restore } };
};

test('every member gets the agent, its timer and its secrets 0400 to etcd; nothing when backups are off', async (t) => {
  const { guests } = await renderWithPki(
    load(withBackup({ enabled: true, schedule: '*:0/15', keep: 5, endpoint: 'http://10.0.0.5:9000' })),
  );
  const files = new Map(guests.get('etcd-2')!.files.map((file) => [file.path, file]));
  for (const path of [AGENT_PATHS.key, AGENT_PATHS.accessKey, AGENT_PATHS.secretKey, AGENT_PATHS.encryptionKey]) {
    t.is(files.get(path)?.mode, 0o400, path);
    t.is(files.get(path)?.owner, 'etcd:etcd', path);
    t.true(files.get(path)?.secret, path);
  }
  t.is(files.get(AGENT_PATHS.accessKey)?.content, 'AK');
  t.regex(files.get(AGENT_PATHS.cert)!.content, /BEGIN CERTIFICATE/);
  t.is(files.get(AGENT_PATHS.program)?.mode, 0o755);
  t.regex(files.get(AGENT_PATHS.timer)!.content, /^OnCalendar=\*:0\/15$/m);
  const config = JSON.parse(files.get(AGENT_PATHS.config)!.content);
  t.like(config, {
    member: 'etcd-2',
    keep: 5,
    etcd: { endpoint: 'https://10.10.0.12:2379', etcdctl: '/usr/bin/etcdctl', cert_file: AGENT_PATHS.cert },
    s3: { endpoint: 'http://10.0.0.5:9000', bucket: 'bkt', object_prefix: 'lab' },
    secrets: { encryption_key: AGENT_PATHS.encryptionKey },
  });
  t.false(JSON.stringify(config).includes('SK'));
  // The cluster every backup's manifest binds: the state directory's ID.
  t.regex(config.cluster_id, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
  t.true(guests.get('etcd-2')!.services.some((service) => service.unit === BACKUP_UNITS.timer));
  // Fenced: bounded memory, nothing writable but its work directory.
  const service = files.get(AGENT_PATHS.service)!.content.split('\n');
  for (const line of ['MemoryMax=256M', 'ProtectSystem=strict', 'StateDirectory=etcd-kvm-agent', 'PrivateTmp=yes', 'NoNewPrivileges=yes'])
    t.true(service.includes(line), line);

  const off = await renderWithPki(load(withBackup({ enabled: false })));
  t.false(off.guests.get('etcd-2')!.files.some((file) => file.path.startsWith('/etc/etcd-kvm/agent')));
  t.false(off.guests.get('etcd-2')!.services.some((service) => service.unit === BACKUP_UNITS.timer));
});

test('a task turned off is retired: its units and files (the S3 secrets with backups, all of the agent with both off), never what is written', async (t) => {
  const render = async (backup: boolean, defrag: boolean, verify = false) => {
    const doc = withBackup(
      { enabled: backup, schedule: '*:0/15', keep: 5, verify: { enabled: verify } },
      { s3, encryption_key: 'ab'.repeat(32) },
    );
    const inventory = load({ ...doc, maintenance: { defrag: { enabled: defrag, schedule: '*:0/10' } } });
    const guest = (await renderWithPki(inventory)).guests.get('etcd-2')!;
    const written = new Set(guest.files.map((file) => file.path));
    t.deepEqual(
      guest.retired.paths.filter((path) => written.has(path)),
      [],
      'a retired path is also written',
    );
    return guest.retired;
  };
  const backupOnly = await render(true, false);
  t.deepEqual(backupOnly.units, [DEFRAG_UNITS.timer, DEFRAG_UNITS.service, VERIFY_UNITS.timer, VERIFY_UNITS.service]);
  // No S3 CA in this inventory: the one an earlier configuration wrote goes too; and etcd's own leftover, a recovery's drop-in.
  t.deepEqual(
    backupOnly.paths.sort(),
    [
      AGENT_PATHS.s3Ca,
      AGENT_PATHS.defragService,
      AGENT_PATHS.defragTimer,
      AGENT_PATHS.verifyService,
      AGENT_PATHS.verifyTimer,
      GUEST_PATHS.forceNewClusterDropIn,
    ].sort(),
  );
  // Drills on: their units stay.
  t.deepEqual((await render(true, false, true)).units, [DEFRAG_UNITS.timer, DEFRAG_UNITS.service]);

  const defragOnly = await render(false, true);
  t.deepEqual(defragOnly.units, [BACKUP_UNITS.timer, BACKUP_UNITS.service, VERIFY_UNITS.timer, VERIFY_UNITS.service]);
  for (const path of [AGENT_PATHS.accessKey, AGENT_PATHS.secretKey, AGENT_PATHS.timer, AGENT_PATHS.service])
    t.true(defragOnly.paths.includes(path), path);
  t.false(defragOnly.paths.includes(AGENT_PATHS.metricsFile));

  const neither = await render(false, false);
  t.deepEqual(
    neither.units,
    [BACKUP_UNITS, DEFRAG_UNITS, VERIFY_UNITS, METRICS_UNITS].flatMap(({ service, timer }) => [timer, service]),
  );
  for (const path of [AGENT_PATHS.program, AGENT_PATHS.key, AGENT_PATHS.metricsTimer, AGENT_PATHS.metricsFile, MANIFEST_PATH])
    t.true(neither.paths.includes(path), path);
  t.false(neither.paths.includes(AGENT_PATHS.workDir));
});

test(`the agent's certificate says ${AGENT_USER}`, async (t) => {
  const { guests } = await renderWithPki(load(withBackup({ enabled: true })));
  const pem = guests.get('etcd-1')!.files.find((file) => file.path === AGENT_PATHS.cert)!.content;
  const { X509Certificate } = await import('node:crypto');
  t.regex(new X509Certificate(pem).subject, new RegExp(`CN=${AGENT_USER}`));
});

test('backups are refused, with paths, where the agent could not write', (t) => {
  t.deepEqual(problemsOf(withBackup({ enabled: true }, {})), [
    'defaults.restore.s3.endpoint (inherited by etcd-1): is empty while backup.enabled is true — the agent uploads where restore.s3 points: set restore.s3 under defaults',
    'defaults.restore.s3.bucket (inherited by etcd-1): is empty while backup.enabled is true — the agent uploads where restore.s3 points: set restore.s3 under defaults',
    'defaults.restore.s3.object_prefix (inherited by etcd-1): is empty while backup.enabled is true — the agent uploads where restore.s3 points: set restore.s3 under defaults',
    'defaults.restore.s3.access_key (inherited by etcd-1): is empty while backup.enabled is true — the agent uploads where restore.s3 points: set restore.s3 under defaults',
    'defaults.restore.s3.secret_key (inherited by etcd-1): is empty while backup.enabled is true — the agent uploads where restore.s3 points: set restore.s3 under defaults',
    "defaults.restore.encryption_key (inherited by etcd-1): is empty while backup.enabled is true — every backup is sealed and authenticated with it (etcd-backup's 64-hex-digit master key): set restore.encryption_key under defaults",
  ]);
  const password = withBackup({ enabled: true });
  (password as Record<string, unknown>).etcd = { client_cert_auth: false };
  (password.members[0]!.authentication_bootstrap as Record<string, unknown>).root_password = 'pw';
  t.true(problemsOf(password).some((problem) => problem.startsWith('backup.enabled: needs etcd.client_cert_auth: true')));
  const differing = withBackup({ enabled: true });
  differing.members[2]!.restore = { s3: { ...s3, bucket: 'other' } };
  t.true(
    problemsOf(differing).some((problem) =>
      problem.startsWith("members[2].restore (member etcd-3): its s3 settings or encryption_key differ from etcd-1's"),
    ),
  );
});

test('a schedule must be a systemd calendar event', (t) => {
  for (const schedule of ['hourly', '*:0/15', '*-*-* 02:30:00', 'Mon..Fri *-*-* 01:00', '*:*:00', 'daily'])
    t.notThrows(() => load(withBackup({ enabled: true, schedule })), schedule);
  for (const schedule of ['0 * * * *', '', 'hourly; rm -rf /', 'every hour']) {
    const problems = problemsOf(withBackup({ enabled: true, schedule }));
    t.true(
      problems.some((problem) => problem.startsWith('backup.schedule: must be a systemd calendar event')),
      `${schedule}: ${problems.join('; ')}`,
    );
  }
});

test("the backup agent's Debian packages: cloud-init installs them with install_dependencies, the guest step is told to look for them either way", async (t) => {
  const packagesOf = async (installDependencies: boolean, backup: boolean) => {
    const doc = withBackup({ enabled: backup, schedule: 'hourly', keep: 5 });
    Object.assign(doc.defaults as object, { install_dependencies: installDependencies });
    const { rendered, guests } = await renderWithPki(load(doc));
    const userData = parse(fileOf(rendered.get('etcd-1'), 'user-data').content, { version: '1.1' }) as { packages?: string[] };
    return { cloudInit: userData.packages ?? [], guest: guests.get('etcd-1')!.packages };
  };
  const installed = await packagesOf(true, true);
  t.deepEqual(installed.cloudInit, ['curl', 'ca-certificates', 'qemu-guest-agent', 'python3-nacl', 'python3-botocore']);
  t.deepEqual(installed.guest, { needed: [...BACKUP_PACKAGES], install: true });
  const image = await packagesOf(false, true);
  t.deepEqual(image.cloudInit, [], "the image's: nothing installed at first boot");
  t.deepEqual(image.guest, { needed: [...BACKUP_PACKAGES], install: false });
  const off = await packagesOf(true, false);
  t.false(off.cloudInit.includes('python3-botocore'));
  t.deepEqual(off.guest.needed, [], 'no backups, no need');
});

test("the agent is given the locks' names by the tool: one place names them (inventory/lock-keys.ts)", async (t) => {
  const { inventory, guests } = await renderWithPki(load(withBackup({ enabled: true, schedule: 'hourly', keep: 5 })));
  const config = JSON.parse(guests.get('etcd-1')!.files.find((file) => file.path === AGENT_PATHS.config)!.content);
  t.is(config.run_lock_key, runLockKey(inventory.cluster.name));
  t.is(config.defrag.lock_key, DEFRAG_LOCK_KEY);
});

test("a backup tick that falls between a first deploy's auth and its agent user: no backup and no failure recorded, said why; another error is a failed backup", (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-backup-tick-'));
  const config = {
    member: 'etcd-2',
    backup_enabled: true,
    schedule: '*:*:00',
    work_dir: dir,
    keep: 2,
    etcd: { endpoint: 'https://192.168.150.12:2379' },
    s3: { object_prefix: 'lab/etcd' },
  };
  const tick = (snapshot: unknown) =>
    agent<{ code: number | null; calls: string[][]; skipped: string | null }>('backup-tick', {
      config,
      answers: { 'lease grant': { ID: 7 }, 'txn -w': { succeeded: true }, snapshot, put: {} },
    });
  const early = tick({ fails: 'Error: rpc error: code = Unknown desc = auth: user not found' });
  t.regex(
    early.skipped ?? '',
    /^tick \S+: no backup: etcd does not know this agent's user yet \(.*auth: user not found\); a first deploy enables auth/,
  );
  t.deepEqual(
    early.calls.map((args) => args[0]),
    ['lease', 'txn', 'snapshot'],
    'no record of a failed run',
  );
  const broken = tick({ fails: 'Error: context deadline exceeded' });
  t.is(broken.code, 1);
  t.is(broken.skipped, null);
  t.true(
    broken.calls.some((args) => args[0] === 'put' && args[1] === 'etcd-kvm/backup/last-run'),
    JSON.stringify(broken.calls),
  );
});
