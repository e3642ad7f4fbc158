/**
 * What clients saw during a fault drill, and whether it is a history etcd promises: every acknowledged
 * write kept, and every read linearizable. The drill's load makes the check exact rather than a search
 * (etcd's robustness suite hands a general history to porcupine): one writer, one write at a time, each
 * a transaction that creates its own key `w/<n>` and sets the register `reg` to n, with n counting up;
 * readers read the register. A register whose writes count up from one sequential writer is linearizable
 * exactly when every read returns a value that was written no later than the read returned, no lower
 * than any write acknowledged before the read began, and no lower than any read that returned before it
 * began; and a value read, or a write acknowledged, is still there at the end.
 *
 * Except a value whose write failed: failed is not refused, and such a write may take effect at any time after it
 * began, even after later writes were acknowledged (a proposal sent through a member whose link was cut reaches the
 * leader when the link is back, and sets the register back to its n). A read of it is checked only for having begun
 * after the write did; the writes and reads around it bound nothing (Jepsen and porcupine give such an operation no
 * end). The fault drill of 2026-11-29 21:23 read 143 after write 154 was acknowledged, write 143 having timed out
 * through etcd-3 while its link was cut: legal, and refused as stale before.
 */

/** One client operation, timed on the control node's monotonic clock (milliseconds). */
export interface Operation {
  kind: 'write' | 'read';
  /** A write's n; a read's answer (0: the register was not there yet). Absent for a read that failed. */
  value?: number;
  /** The member whose endpoint took it. */
  member: string;
  invokedMs: number;
  returnedMs: number;
  /** Acknowledged (a write) or answered (a read); a failed write may or may not have been applied. */
  ok: boolean;
  error?: string;
}

/** The keys `w/<n>` found at the end, by n, with their values. */
export type FinalWrites = ReadonlyMap<number, string>;

export interface HistoryProblem {
  kind: 'lost-write' | 'stale-read' | 'future-read' | 'read-went-back' | 'seen-then-lost' | 'wrong-value';
  /** What happened, in words, with the operation's times and members. */
  says: string;
}

export interface HistoryVerdict {
  writes: { acknowledged: number; failed: number };
  reads: { answered: number; failed: number };
  problems: HistoryProblem[];
}

const at = (op: Operation) => `${op.member}, ${(op.invokedMs / 1000).toFixed(2)}–${(op.returnedMs / 1000).toFixed(2)} s`;

/** Every acknowledged write, and every value a read saw, is in the final state with its own value. */
function durability(ops: readonly Operation[], final: FinalWrites): HistoryProblem[] {
  const problems: HistoryProblem[] = [];
  for (const op of ops) {
    if (!op.ok || op.value === undefined || op.value === 0) continue;
    const kept = final.get(op.value);
    if (kept === undefined)
      problems.push(
        op.kind === 'write'
          ? { kind: 'lost-write', says: `write ${op.value}, acknowledged by ${at(op)}, is gone` }
          : { kind: 'seen-then-lost', says: `write ${op.value}, read by ${at(op)}, is gone` },
      );
    else if (op.kind === 'write' && kept !== String(op.value))
      problems.push({ kind: 'wrong-value', says: `write ${op.value} holds ${JSON.stringify(kept)}` });
  }
  return problems;
}

/** Each answered read against the writes and the reads that completed before it began. */
function linearizability(ops: readonly Operation[]): HistoryProblem[] {
  const writes = ops.filter((op) => op.kind === 'write');
  const invoked = new Map(writes.map((op) => [op.value!, op.invokedMs]));
  // The empty register (0) is as if written and acknowledged before everything.
  const bounded = new Set([0, ...writes.filter((op) => op.ok).map((op) => op.value!)]);
  const reads = ops.filter((op) => op.kind === 'read' && op.ok).sort((a, b) => a.returnedMs - b.returnedMs);
  const problems: HistoryProblem[] = [];
  for (const read of reads) {
    const value = read.value ?? 0;
    const acknowledgedBefore = Math.max(0, ...writes.filter((w) => w.ok && w.returnedMs < read.invokedMs).map((w) => w.value!));
    const readBefore = Math.max(0, ...reads.filter((r) => r.returnedMs < read.invokedMs).map((r) => r.value ?? 0));
    const startedAt = invoked.get(value);
    if (value !== 0 && (startedAt === undefined || startedAt > read.returnedMs))
      problems.push({ kind: 'future-read', says: `read by ${at(read)}, returned ${value}, not written before it returned` });
    else if (!bounded.has(value)) continue;
    else if (value < acknowledgedBefore)
      problems.push({
        kind: 'stale-read',
        says: `read by ${at(read)}, returned ${value}, but write ${acknowledgedBefore} was acknowledged before it began`,
      });
    else if (value < readBefore)
      problems.push({
        kind: 'read-went-back',
        says: `read by ${at(read)}, returned ${value}, but a read that ended before it began returned ${readBefore}`,
      });
  }
  return problems;
}

export function checkHistory(ops: readonly Operation[], final: FinalWrites): HistoryVerdict {
  const count = (kind: Operation['kind'], ok: boolean) => ops.filter((op) => op.kind === kind && op.ok === ok).length;
  return {
    writes: { acknowledged: count('write', true), failed: count('write', false) },
    reads: { answered: count('read', true), failed: count('read', false) },
    problems: [...durability(ops, final), ...linearizability(ops)],
  };
}

/**
 * The longest time clients went without an acknowledged write inside [fromMs, toMs]: what a client that
 * fails over from member to member waited, at worst, while a fault was on and the cluster settled.
 */
export function longestWriteGapMs(ops: readonly Operation[], fromMs: number, toMs: number): number {
  const acknowledged = ops
    .filter((op) => op.kind === 'write' && op.ok && op.returnedMs >= fromMs && op.returnedMs <= toMs)
    .map((op) => op.returnedMs)
    .sort((a, b) => a - b);
  const points = [fromMs, ...acknowledged, toMs];
  return Math.max(0, ...points.slice(1).map((point, i) => point - points[i]!));
}
