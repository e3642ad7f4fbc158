import test from 'ava';
import { avaClosingLines, duration, parseSpans, timingSummary, type Span } from '../../scripts/e2e/summary.ts';

const T0 = Date.parse('2026-11-27T20:00:00Z');
const spans: Span[] = [
  { file: 'lab-deploy.test.ts', kind: 'lab:up', title: 'lab:up', start: T0, ms: 40_000 },
  // The cold deploy runs inside the first scenario: the file's time counts it once.
  { file: 'lab-deploy.test.ts', kind: 'scenario', title: 'a cold deploy creates a cluster', start: T0 + 40_000, ms: 152_000 },
  { file: 'lab-deploy.test.ts', kind: 'cold deploy', title: 'deploy', start: T0 + 41_000, ms: 150_000 },
  { file: 'lab-deploy.test.ts', kind: 'scenario', title: 'ten runs', start: T0 + 192_500, ms: 61_500 },
  { file: 'lab-macvtap.test.ts', kind: 'lab:up', title: 'lab:up', start: T0 + 300_000, ms: 30_000 },
  { file: 'lab-macvtap.test.ts', kind: 'scenario', title: 'macvtap members', start: T0 + 330_000, ms: 100_000 },
  { file: 'lab-macvtap.test.ts', kind: 'lab:clear', title: 'lab:clear', start: T0 + 430_000, ms: 3_000 },
  { file: 'lab-macvtap.test.ts', kind: 'lab:down', title: 'lab:down', start: T0 + 433_000, ms: 6_000 },
];

test('durations: seconds with a tenth under a minute, minutes and whole seconds above', (t) => {
  t.is(duration(23_449), '23.4 s');
  t.is(duration(60_000), '1 min 00 s');
  t.is(duration(83_400), '1 min 23 s');
  t.is(duration(3_994_000), '66 min 34 s');
});

test('the spans file: one JSON object a line, blank lines ignored', (t) => {
  t.deepEqual(parseSpans(`${spans.map((span) => JSON.stringify(span)).join('\n')}\n\n`), spans);
});

test('the summary: every span longest first, then files by their total with lab:up, lab:down and lab:clear together, and cold deploy, the whole time last', (t) => {
  const lines = timingSummary(spans, 700_000).split('\n');
  // Last, so a log cut to its head and tail still shows them.
  t.is(lines.at(-1), 'e2e time: 11 min 40 s in all', lines.join('\n'));
  t.true(lines.indexOf('by duration:') < lines.findIndex((line) => line.startsWith('file ')));
  const fileRows = lines.filter((line) => /^lab-\S+\.test\.ts /.test(line)).map((line) => line.split(/\s{2,}/));
  t.deepEqual(fileRows, [
    ['lab-deploy.test.ts', '4 min 14 s', '40.0 s', '0.0 s', '2 min 30 s', '2'],
    ['lab-macvtap.test.ts', '2 min 19 s', '30.0 s', '9.0 s', '0.0 s', '1'],
  ]);
  const byDuration = lines
    .slice(lines.indexOf('by duration:') + 1, lines.findIndex((line) => line.startsWith('file ')) - 1)
    .map((line) => line.trim().split(/\s{2,}/));
  t.deepEqual(byDuration, [
    ['2 min 32 s', 'lab-deploy', 'a cold deploy creates a cluster'],
    ['2 min 30 s', 'lab-deploy', '[cold deploy] deploy'],
    ['1 min 40 s', 'lab-macvtap', 'macvtap members'],
    ['1 min 02 s', 'lab-deploy', 'ten runs'],
    ['40.0 s', 'lab-deploy', '[lab:up] lab:up'],
    ['30.0 s', 'lab-macvtap', '[lab:up] lab:up'],
    ['6.0 s', 'lab-macvtap', '[lab:down] lab:down'],
    ['3.0 s', 'lab-macvtap', '[lab:clear] lab:clear'],
  ]);
});

test('a failed span: marked in the list by duration, and named in full once more after the whole time', (t) => {
  const failed: Span = { ...spans[3]!, failed: true };
  const lines = timingSummary([...spans.slice(0, 3), failed, ...spans.slice(4)], 700_000).split('\n');
  t.true(
    lines.some((line) => /^\s+1 min 02 s\s+lab-deploy\s+FAILED ten runs$/.test(line)),
    lines.join('\n'),
  );
  t.deepEqual(lines.slice(lines.indexOf('e2e time: 11 min 40 s in all') + 1), ['', 'failed:', '  lab-deploy › ten runs']);
  t.false(timingSummary(spans, 700_000).includes('FAILED'));
});

test("ava's closing lines, colours taken off, from the end of its output only", (t) => {
  const output = [
    '  ✔ lab-deploy › a cold deploy (2m 30s)',
    '  ─',
    '',
    '  2 tests passed in an earlier file',
    '  lab-deploy › ten runs',
    '  \u001b[31m1 test failed\u001b[39m',
    '  \u001b[32m61 tests passed\u001b[39m',
    '  1 known failure',
    '',
  ].join('\n');
  t.deepEqual(avaClosingLines(output), ['1 test failed', '61 tests passed', '1 known failure']);
  t.deepEqual(avaClosingLines('  ✘ [fail]: x\n  1 hook failed\n\n'), ['1 hook failed']);
  t.deepEqual(avaClosingLines('no closing line here\n'), []);
});
