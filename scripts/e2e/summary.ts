/**
 * The e2e suite's time, from the spans test/helpers/timing.ts records: every scenario and set-up sorted by
 * duration, the longest first, then each file's total, lab:up, lab:down and cold deploy.
 */

/** Where the spans go: the variable `npm run test:e2e` sets, or the default path (under the repository's ignored .etcd-kvm/). */
export const TIMINGS_ENV = 'ETCD_KVM_E2E_TIMINGS';
export const DEFAULT_TIMINGS_PATH = '.etcd-kvm/e2e-timings.jsonl';

export type SpanKind = 'lab:up' | 'lab:down' | 'lab:clear' | 'cold deploy' | 'scenario';

export interface Span {
  /** The test file's name, e.g. lab-deploy.test.ts. */
  file: string;
  kind: SpanKind;
  title: string;
  /** When it began, in ms since the epoch: a file's time is from its first span's start to its last span's end. */
  start: number;
  ms: number;
  /** Set when the work threw or its test had failed by its end. */
  failed?: true;
}

export const parseSpans = (text: string): Span[] =>
  text
    .split('\n')
    .filter((line) => line.trim())
    .map((line) => JSON.parse(line) as Span);

/** 83_400 ms → "1 min 23 s"; under a minute "23.4 s". */
export function duration(ms: number): string {
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const seconds = Math.round(ms / 1000);
  return `${Math.floor(seconds / 60)} min ${String(seconds % 60).padStart(2, '0')} s`;
}

const sum = (spans: readonly Span[]) => spans.reduce((total, span) => total + span.ms, 0);

/** From the first span's start to the last one's end (spans nest: a cold deploy runs inside a scenario). */
const extent = (spans: readonly Span[]) =>
  spans.length ? Math.max(...spans.map((span) => span.start + span.ms)) - Math.min(...spans.map((span) => span.start)) : 0;

const fileName = (span: Span) => span.file.replace(/\.test\.ts$/, '');

/** A set-up's kind before its title ("[lab:up] "); a scenario's title stands alone. */
const kindLabel = (span: Span) => (span.kind === 'scenario' ? '' : `[${span.kind}] `);

const shorten = (title: string, width: number) => (title.length > width ? `${title.slice(0, width - 1)}…` : title);

/**
 * The summary printed after ava's own report: every span by duration, then per file (lab:up, lab:down with
 * lab:clear, and the cold deploy summed), then the whole time.
 */
export function timingSummary(spans: readonly Span[], wallMs: number): string {
  const files = [...new Set(spans.map((span) => span.file))];
  const ofKind = (file: string, kind: SpanKind) => spans.filter((span) => span.file === file && span.kind === kind);
  const perFile = files
    .map((file) => ({
      file,
      total: extent(spans.filter((span) => span.file === file)),
      up: sum(ofKind(file, 'lab:up')),
      down: sum([...ofKind(file, 'lab:down'), ...ofKind(file, 'lab:clear')]),
      cold: sum(ofKind(file, 'cold deploy')),
      scenarios: ofKind(file, 'scenario').length,
    }))
    .sort((a, b) => b.total - a.total);
  const byDuration = [...spans]
    .sort((a, b) => b.ms - a.ms)
    .map(
      (span) =>
        `${duration(span.ms).padStart(11)}  ${fileName(span).padEnd(16)}  ${span.failed ? 'FAILED ' : ''}${kindLabel(span)}${shorten(span.title, 110)}`,
    );
  const failed = spans.filter((span) => span.failed);
  // The file table and the whole time last: a log cut to its head and tail (CI's is) still shows them.
  const lines = [
    '',
    'by duration:',
    ...byDuration,
    '',
    'file                        total        lab:up  down/clr  cold deploy  scenarios',
    ...perFile.map(
      (row) =>
        `${row.file.padEnd(26)}  ${duration(row.total).padStart(11)}  ${duration(row.up).padStart(8)}  ${duration(row.down).padStart(8)}  ${duration(row.cold).padStart(11)}  ${String(row.scenarios).padStart(9)}`,
    ),
    '',
    `e2e time: ${duration(wallMs)} in all`,
    // Named in full, once more at the very end: in a long log they are what a reader looks for first.
    ...(failed.length ? ['', 'failed:', ...failed.map((span) => `  ${fileName(span)} › ${kindLabel(span)}${span.title}`)] : []),
  ];
  return lines.join('\n');
}

/** ava's closing lines ("62 tests passed", "1 test failed", "2 known failures", …), from the end of its output. */
export function avaClosingLines(output: string): string[] {
  const lines = output
    // ava colours its lines when it may.
    .replace(/\u001b\[[0-9;]*m/g, '')
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean);
  const closing = /^\d+ (tests? |hooks? |known failures?$|unhandled rejections?$|uncaught exceptions?$|previous failures? )/;
  const found: string[] = [];
  for (let i = lines.length - 1; i >= 0 && found.length < 8; i--) {
    if (closing.test(lines[i]!)) found.unshift(lines[i]!);
    else if (found.length) break;
  }
  return found;
}
