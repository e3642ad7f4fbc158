import test from 'ava';
import { backupLine, judgeBackups, parseBackupRun, type BackupRun } from '../../tasks/backup/runs.ts';

const run = (finished: string, overrides: Partial<BackupRun> = {}): BackupRun => ({
  member: 'etcd-2',
  tick: finished.replace(/:\d\d(\.\d+)?Z$/, ':00Z'),
  started: finished,
  finished,
  object: `lab-${finished}.dump`,
  outcome: 'ok',
  revision: 42,
  size: 1000,
  period_seconds: 3600,
  ...overrides,
});
const NOW = new Date('2026-11-25T12:00:00Z');

const table: [string, BackupRun | undefined, BackupRun | undefined, { problems: RegExp[]; warnings: RegExp[] }][] = [
  ['none ever', undefined, undefined, { problems: [/no scheduled backup has succeeded yet/], warnings: [] }],
  ['fresh', run('2026-11-25T11:30:00Z'), run('2026-11-25T11:30:00Z'), { problems: [], warnings: [] }],
  ['just under two periods', run('2026-11-25T10:00:01Z'), undefined, { problems: [], warnings: [] }],
  [
    'over two periods',
    run('2026-11-25T09:59:00Z'),
    undefined,
    { problems: [/is 2\.0 h old .*more than two schedule periods \(2\.0 h\)/], warnings: [] },
  ],
  [
    'fresh, but the last run failed',
    run('2026-11-25T11:00:00Z'),
    run('2026-11-25T11:59:00Z', { outcome: 'failed', error: 'S3 PUT: HTTP 403' }),
    { problems: [], warnings: [/failed: S3 PUT: HTTP 403/] },
  ],
  ['unknown period: a day', run('2026-11-24T13:00:00Z', { period_seconds: null }), undefined, { problems: [], warnings: [] }],
  [
    'unknown period, over a day',
    run('2026-11-24T11:00:00Z', { period_seconds: null }),
    undefined,
    { problems: [/more than two/], warnings: [] },
  ],
];

for (const [title, success, last, expected] of table) {
  test(`backups judged: ${title}`, (t) => {
    const verdict = judgeBackups(success, last, NOW);
    t.is(verdict.problems.length, expected.problems.length, verdict.problems.join('; '));
    for (const [i, pattern] of expected.problems.entries()) t.regex(verdict.problems[i]!, pattern);
    t.is(verdict.warnings.length, expected.warnings.length, verdict.warnings.join('; '));
    for (const [i, pattern] of expected.warnings.entries()) t.regex(verdict.warnings[i]!, pattern);
    t.is(verdict.lastSuccess?.object ?? null, success?.object ?? null);
  });
}

test('the status line names the last success and its age', (t) => {
  t.is(
    backupLine(judgeBackups(run('2026-11-25T11:57:00Z'), undefined, NOW)),
    'backup: last success 3 min ago (2026-11-25T11:57:00Z) by etcd-2, revision 42, lab-2026-11-25T11:57:00Z.dump',
  );
  t.is(backupLine(judgeBackups(undefined, undefined, NOW)), 'backup: none has succeeded yet');
});

test('a record the agent did not write is refused', (t) => {
  t.deepEqual(parseBackupRun('{'), { invalid: 'not JSON' });
  t.regex((parseBackupRun('{"outcome":"ok"}') as { invalid: string }).invalid, /no finished time/);
  t.like(parseBackupRun(JSON.stringify(run('2026-11-25T11:57:00Z'))), { run: { member: 'etcd-2', revision: 42 } });
  // A failed run carries its error: still a record.
  t.like(parseBackupRun(JSON.stringify(run('2026-11-25T11:57:00Z', { outcome: 'failed', error: 'HTTP 403' }))), {
    run: { outcome: 'failed', error: 'HTTP 403' },
  });
});
