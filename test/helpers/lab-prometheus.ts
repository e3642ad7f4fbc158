import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run } from './exec.ts';
import { NAMESPACE } from './lab.ts';

/**
 * Debian's Prometheus in the lab's namespace, on that namespace's loopback, scraping the members with
 * the configuration `etcd-kvm monitoring` wrote. Asked through its HTTP API with curl in the same
 * namespace (no traffic from the root namespace to the lab's addresses).
 */

const LISTEN = '127.0.0.1:19090';

export interface Sample {
  metric: Record<string, string>;
  value: number;
}

export interface LabPrometheus {
  /** An instant query's vector, each sample's labels and value. */
  query(expr: string): Sample[];
  /** Each active target's job, member label and health. */
  targets(): { job: string; member: string; health: string; lastError: string }[];
  stop(): Promise<void>;
}

function api(path: string): unknown {
  const done = run('ip', ['netns', 'exec', NAMESPACE, 'curl', '-sS', '--max-time', '10', `http://${LISTEN}${path}`]);
  if (done.status !== 0) throw new Error(`prometheus ${path}: ${done.stderr}`);
  const answer = JSON.parse(done.stdout) as { status: string; data: unknown; error?: string };
  if (answer.status !== 'success') throw new Error(`prometheus ${path}: ${answer.error}`);
  return answer.data;
}

export async function startLabPrometheus(configFile: string): Promise<LabPrometheus> {
  const storage = mkdtempSync(join(tmpdir(), 'etcd-kvm-prometheus-'));
  const server: ChildProcess = spawn(
    'ip',
    [
      'netns',
      'exec',
      NAMESPACE,
      'prometheus',
      `--config.file=${configFile}`,
      `--storage.tsdb.path=${storage}`,
      `--web.listen-address=${LISTEN}`,
    ],
    { stdio: 'ignore' },
  );
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (run('ip', ['netns', 'exec', NAMESPACE, 'curl', '-sf', `http://${LISTEN}/-/ready`]).status === 0) break;
    if (server.exitCode !== null) throw new Error(`prometheus exited ${server.exitCode} before it was ready`);
    if (Date.now() > deadline) throw new Error('prometheus not ready within 60 s');
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  return {
    query: (expr) =>
      (
        api(`/api/v1/query?query=${encodeURIComponent(expr)}`) as { result: { metric: Record<string, string>; value: [number, string] }[] }
      ).result.map((sample) => ({ metric: sample.metric, value: Number(sample.value[1]) })),
    targets: () =>
      (
        api('/api/v1/targets?state=active') as {
          activeTargets: { labels: Record<string, string>; health: string; lastError: string }[];
        }
      ).activeTargets.map((target) => ({
        job: target.labels.job ?? '',
        member: target.labels.member ?? '',
        health: target.health,
        lastError: target.lastError,
      })),
    async stop() {
      server.kill('SIGTERM');
      if (server.exitCode === null) await new Promise((resolve) => server.once('exit', resolve));
      rmSync(storage, { recursive: true, force: true });
    },
  };
}
