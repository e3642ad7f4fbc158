import { retryWhile } from '../core/retry.ts';

/**
 * Errors a young or busy cluster gives for a moment and then stops giving: a leader election in
 * progress, a request that timed out while raft caught up. Measured in the lab (TCG): a cluster
 * reported healthy may still change leader once in the following seconds.
 */
const TRANSIENT = /leader changed|no leader|not leader|UNAVAILABLE|DEADLINE_EXCEEDED|request timed out|too many requests/i;

export const isTransient = (error: unknown): boolean => error instanceof Error && TRANSIENT.test(error.message);

/** Runs `call` again while it fails transiently, for at most `windowMs`; any other error is thrown at once. */
export const retryTransient = <T>(call: () => Promise<T>, windowMs = 60_000, pauseMs = 1_000): Promise<T> =>
  retryWhile(call, isTransient, { windowMs, pauseMs });
