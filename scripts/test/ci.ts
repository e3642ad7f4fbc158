import { spawn, spawnSync } from 'node:child_process';
import { type Ended, failureDigest, printEnded, runBuffered } from './jobs.ts';

/**
 * `npm run test:ci`, what `.ci/run` runs after `npm ci`: `npm test` beside `npm run test:e2e`, the e2e's report
 * as it comes and `npm test`'s whole when it ends (a failed one's digest again at the end); the exit code is 1
 * when either failed.
 *
 * Beside, because the e2e leaves the machine's two cores idle for stretches (agent ticks, elections, a member's
 * first boot waiting on its disk), and `npm test` fills them. At nice 10: its integration tests run there, and its
 * unit tests at 19 (side-by-side.ts adds 10). At nice 19 the integration tests were starved past their own waits
 * beside the e2e's first boots (2026-12-02, load 8-13: a test process that saw its child's output 20 s late); a
 * nice-10 process weighs 110 against a guest's 1024, a nice-19 one 15.
 * Measured 2026-11-30 00:18–00:25 (a fast hour, load 5–10 while both ran): `npm test` at nice 19 beside
 * lab-deploy's first scenarios passed in 394 s, where alone it takes ~300 s, and lab-deploy passed.
 *
 * The Debian packages both need are installed first, one apt at a time (the e2e's set holds the unit tests').
 * Both read dist/: `npm pack` in the integration tests rebuilds it, which swaps the new build in whole
 * (scripts/build.mjs), so an e2e command running then loads a complete one.
 */

const packages = spawnSync('npx', ['tsx', 'scripts/system/ensure-packages.ts', 'e2e'], { stdio: 'inherit' });
if (packages.status !== 0) process.exit(1);

console.log('npm test runs beside the e2e at nice 10 (its unit tests at 19); its report follows when it ends');
const unit = runBuffered({ name: 'npm test (beside the e2e)', argv: ['nice', '-n', '10', 'npm', 'test'] }).then((ended) => {
  printEnded(ended);
  return ended;
});
const e2e = new Promise<boolean>((done) => {
  const child = spawn('npm', ['run', '-s', 'test:e2e'], { stdio: 'inherit' });
  child.on('error', () => done(false));
  child.on('close', (code) => done(code === 0));
});
const [unitEnded, e2eOk]: [Ended, boolean] = await Promise.all([unit, e2e]);
const unitOk = unitEnded.ok;
// Again at the very end: its report came in the middle of the e2e's, and a log cut to its head and tail loses it.
if (!unitOk) console.log(`\n${failureDigest(unitEnded)}`);
console.log(`\nci: npm test ${unitOk ? 'passed' : 'FAILED'}, e2e ${e2eOk ? 'passed' : 'FAILED'}`);
process.exit(unitOk && e2eOk ? 0 : 1);
