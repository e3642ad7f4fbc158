/** The health sampler's answers (test/helpers/health-sampler.ts), judged: when fewer than two members were healthy, and for how long. */

export interface QuorumSample {
  /** When the sample began, ms since the epoch. */
  at: number;
  healthy: readonly string[];
}

/**
 * Each stretch of consecutive samples with fewer than two healthy members: from the first such sample to the next
 * sample with two or more (or the run's end, `to`).
 */
export function belowQuorum(samples: readonly QuorumSample[], to: number): { fromMs: number; forMs: number }[] {
  const stretches: { fromMs: number; forMs: number }[] = [];
  let start: number | undefined;
  for (const sample of samples) {
    if (sample.healthy.length < 2) start ??= sample.at;
    else if (start !== undefined) {
      stretches.push({ fromMs: start, forMs: sample.at - start });
      start = undefined;
    }
  }
  if (start !== undefined) stretches.push({ fromMs: start, forMs: to - start });
  return stretches;
}

/**
 * Longer than this below quorum is a quorum lost. A member the tool restarts is down for 5 s or more under TCG, so two
 * members down together lasts at least that. Shorter stretches were seen on runs that kept two members up: in the
 * 3.4 → 3.5 roll of lab-upgrade on 2026-11-29 22:38 (load 3–4), two samples 1.2 s apart, 2.4 s in all, in which every
 * member answered /health and only etcd-1 said healthy (/health also needs a leader and a quorum read within its
 * timeout); and once, in a clean-clone CI, a single sample with no member answering within the sampler's 2 s.
 */
export const QUORUM_LOST_AFTER_MS = 4_000;
