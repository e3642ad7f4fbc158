import { spawn, spawnSync } from 'node:child_process';
import { type Ended, failureDigest, printEnded, runBuffered } from './jobs.ts';

/**
 * `npm run test:ci`, what `.ci/run` runs after `npm ci`: `npm test`'s parts and `npm run test:e2e`. First the
 * integration tests, alone; then the e2e, with the lint, the type check and the unit tests beside it at nice 19.
 * The e2e's report comes as it comes, the others' whole when each ends, and a failed one's digest again at the
 * end; the exit code is 1 when any failed.
 *
 * The integration tests alone, because beside the e2e's guests their own processes were starved past their own
 * waits, a different wait each run (2026-12-01/02, load 8-13, at nice 19 and at nice 10): ava's 120 s, a SIGINT
 * test's 20 s SSH handshake, a run lock's 30 s lease that lapsed between its keep-alives. They take ~4 minutes
 * alone. The unit tests wait on nothing of the machine's: beside the e2e at nice 19 they passed in every run
 * (817-1006 s, against ~140 s alone), in the time the guests leave the two cores idle.
 *
 * The Debian packages all of them need are installed first, one apt at a time (the e2e's set holds the unit
 * tests'). The integration tests' `npm pack` rebuilds dist/, which the e2e reads: they end before it starts.
 */

const packages = spawnSync('npx', ['tsx', 'scripts/system/ensure-packages.ts', 'e2e'], { stdio: 'inherit' });
if (packages.status !== 0) process.exit(1);

console.log('test:integration runs first, alone; its report follows when it ends');
const integration = await runBuffered({ name: 'test:integration (alone)', argv: ['npm', 'run', '-s', 'test:integration'] });
printEnded(integration);

console.log('lint, the type check and test:unit run beside the e2e at nice 19; their report follows when they end');
const beside = runBuffered({
  name: 'lint, typecheck and test:unit (beside the e2e)',
  argv: ['nice', '-n', '19', 'sh', '-c', 'npm run -s lint && npm run -s typecheck && npm run -s test:unit'],
}).then((ended) => {
  printEnded(ended);
  return ended;
});
const e2e = new Promise<boolean>((done) => {
  const child = spawn('npm', ['run', '-s', 'test:e2e'], { stdio: 'inherit' });
  child.on('error', () => done(false));
  child.on('close', (code) => done(code === 0));
});
const [besideEnded, e2eOk]: [Ended, boolean] = await Promise.all([beside, e2e]);
// Again at the very end: their reports came before or in the middle of the e2e's, and a log cut to its head and
// tail loses them.
for (const ended of [integration, besideEnded]) if (!ended.ok) console.log(`\n${failureDigest(ended.job.name, ended.output)}`);
const verdict = (ok: boolean) => (ok ? 'passed' : 'FAILED');
console.log(`\nci: integration ${verdict(integration.ok)}, unit and checks ${verdict(besideEnded.ok)}, e2e ${verdict(e2eOk)}`);
process.exit(integration.ok && besideEnded.ok && e2eOk ? 0 : 1);
