import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { noop } from 'cockatiel';
import { Etcd3 } from 'etcd3';
import { silenceKnownWarnings } from '../tasks/core/warnings.ts';
import { loadInventory } from '../tasks/inventory/load.ts';
import { PkiStore } from '../tasks/pki/store.ts';
import { writeInventory } from '../test/helpers/inventory.ts';

/**
 * Backup and restore of a large snapshot, with the tool's peak resident memory (/usr/bin/time -v):
 * a one-member etcd 3.4 on loopback (Debian's, with the tool's certificates) filled with random
 * 1 MiB values, s3rver on loopback, then `tasks/commands/backup.ts` (encrypted) and the control node's side of
 * a restore (scripts/bench/restore-fetch.ts). Needs no lab.
 *
 *   npx tsx scripts/bench-backup.ts [--gib N] [--tool-dir DIR]
 *
 * --tool-dir runs backup.ts from another checkout (e.g. a git worktree of an older commit), to compare.
 */

const arg = (name: string) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const gib = Number(arg('--gib') ?? 1);
const toolDir = resolve(arg('--tool-dir') ?? '.');
const VALUE_BYTES = 1024 * 1024;
const CLIENT_PORT = 42379;
// This script's own client names the member by IP (Node's DEP0123), as the tool's CLIs silence too.
silenceKnownWarnings();
const work = mkdtempSync(join(tmpdir(), 'etcd-kvm-bench-backup-'));
const children: ChildProcess[] = [];

