import test from 'ava';
import { failureDigest } from '../../scripts/test/jobs.ts';

test("a failed job's digest: ava's failed tests by name, then the output's last lines, colours taken off", (t) => {
  const output = [
    '  ✔ etcd-cluster › a member joins (3s)',
    '  \u001b[31m✘\u001b[39m [fail]: etcd-cluster › password mode: users converge Timed out',
    ...Array.from({ length: 50 }, (_, i) => `line ${i}`),
    '  1 test failed',
  ].join('\n');
  const digest = failureDigest('npm test', output, 5).split('\n');
  t.deepEqual(digest, [
    '===== npm test FAILED: its failed tests, then its last 5 lines =====',
    '  ✘ [fail]: etcd-cluster › password mode: users converge Timed out',
    '…',
    'line 46',
    'line 47',
    'line 48',
    'line 49',
    '  1 test failed',
  ]);
});
