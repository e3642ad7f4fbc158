import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { failureDigest } from '../test/jobs.ts';
import { LAB_KEPT_ENV } from './lab-kept.ts';
import { avaClosingLines, DEFAULT_TIMINGS_PATH, parseSpans, TIMINGS_ENV, timingSummary } from './summary.ts';

/**
 * `npm run test:e2e`: ava over test/e2e (the arguments are ava's), then where the time went. The
 * scenarios and set-ups append their spans to a timings file (test/helpers/timing.ts), emptied first;
 * the summary follows ava's own report, then, when ava failed, its failed tests and its report's last lines, and
 * ava's closing lines are repeated last, so the run still ends on them. The exit code is ava's.
 *
 * The lab stays up from one file to the next (scripts/e2e/lab-kept.ts): the runner takes it down before the first
 * file, whatever a killed run left, and after the last, whatever came of ava.
 */

/** `lab.ts down`, its time said: the runner's own, outside every file's spans. */
function labDown(when: string): void {
  const started = performance.now();
  const down = spawnSync(process.execPath, ['--import', 'tsx', 'scripts/lab/lab.ts', 'down'], { encoding: 'utf8' });
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  console.log(`e2e: lab:down ${when}: exit ${down.status} in ${seconds} s`);
  if (down.status !== 0) console.log(down.stdout + down.stderr);
}

const TIMINGS = resolve(DEFAULT_TIMINGS_PATH);
mkdirSync(dirname(TIMINGS), { recursive: true });
rmSync(TIMINGS, { force: true });

const started = performance.now();
labDown('before the first file');
const ava = spawn(process.execPath, ['node_modules/ava/entrypoints/cli.mjs', ...process.argv.slice(2)], {
  stdio: ['inherit', 'pipe', 'inherit'],
  env: { ...process.env, [TIMINGS_ENV]: TIMINGS, [LAB_KEPT_ENV]: '1' },
});
// Forwarded as it comes, and kept: a failed run's digest (its ✘ lines, ava's failure report) and the closing lines
// are printed again after the summary.
const output: Buffer[] = [];
ava.stdout.on('data', (chunk: Buffer) => {
  process.stdout.write(chunk);
  output.push(chunk);
});
const [status, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((done) =>
  ava.on('close', (code, killedBy) => done([code, killedBy])),
);
labDown('after the last file');
const wallMs = performance.now() - started;

console.log(
  existsSync(TIMINGS)
    ? timingSummary(parseSpans(readFileSync(TIMINGS, 'utf8')), wallMs)
    : '\ne2e time: no span was recorded (no e2e file ran)',
);
const avaOutput = Buffer.concat(output).toString();
if (status !== 0) console.log(`\n${failureDigest('the e2e (ava)', avaOutput, 60)}`);
const closing = avaClosingLines(avaOutput.slice(-8192));
if (closing.length) console.log(`\n${closing.join('\n')}`);
process.exit(status ?? (signal ? 1 : 0));