function measured(label: string, program: string, args: string[], cwd: string): { seconds: number; peakMiB: number; output: string } {
  const result = spawnSync('/usr/bin/time', ['-v', program, ...args], { cwd, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  const peakKiB = Number(result.stderr.match(/Maximum resident set size \(kbytes\): (\d+)/)?.[1]);
  const [, minutes, seconds] = result.stderr.match(/Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\d+):([\d.]+)/) ?? [];
  if (result.status !== 0) throw new Error(`${label} failed (exit ${result.status}):\n${result.stdout}\n${result.stderr.slice(-3000)}`);
  return { seconds: Number(minutes) * 60 + Number(seconds), peakMiB: peakKiB / 1024, output: result.stdout.trim() };
}

try {
  // An inventory whose one member is this machine's loopback, reached directly; S3 on loopback too.
  const s3Dir = join(work, 's3');
  mkdirSync(s3Dir);
  const s3 = spawn(process.execPath, ['--import', 'tsx', 'test/helpers/s3-server.ts', s3Dir, 'backups'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.push(s3);
  const s3Port = await new Promise<number>((done) => s3.stdout!.once('data', (line: Buffer) => done(Number(line.toString().trim()))));
  const inventoryPath = writeInventory(
    {
      cluster: { name: 'bench', initial_token: 'bench' },
      etcd: { client_port: CLIENT_PORT, peer_port: CLIENT_PORT + 1, space_quota: 4 * 1024 ** 3 },
      hypervisors: { hv: { address: '127.0.0.1' } },
      defaults: {
        install_dependencies: false,
        base_image: { pool: 'images', volume: 'base.qcow2' },
        restore: {
          s3: {
            endpoint: `http://127.0.0.1:${s3Port}`,
            bucket: 'backups',
            object_prefix: 'bench',
            access_key: 'S3RVER',
            secret_key: 'S3RVER',
          },
          encryption_key: 'b7'.repeat(32),
        },
      },
      members: [
        {
          name: 'etcd-1',
          reach_via: 'direct',
          libvirt_networks: [{ network_name: 'net', ip: '127.0.0.1', prefix_length: 8 }],
          authentication_bootstrap: { bootstrap: true },
        },
      ],
    },
    work,
  );
  // The tool's own PKI (rendering only: no hypervisor is contacted).
  const rendered = spawnSync(
    process.execPath,
    ['--import', 'tsx', 'tasks/deploy.ts', '-i', inventoryPath, '--render-only', join(work, 'rendered')],
    { encoding: 'utf8' },
  );
  if (rendered.status !== 0) throw new Error(rendered.stderr);
  const inventory = loadInventory(inventoryPath);
  const store = new PkiStore(inventory.stateDir);
  const member = store.pathsOf('member/etcd-1');
  const ca = store.pathsOf('ca').public;
  const root = store.pathsOf('client/root');
  const url = `https://127.0.0.1:${CLIENT_PORT}`;
  const etcd = spawn(
    'etcd',
    [
      '--name',
      'etcd-1',
      '--data-dir',
      join(work, 'data'),
      '--quota-backend-bytes',
      String(4 * 1024 ** 3),
      '--listen-client-urls',
      url,
      '--advertise-client-urls',
      url,
      '--listen-peer-urls',
      `https://127.0.0.1:${CLIENT_PORT + 1}`,
      '--initial-advertise-peer-urls',
      `https://127.0.0.1:${CLIENT_PORT + 1}`,
      '--initial-cluster',
      `etcd-1=https://127.0.0.1:${CLIENT_PORT + 1}`,
      '--cert-file',
      member.public,
      '--key-file',
      member.privateKey,
      '--trusted-ca-file',
      ca,
      '--client-cert-auth',
      '--peer-cert-file',
      member.public,
      '--peer-key-file',
      member.privateKey,
      '--peer-trusted-ca-file',
      ca,
      '--peer-client-cert-auth',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  children.push(etcd);
  let etcdLog = '';
  etcd.stderr!.on('data', (chunk: Buffer) => (etcdLog = (etcdLog + chunk.toString()).slice(-4000)));

  // No retries or circuit breaker: the wait below polls by itself.
  const client = new Etcd3({
    hosts: url,
    credentials: { rootCertificate: readFileSync(ca), certChain: readFileSync(root.public), privateKey: readFileSync(root.privateKey) },
    faultHandling: { host: () => noop, global: noop },
  });
  for (let tries = 0; ; tries++) {
    try {
      await client.maintenance.status();
      break;
    } catch (error) {
      if (tries > 100) throw new Error(`etcd did not answer: ${(error as Error).message}\n${etcdLog}`);
      await sleep(200);
    }
  }
  const filled = performance.now();
  const keys = Math.ceil((gib * 1024 ** 3) / VALUE_BYTES);
  for (let i = 0; i < keys; i += 4)
    await Promise.all([0, 1, 2, 3].filter((j) => i + j < keys).map((j) => client.put(`bench/${i + j}`).value(randomBytes(VALUE_BYTES))));
  const dbBytes = Number((await client.maintenance.status()).dbSize);
  client.close();
  console.log(
    `filled ${keys} keys of 1 MiB in ${((performance.now() - filled) / 1000).toFixed(0)} s; database ${(dbBytes / 1024 ** 3).toFixed(2)} GiB`,
  );

  const backup = measured(
    'backup',
    process.execPath,
    ['--import', 'tsx', join(toolDir, 'tasks/commands/backup.ts'), '-i', inventoryPath],
    toolDir,
  );
  console.log(backup.output);
  const restore = measured(
    'restore-fetch',
    process.execPath,
    ['--import', 'tsx', 'scripts/bench/restore-fetch.ts', inventoryPath],
    process.cwd(),
  );
  console.log(restore.output);
  console.log(
    `\nmachine: ${cpus().length} × ${cpus()[0]?.model ?? 'CPU'}, load ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  console.log('| snapshot | backup (encrypted, to s3rver) | restore fetch (download, decrypt, verify, read) |');
  console.log('| --- | --- | --- |');
  console.log(
    `| ${(dbBytes / 1024 ** 3).toFixed(2)} GiB | ${backup.seconds.toFixed(1)} s, peak RSS ${backup.peakMiB.toFixed(0)} MiB | ${restore.seconds.toFixed(1)} s, peak RSS ${restore.peakMiB.toFixed(0)} MiB |`,
  );
} finally {
  for (const child of children) child.kill('SIGTERM');
  await sleep(500);
  rmSync(work, { recursive: true, force: true });
}
