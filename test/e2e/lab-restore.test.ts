import test from 'ava';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { parse, stringify } from 'yaml';
import { SnapshotBucket } from '../../tasks/backup/s3.ts';
import { Secret } from '../../tasks/core/secret.ts';
import { run } from '../helpers/exec.ts';
import { deploy, endpoint, etcdctl, lab, LAB_STATE, MEMBER_IPS, rootIdentity, type DeployRun } from '../helpers/lab.ts';

/**
 * Backup and restore on the real lab, against a real S3-compatible server (s3rver, on the control
 * node's loopback in its own process, where the tool reads and writes): deploy, write keys, back up encrypted, tear
 * the whole lab down, deploy again with restore.enabled, and read the keys back.
 */

const INVENTORY = 'inventories/.e2e-restore.yaml';
const MASTER_KEY = randomBytes(32).toString('hex');
const ALL = Object.keys(MEMBER_IPS).map((name) => endpoint(name as keyof typeof MEMBER_IPS));
const s3Dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-s3-'));
let s3: ChildProcess | undefined;
let s3Settings: Record<string, string> = {};

function writeInventory(restoreEnabled: boolean): void {
  const doc = parse(readFileSync('inventories/lab.yaml', 'utf8'));
  doc.defaults.restore = { enabled: restoreEnabled, s3: s3Settings, encryption_key: MASTER_KEY };
  writeFileSync(INVENTORY, stringify(doc), { mode: 0o600 });
}

function deployed(t: { log: (...values: unknown[]) => void }): DeployRun {
  const started = Date.now();
  const result = deploy(['-i', INVENTORY]);
  t.log(`deploy: exit ${result.status} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  if (result.status !== 0) t.log(result.output.slice(-4000));
  return result;
}

test.before(async (t) => {
  s3 = spawn(process.execPath, ['--import', 'tsx', 'test/helpers/s3-server.ts', s3Dir, 'etcd-backups'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const [firstLine] = (await once(s3.stdout!, 'data')) as [Buffer];
  const port = Number(firstLine.toString().trim());
  // s3rver's built-in account.
  s3Settings = {
    endpoint: `http://127.0.0.1:${port}`,
    bucket: 'etcd-backups',
    object_prefix: 'lab',
    access_key: 'S3RVER',
    secret_key: 'S3RVER',
  };
  lab('down');
  rmSync(LAB_STATE, { recursive: true, force: true });
  const up = lab('up');
  if (up.status !== 0) throw new Error(`lab:up failed: ${up.stderr}`);
  t.log(up.stdout);
});

test.after.always(async () => {
  lab('down');
  rmSync(INVENTORY, { force: true });
  s3?.kill('SIGTERM');
  rmSync(s3Dir, { recursive: true, force: true });
});

