import { ago } from '../backup/runs.ts';

/**
 * What a restore drill records in etcd (under the backup records' prefix, backup/runs.ts), and what
 * status makes of it.
 */

/** What a restore drill records (drill/run.ts). */
export interface DrillRecord {
  object: string;
  /** The member chosen to restore it (none did when the snapshot did not download intact). */
  member: string;
  finished: string;
  outcome: 'ok' | 'failed';
  /** What the restored copy held (absent when the snapshot did not download intact, and nothing was restored). */
  revision?: number;
  keys?: number;
  /** What it showed, or why it failed, a line each (plan.ts, judgeDrill). */
  findings: string[];
  /** Who drilled: "the control node" (`backup --verify`), or "its agent on schedule" (backup.verify, the member's agent). */
  by: string;
}

export function parseDrillRecord(text: string): DrillRecord | undefined {
  try {
    const record = JSON.parse(text) as Partial<DrillRecord>;
    const valid =
      typeof record.object === 'string' &&
      typeof record.member === 'string' &&
      typeof record.finished === 'string' &&
      !Number.isNaN(Date.parse(record.finished)) &&
      (record.outcome === 'ok' || record.outcome === 'failed') &&
      Array.isArray(record.findings);
    return valid ? (record as DrillRecord) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The status lines of the drills: the last verified backup and its age, and the last drill when it
 * failed (a warning: the backup it tried may not restore).
 */
export function drillLines(
  lastVerified: DrillRecord | undefined,
  lastDrill: DrillRecord | undefined,
  now: Date,
): { line: string; warnings: string[] } {
  const age = (record: DrillRecord) => ago(Math.max(0, (now.getTime() - Date.parse(record.finished)) / 1000));
  const line = lastVerified
    ? `backup drill: ${lastVerified.object} restored and verified ${age(lastVerified)} ago ` +
      `on ${lastVerified.member} by ${lastVerified.by} (revision ${lastVerified.revision}, ${lastVerified.keys} keys)`
    : 'backup drill: no backup verified by a restore drill yet (etcd-kvm backup --verify, or backup.verify on a schedule)';
  const warnings =
    lastDrill?.outcome === 'failed'
      ? [
          `the last restore drill (${lastDrill.object}, on ${lastDrill.member}, ` +
            `${age(lastDrill)} ago) failed: ${lastDrill.findings.join('; ')}`,
        ]
      : [];
  return { line, warnings };
}
