import { formatBytes } from '../etcd/maintenance.ts';

/**
 * What the members' agents record of their scheduled defragmentations, in etcd (one key per member,
 * written by agent/etcd-kvm-agent.py), and the status line made of them.
 */

export const DEFRAG_RECORD_PREFIX = 'etcd-kvm/defrag/last/';

export interface DefragRun {
  member: string;
  time: string;
  seconds: number;
  before: { size: number; in_use: number };
  after: { size: number | null; in_use: number | null };
  leadership_moved_to?: string;
}

/** A record as the agent wrote it, or undefined (an operator's hand, another tool). */
export function parseDefragRun(text: string): DefragRun | undefined {
  try {
    const run = JSON.parse(text) as Partial<DefragRun>;
    return typeof run.time === 'string' && !Number.isNaN(Date.parse(run.time)) && run.before && run.after ? (run as DefragRun) : undefined;
  } catch {
    return undefined;
  }
}

const ago = (seconds: number) =>
  seconds < 120
    ? `${Math.round(seconds)} s ago`
    : seconds < 7200
      ? `${Math.round(seconds / 60)} min ago`
      : `${(seconds / 3600).toFixed(1)} h ago`;

/** `defrag: etcd-1 3 min ago (1.2 MiB → 40 KiB), etcd-2 never, …`, members in the inventory's order. */
export function defragLine(records: Readonly<Record<string, string>>, members: readonly string[], at: Date): string {
  const parts = members.map((member) => {
    const text = records[member];
    if (text === undefined) return `${member} never`;
    const run = parseDefragRun(text);
    if (!run) return `${member} unreadable record`;
    const after = run.after.size === null ? '?' : formatBytes(run.after.size);
    const moved = run.leadership_moved_to ? `, leadership to ${run.leadership_moved_to}` : '';
    return `${member} ${ago((at.getTime() - Date.parse(run.time)) / 1000)} (${formatBytes(run.before.size)} → ${after}${moved})`;
  });
  return `defrag (scheduled): ${parts.join(', ')}`;
}
