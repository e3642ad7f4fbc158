import { spawn } from 'node:child_process';

/** A command the test scripts run beside another, its output kept until it ends. */
export interface Job {
  name: string;
  argv: [string, ...string[]];
}

export interface Ended {
  job: Job;
  ok: boolean;
  output: string;
  seconds: number;
}

/** Runs `job` with its standard output and error kept, in order, until it ends. */
export function runBuffered(job: Job): Promise<Ended> {
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

/** An ended job's whole output under one heading, printed in one write: two reports interleaved line by line read as neither. */
export function printEnded({ job, ok, output, seconds }: Ended): void {
  process.stdout.write(`\n===== ${job.name}: ${ok ? 'passed' : 'FAILED'} in ${seconds.toFixed(1)} s =====\n${output.trimEnd()}\n`);
}

/**
 * What a failed job's output says of its failure, for the end of a long log: ava's failed tests (its ✘ lines) and the
 * output's last lines, where ava writes each failure's assertion and its closing count.
 */
export function failureDigest(name: string, output: string, lastLines = 40): string {
  const lines = output
    .replace(/\u001b\[[0-9;]*m/g, '')
    .trimEnd()
    .split('\n');
  const failed = lines.filter((line) => line.includes('✘')).slice(0, 20);
  return [
    `===== ${name} FAILED: its failed tests, then its last ${lastLines} lines =====`,
    ...failed,
    '…',
    ...lines.slice(-lastLines),
  ].join('\n');
}
