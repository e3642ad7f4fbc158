/**
 * What the members' backup agent records of its runs, in etcd (agent/etcd-kvm-agent.py writes
 * them), and what status makes of them. In etcd, so that any member's answer is the cluster's and
 * no control node needs to have taken the backup; under the tool's reserved prefix.
 */

export const BACKUP_RECORD_PREFIX = 'etcd-kvm/backup/last-';
export const BACKUP_RECORD_KEYS = {
  lastRun: `${BACKUP_RECORD_PREFIX}run`,
  lastSuccess: `${BACKUP_RECORD_PREFIX}success`,
  /** A restore drill's (drill/run.ts): the last one, and the last one that verified. */
  lastDrill: `${BACKUP_RECORD_PREFIX}drill`,
  lastVerified: `${BACKUP_RECORD_PREFIX}verified`,
} as const;

export interface BackupRun {
  member: string;
  /** The tick: the schedule's elapse, to the second, as the members claimed it. */
  tick: string;
  started: string;
  finished: string;
  object: string;
  outcome: 'ok' | 'failed';
  revision?: number;
  size?: number;
  error?: string;
  /** Seconds between two ticks of the schedule, as systemd computed them on the member; null if it could not. */
  period_seconds: number | null;
}

/** A record as the agent wrote it, or why it is not one (an operator's hand, another tool). */
export function parseBackupRun(text: string): { run: BackupRun } | { invalid: string } {
  try {
    const run = JSON.parse(text) as Partial<BackupRun>;
    if (typeof run.finished !== 'string' || Number.isNaN(Date.parse(run.finished)) || (run.outcome !== 'ok' && run.outcome !== 'failed'))
      return { invalid: 'not a record the agent writes (no finished time or outcome)' };
    return { run: run as BackupRun };
  } catch {
    return { invalid: 'not JSON' };
  }
}

export interface BackupVerdict {
  /** The last successful backup, as the status line shows it; null when there is none. */
  lastSuccess: (BackupRun & { ageSeconds: number }) | null;
  problems: string[];
  warnings: string[];
}

export const ago = (seconds: number) =>
  seconds < 120 ? `${Math.round(seconds)} s` : seconds < 7200 ? `${Math.round(seconds / 60)} min` : `${(seconds / 3600).toFixed(1)} h`;

/**
 * The cluster is degraded when no backup succeeded within two schedule periods (or none ever did, once
 * a period has passed since the schedule was turned on; without a known period, a day); a failed
 * last run is a warning with the agent's reason (the member's journal has the rest).
 */
export function judgeBackups(lastSuccess: BackupRun | undefined, lastRun: BackupRun | undefined, now: Date): BackupVerdict {
  const problems: string[] = [];
  const warnings: string[] = [];
  if (lastRun?.outcome === 'failed')
    warnings.push(
      `the last scheduled backup (tick ${lastRun.tick}, on ${lastRun.member}) failed: ${lastRun.error ?? 'no reason recorded'}`,
    );
  if (!lastSuccess) {
    problems.push(
      'no scheduled backup has succeeded yet (etcd-kvm/backup/last-success is absent): see journalctl -u etcd-kvm-backup on a member',
    );
    return { lastSuccess: null, problems, warnings };
  }
  const ageSeconds = Math.max(0, (now.getTime() - Date.parse(lastSuccess.finished)) / 1000);
  const limit = 2 * (lastSuccess.period_seconds ?? 43_200);
  if (ageSeconds > limit)
    problems.push(
      `the last successful backup is ${ago(ageSeconds)} old (${lastSuccess.object}), ` +
        `more than two schedule periods (${ago(limit)}): see journalctl -u etcd-kvm-backup on a member`,
    );
  return { lastSuccess: { ...lastSuccess, ageSeconds }, problems, warnings };
}

/** The status line: the last success, its age, where it is. */
export function backupLine(verdict: Pick<BackupVerdict, 'lastSuccess'>): string {
  const last = verdict.lastSuccess;
  if (!last) return 'backup: none has succeeded yet';
  return (
    `backup: last success ${ago(last.ageSeconds)} ago (${last.finished.slice(0, 19)}Z) ` +
    `by ${last.member}, revision ${last.revision ?? '?'}, ${last.object}`
  );
}