test.serial('backup (encrypted) → teardown → deploy with restore.enabled brings the keys back', async (t) => {
  writeInventory(false);
  t.is(deployed(t).status, 0);
  for (const i of [1, 2, 3]) t.is(etcdctl([endpoint('etcd-1')], rootIdentity, ['put', `e2e/restore/${i}`, `value ${i}`]).status, 0);

  const backup = run(process.execPath, ['--import', 'tsx', 'tasks/backup.ts', '-i', INVENTORY], { timeoutMs: 5 * 60_000 });
  t.is(backup.status, 0, backup.stderr);
  t.regex(
    backup.stdout,
    /^backed up \d+ bytes from etcd-\d to s3 bucket etcd-backups at http:\/\/127\.0\.0\.1:\d+ as lab-\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z\.dump \(encrypted\)$/m,
  );
  t.false(backup.stdout.includes(MASTER_KEY) || backup.stderr.includes(MASTER_KEY));
  const bucket = new SnapshotBucket({
    ...s3Settings,
    region: '',
    ca_cert: '',
    access_key: new Secret('S3RVER'),
    secret_key: new Secret('S3RVER'),
  } as never);
  const objects = await bucket.list('lab-');
  bucket.close();
  t.is(objects.length, 2, objects.join(', '));
  t.true(objects.some((name) => name.endsWith('.dump')) && objects.some((name) => name.endsWith('.key')));
  // Sealed: the raw object does not contain the values written.
  const dumpPath = objects.find((name) => name.endsWith('.dump'))!;
  t.false(readFileSync(join(s3Dir, 'etcd-backups', `${dumpPath}._S3rver_object`)).includes('value 1'));

  // Tear everything down: VMs, volumes, network, pools. Only the state directory (PKI) and S3 remain.
  t.is(lab('down').status, 0);
  t.is(lab('up').status, 0);

  writeInventory(true);
  const restored = deployed(t);
  t.is(restored.status, 0);
  const restoreSteps = restored.report.results.filter((r) => r.step === 'restore');
  t.deepEqual(restoreSteps.map((r) => `${r.host} ${r.status}`).sort(), ['etcd-1 changed', 'etcd-2 changed', 'etcd-3 changed']);
  t.regex(restoreSteps[0]!.changes[0]!.summary, /^restore etcd-\d's data directory from lab-.*\.dump in s3 bucket etcd-backups/);

  for (const i of [1, 2, 3])
    t.is(
      etcdctl([endpoint(`etcd-${i}` as keyof typeof MEMBER_IPS)], rootIdentity, [
        'get',
        '--print-value-only',
        `e2e/restore/${i}`,
      ]).stdout.trim(),
      `value ${i}`,
    );
  const list = etcdctl(ALL, rootIdentity, ['member', 'list', '-w', 'json']);
  t.deepEqual((JSON.parse(list.stdout) as { members: { name: string }[] }).members.map((m) => m.name).sort(), [
    'etcd-1',
    'etcd-2',
    'etcd-3',
  ]);
  // The restored cluster is writable and auth is still on (from the snapshot).
  t.is(etcdctl(ALL, rootIdentity, ['put', 'e2e/after-restore', 'yes']).status, 0);
  const asMember = etcdctl(
    [endpoint('etcd-1')],
    { caCert: rootIdentity.caCert, cert: join(LAB_STATE, 'pki/members/etcd-1.crt'), key: join(LAB_STATE, 'pki/members/etcd-1.key') },
    ['get', 'e2e/restore/1'],
  );
  t.not(asMember.status, 0);

  // Restored data is never restored again.
  const again = deployed(t);
  t.is(again.status, 0);
  t.deepEqual(
    again.report.results.filter((r) => r.status !== 'ok').map((r) => `${r.host}/${r.step}`),
    [],
  );
  t.is(etcdctl(ALL, rootIdentity, ['get', '--print-value-only', 'e2e/after-restore']).stdout.trim(), 'yes');
});

test.serial('backup --keep 2: two more backups of the restored cluster leave the two newest, each with its key', async (t) => {
  const listing = async () => {
    const bucket = new SnapshotBucket({
      ...s3Settings,
      region: '',
      ca_cert: '',
      access_key: new Secret('S3RVER'),
      secret_key: new Secret('S3RVER'),
    } as never);
    try {
      return (await bucket.list('lab-')).sort();
    } finally {
      bucket.close();
    }
  };
  const before = await listing();
  t.is(before.filter((name) => name.endsWith('.dump')).length, 1, before.join(', '));
  const made: string[] = [];
  for (const round of [1, 2]) {
    // Object names carry the time to the second: never two in one second.
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    const backup = run(process.execPath, ['--import', 'tsx', 'tasks/backup.ts', '-i', INVENTORY, '--keep', '2'], { timeoutMs: 5 * 60_000 });
    t.is(backup.status, 0, backup.stderr);
    made.push(/ as (lab-\S+\.dump) /.exec(backup.stdout)![1]!);
    t.regex(
      backup.stdout,
      round === 1
        ? /\nkept 2 snapshot\(s\) .*; deleted 0 object\(s\)$/m
        : /\nkept 2 snapshot\(s\) .*; deleted 2 object\(s\): lab-\S+\.dump, lab-\S+\.key$/m,
    );
  }
  const after = await listing();
  t.deepEqual(after, made.flatMap((dump) => [dump, dump.replace(/\.dump$/, '.key')]).sort());
  const refused = run(process.execPath, ['--import', 'tsx', 'tasks/backup.ts', '-i', INVENTORY, '--keep', '0']);
  t.is(refused.status, 2);
  t.regex(refused.stderr, /--keep 0: give a whole number of at least 1/);
  t.deepEqual(await listing(), after);
});
