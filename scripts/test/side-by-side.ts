import { spawn } from 'node:child_process';

/**
 * `npm test`'s last part: the unit and the integration tests at once, each whole output printed when it ends (two ava
 * reports interleaved line by line read as neither), a failed one's last, so a log's tail shows it; the exit code is
 * 1 when either failed.
 *
 * At once, because the integration tests mostly wait (on etcd, sshd, openssl, s3rver and the CLIs they start, one
 * file at a time): one after the other the two took 141 + 223 s here, side by side 274–292 s (idle machine, 2 cores).
 * The unit tests run at nice 10: the integration tests' deadlines (leases, elections) get the CPU first.
 */

interface Job {
  name: string;
  argv: [string, ...string[]];
}

const JOBS: Job[] = [
  { name: 'test:integration', argv: ['npm', 'run', '-s', 'test:integration'] },
  { name: 'test:unit', argv: ['nice', '-n', '10', 'npm', 'run', '-s', 'test:unit'] },
];

interface Ended {
  job: Job;
  ok: boolean;
  output: string;
  seconds: number;
}

function runJob(job: Job): Promise<Ended> {
  const started = performance.now();
  const child = spawn(job.argv[0], job.argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
  const chunks: Buffer[] = [];
  child.stdout.on('data', (chunk: Buffer) => chunks.push(chunk));
  child.stderr.on('data', (chunk: Buffer) => chunks.push(chunk));
  return new Promise((done) => {
    const end = (ok: boolean, extra = '') =>
      done({ job, ok, output: Buffer.concat(chunks).toString() + extra, seconds: (performance.now() - started) / 1000 });
    child.on('error', (error) => end(false, `\n${job.name}: could not start: ${error.message}\n`));
    child.on('close', (code, signal) => end(code === 0, code === 0 ? '' : `\n${job.name}: exit ${code ?? signal}\n`));
  });
}

console.log(`running ${JOBS.map((job) => job.name).join(' and ')} side by side; each output follows when it ends`);
const ended = await Promise.all(JOBS.map(runJob));
for (const { job, ok, output, seconds } of [...ended].sort((a, b) => Number(b.ok) - Number(a.ok))) {
  console.log(`\n===== ${job.name}: ${ok ? 'passed' : 'FAILED'} in ${seconds.toFixed(1)} s =====\n${output.trimEnd()}`);
}
process.exit(ended.every((run) => run.ok) ? 0 : 1);
