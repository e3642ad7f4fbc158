import test, { type ExecutionContext } from 'ava';
import { appendFileSync, mkdirSync } from 'node:fs';
import { basename, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DEFAULT_TIMINGS_PATH, TIMINGS_ENV, type Span, type SpanKind } from '../../scripts/e2e/summary.ts';

/**
 * Where the e2e suite spends its time: every scenario, every lab:up and lab:down and each file's cold
 * deploy appends one JSON line to the timings file; `scripts/e2e/run.ts` starts it empty, runs ava and
 * prints the lines as a summary sorted by duration. Each file runs in its own ava worker, one after
 * another, so appending whole lines never interleaves.
 */

/** The test file this worker runs (ava runs one file per worker). */
const currentFile = (): string => basename(fileURLToPath(test.meta.file));

function record(kind: SpanKind, title: string, start: number, ms: number, failed: boolean): void {
  const path = process.env[TIMINGS_ENV] ?? DEFAULT_TIMINGS_PATH;
  mkdirSync(dirname(path), { recursive: true });
  const span: Span = { file: currentFile(), kind, title, start, ms: Math.round(ms), ...(failed ? { failed } : {}) };
  appendFileSync(path, `${JSON.stringify(span)}\n`);
}

/**
 * Runs `work` (synchronous or not) and records how long it took, also when it throws; a throw, or `failedSoFar`
 * saying so at the end (an ava test's assertions), marks the span failed.
 */
export function timed<T>(kind: SpanKind, title: string, work: () => T, failedSoFar: () => boolean = () => false): T {
  const start = Date.now();
  const started = performance.now();
  const done = (threw: boolean) => record(kind, title, start, performance.now() - started, threw || failedSoFar());
  let result: T;
  try {
    result = work();
  } catch (error) {
    done(true);
    throw error;
  }
  if (result instanceof Promise)
    return result.then(
      (value) => {
        done(false);
        return value;
      },
      (error: unknown) => {
        done(true);
        throw error;
      },
    ) as T;
  done(false);
  return result;
}

/** A scenario of an e2e file: `test.serial` whose duration goes into the timings file. */
export function scenario(title: string, run: (t: ExecutionContext) => unknown): void {
  test.serial(title, (t) =>
    timed(
      'scenario',
      title,
      () => run(t),
      () => !t.passed,
    ),
  );
}
