import { type Job, printEnded, runBuffered } from './jobs.ts';

/**
 * `npm test`'s last part: the unit and the integration tests at once, each whole output printed when it ends, a
 * failed one's last, so a log's tail shows it; the exit code is 1 when either failed.
 *
 * At once, because the integration tests mostly wait (on etcd, sshd, openssl, s3rver and the CLIs they start, one
 * file at a time): one after the other the two took 141 + 223 s here, side by side 274–292 s (idle machine, 2 cores).
 * The unit tests run at nice 10: the integration tests' deadlines (leases, elections) get the CPU first.
 */

const JOBS: Job[] = [
  { name: 'test:integration', argv: ['npm', 'run', '-s', 'test:integration'] },
  { name: 'test:unit', argv: ['nice', '-n', '10', 'npm', 'run', '-s', 'test:unit'] },
];

console.log(`running ${JOBS.map((job) => job.name).join(' and ')} side by side; each output follows when it ends`);
const ended = await Promise.all(JOBS.map(runBuffered));
for (const run of [...ended].sort((a, b) => Number(b.ok) - Number(a.ok))) printEnded(run);
process.exit(ended.every((run) => run.ok) ? 0 : 1);
