import { spawn, type StdioOptions } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Identity, NAMESPACE, rootIdentity } from './lab-names.ts';

/**
 * A client writing through the lab's members while something changes them (test/helpers/writer.ts, in the lab's
 * namespace), and what it saw: the writes acknowledged and when, the errors it retried on another member. Free of
 * ava: the e2e's withWriter (test/helpers/lab-watch.ts) and `npm run bench:availability` both use it.
 */

/**
 * A helper script in its own process inside the lab namespace, given root's CA, certificate and key between `before` and `after`.
 * An observer (a writer, the health sampler) runs ahead of the guests in the CPU's queue (nice -10; the guests' QEMU
 * runs at 0), so that a gap it sees is the cluster's, not its own wait for a core: the sampler once went 11.7 s without a
 * sample during lab-upgrade's 3.4 → 3.5 roll (the run of 2026-12-03 17:20, load 3-4; a starved sampler is one cause that
 * fits, a request outliving its idle timeout another, which the sampler now bounds too). It takes little: a request each 0.5 s.
 */
export const asRootInLab = (script: string, before: string[], after: string[], stdio: StdioOptions, identity: Identity = rootIdentity) =>
  spawn(
    'nice',
    [
      '-n',
      '-10',
      'ip',
      'netns',
      'exec',
      NAMESPACE,
      process.execPath,
      '--import',
      'tsx',
      script,
      ...before,
      identity.caCert,
      identity.cert!,
      identity.key!,
      ...after,
    ],
    { stdio },
  );

/** The longest time between two consecutive acknowledgements, in ms (0 with fewer than two). */
export function longestGap(times: readonly number[]): number {
  const sorted = [...times].sort((a, b) => a - b);
  return sorted.slice(1).reduce((longest, at, i) => Math.max(longest, at - sorted[i]!), 0);
}

export interface WriterTally {
  /** Each acknowledged write: its key's number, and when (ms since the epoch). */
  acked: { key: string; at: number }[];
  /** Attempts that failed and were tried again through another member, as the writer said each (member, wait, error). */
  retries: string[];
  /** The longest time without an acknowledged write, in ms: what a client waited. */
  longestGapMs: number;
}

/** Whole lines only: what follows the last line break was cut short. */
const wholeLines = (text: string) => text.split('\n').slice(0, -1);

/** `ack N MS` lines as writer.ts prints them, and its error lines counted. */
export function tallied(acks: string, errors: string): WriterTally {
  const acked = wholeLines(acks).flatMap((line) => {
    const ack = /^ack (\d+) (\d+)$/.exec(line);
    return ack ? [{ key: ack[1]!, at: Number(ack[2]) }] : [];
  });
  const retries = wholeLines(errors).filter((line) => line.startsWith('write '));
  return { acked, retries, longestGapMs: longestGap(acked.map(({ at }) => at)) };
}

/**
 * Starts the writer on `prefix` through `endpoints`. Its output goes to files, not pipes: a caller that runs a
 * deploy synchronously reads no pipe meanwhile, a pipe's 64 KiB fill within minutes of acknowledgements, and a
 * writer blocked on its own output is a gap that is not the cluster's.
 */
export function startWriter(prefix: string, endpoints: string[], identity?: Identity): { stop: () => Promise<WriterTally> } {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-writer-'));
  const [out, err] = [join(dir, 'acks'), join(dir, 'errors')];
  const [outFd, errFd] = [openSync(out, 'w'), openSync(err, 'w')];
  const writer = asRootInLab('test/helpers/writer.ts', [prefix], endpoints, ['ignore', outFd, errFd], identity);
  const closed = new Promise((resolve) => writer.on('close', resolve));
  return {
    stop: async () => {
      writer.kill('SIGTERM');
      await closed;
      closeSync(outFd);
      closeSync(errFd);
      const tally = tallied(readFileSync(out, 'utf8'), readFileSync(err, 'utf8'));
      rmSync(dir, { recursive: true, force: true });
      return tally;
    },
  };
}
