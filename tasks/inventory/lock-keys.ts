/**
 * The keys in etcd that keep changes to a cluster apart, named in one place: the tool's runs take the run
 * lock (etcd/run-lock.ts), the members' agent its defragmentation lock (agent/etcd-kvm-agent.py, which
 * is given both names in its configuration). Each takes its own only while the other is absent, in one
 * transaction, so a deploy's roll and a scheduled defragmentation never run at once.
 */

/** Where the runs' locks live, one key per cluster. */
export const RUN_LOCK_PREFIX = 'etcd-kvm/run-lock/';
export const runLockKey = (cluster: string): string => `${RUN_LOCK_PREFIX}${cluster}`;
/** The last acquisition's holder, kept (no lease): its revision moves with every acquisition. */
export const runLockEpochKey = (cluster: string): string => `etcd-kvm/run-lock-epoch/${cluster}`;
/** The scheduled defragmentation's lock: the member defragmenting, on a lease its agent keeps alive. */
export const DEFRAG_LOCK_KEY = 'etcd-kvm/defrag/lock';
/**
 * A run's finding that the members' data differ (verify/consistency.ts): while it stands, every deploy refuses its first
 * change (until --accept-mismatch), and status names it.
 */
export const MISMATCH_KEY = 'etcd-kvm/consistency/mismatch';
