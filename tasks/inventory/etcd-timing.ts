/**
 * etcd's own defaults for its raft timing, in milliseconds (etcd's tuning guide): the schema's defaults, and what the render leaves unsaid.
 */
export const ETCD_DEFAULT_HEARTBEAT_MS = 100;
export const ETCD_DEFAULT_ELECTION_MS = 1000;
