import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { avaClosingLines, DEFAULT_TIMINGS_PATH, parseSpans, TIMINGS_ENV, timingSummary } from './summary.ts';

/**
 * `npm run test:e2e`: ava over test/e2e (the arguments are ava's), then where the time went. The
 * scenarios and set-ups append their spans to a timings file (test/helpers/timing.ts), emptied first;
 * the summary follows ava's own report, and ava's closing lines are repeated after it, so the run still
 * ends on them. The exit code is ava's.
 */

const TIMINGS = resolve(DEFAULT_TIMINGS_PATH);
mkdirSync(dirname(TIMINGS), { recursive: true });
rmSync(TIMINGS, { force: true });

const started = performance.now();
const ava = spawn(process.execPath, ['node_modules/ava/entrypoints/cli.mjs', ...process.argv.slice(2)], {
  stdio: ['inherit', 'pipe', 'inherit'],
  env: { ...process.env, [TIMINGS_ENV]: TIMINGS },
});
// Forwarded as it comes; the tail is kept for the closing lines.
let tail = '';
ava.stdout.on('data', (chunk: Buffer) => {
  process.stdout.write(chunk);
  tail = (tail + chunk.toString()).slice(-8192);
});
const [status, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((done) =>
  ava.on('close', (code, killedBy) => done([code, killedBy])),
);
const wallMs = performance.now() - started;

console.log(
  existsSync(TIMINGS)
    ? timingSummary(parseSpans(readFileSync(TIMINGS, 'utf8')), wallMs)
    : '\ne2e time: no span was recorded (no e2e file ran)',
);
const closing = avaClosingLines(tail);
if (closing.length) console.log(`\n${closing.join('\n')}`);
process.exit(status ?? (signal ? 1 : 0));
