import { spawn, spawnSync } from 'node:child_process';
import { failureDigest, printEnded, runBuffered } from './jobs.ts';

/**
 * `npm run test:ci`, what `.ci/run` runs after `npm ci`: `npm test`'s parts, then `npm run test:e2e` alone. First the
 * lint and the type check, then the unit and the integration tests side by side as `npm test` runs them
 * (scripts/test/side-by-side.ts: the unit tests at nice 10), then the e2e with the machine to itself. Each report is
 * printed whole when it ends, a failed one's digest again at the end; the exit code is 1 when any failed. The e2e runs
 * even when a check failed: its report is the long one to have.
 *
 * Nothing beside the e2e. The integration tests' own processes were starved past their waits beside the guests
 * (2026-12-01/02, load 8-13: ava's 120 s, a SIGINT test's 20 s SSH handshake, a run lock's 30 s lease). The unit
 * tests passed there at nice 19 (817-1021 s, against ~140 s alone), but not for free: CI's run of 2026-12-02 13:02
 * had them beside lab-deploy's first 17 minutes at load ~10, its cold deploy took 490 s (296 s on the machine
 * otherwise idle an hour before) and a scenario's SSH command outlived its 60 s. Side by side before the e2e, the unit
 * tests add what they take beside the integration tests, which mostly wait (292 s for both against 223 s for the
 * integration tests alone, idle machine of 2026-11-30).
 *
 * The Debian packages all of them need are installed first, one apt at a time (the e2e's set holds the unit
 * tests'). The integration tests' `npm pack` rebuilds dist/, which the e2e reads: they end before it starts.
 */

const packages = spawnSync('npx', ['tsx', 'scripts/system/ensure-packages.ts', 'e2e'], { stdio: 'inherit' });
if (packages.status !== 0) process.exit(1);

console.log('lint and the type check, then test:unit and test:integration side by side, then the e2e alone');
const checks = await runBuffered({
  name: 'lint, typecheck, test:unit and test:integration (before the e2e)',
  argv: ['sh', '-c', 'npm run -s lint && npm run -s typecheck && npx tsx scripts/test/side-by-side.ts'],
});
printEnded(checks);

const e2eOk = await new Promise<boolean>((done) => {
  const child = spawn('npm', ['run', '-s', 'test:e2e'], { stdio: 'inherit' });
  child.on('error', () => done(false));
  child.on('close', (code) => done(code === 0));
});
// Again at the very end: its report came before the e2e's, and a log cut to its head and tail loses it.
if (!checks.ok) console.log(`\n${failureDigest(checks.job.name, checks.output)}`);
const verdict = (ok: boolean) => (ok ? 'passed' : 'FAILED');
console.log(`\nci: lint, typecheck, unit and integration ${verdict(checks.ok)}, e2e ${verdict(e2eOk)}`);
process.exit(checks.ok && e2eOk ? 0 : 1);
