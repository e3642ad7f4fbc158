import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LAB } from '../../scripts/lab/config.ts';
import { NAMESPACE } from './lab.ts';

/**
 * An S3 server both the control node and the lab's members reach: s3rver on the root namespace's
 * loopback (test/helpers/s3-server.ts, where the tool reads and writes), and a socat in the lab's
 * namespace on the bridge's host address that enters the root namespace for each connection and
 * connects to that loopback port (a member on either hypervisor reaches the first one's bridge). No
 * traffic goes from the root namespace to the VMs' range: the members come to the loopback.
 */
export interface LabS3 {
  /** As the control node reaches it. */
  endpoint: string;
  /** As the members reach it (backup.endpoint). */
  memberEndpoint: string;
  bucket: string;
  /** s3rver's directory: each object is <bucket>/<name>._S3rver_object. */
  dir: string;
  stop(): Promise<void>;
}

/** s3rver's built-in account. */
export const LAB_S3_CREDENTIALS = { access_key: 'S3RVER', secret_key: 'S3RVER' } as const;

async function started(child: ChildProcess, what: string): Promise<string> {
  const [first] = (await Promise.race([
    once(child.stdout!, 'data'),
    once(child, 'exit').then(([code]) => {
      throw new Error(`${what} exited ${code} before it listened`);
    }),
  ])) as [Buffer];
  return first.toString().trim();
}

export async function startLabS3(bucket = 'etcd-backups'): Promise<LabS3> {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-s3-'));
  const server = spawn(process.execPath, ['--import', 'tsx', 'test/helpers/s3-server.ts', dir, bucket], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const port = Number(await started(server, 's3rver'));
  const forwarder = spawn(
    'ip',
    [
      'netns',
      'exec',
      NAMESPACE,
      'socat',
      `TCP-LISTEN:${port},bind=${LAB.network.address},reuseaddr,fork`,
      // This process's own namespace, the root one (/proc/1's may be closed to it in a container).
      `EXEC:nsenter --net=/proc/${process.pid}/ns/net socat STDIO TCP4\\:127.0.0.1\\:${port}`,
    ],
    { stdio: 'ignore' },
  );
  const stop = async () => {
    for (const child of [forwarder, server]) {
      if (child.exitCode !== null) continue;
      child.kill('SIGTERM');
      await once(child, 'exit');
    }
    rmSync(dir, { recursive: true, force: true });
  };
  return { endpoint: `http://127.0.0.1:${port}`, memberEndpoint: `http://${LAB.network.address}:${port}`, bucket, dir, stop };
}
