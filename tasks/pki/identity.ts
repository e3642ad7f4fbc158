import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { PUBLIC_FILE_MODE, readIfExists, writeFileAtomic } from '../core/files.ts';

/**
 * The cluster's identity towards its hypervisors: its name and a random ID made once, kept in the
 * state directory next to the CA (`cluster-id.json`). Every domain the tool defines is marked with
 * both (libvirt/ownership.ts), so a run never takes another cluster's VMs for its own.
 */
export interface ClusterIdentity {
  cluster: string;
  /** Absent until the pki step has made it (a dry-run of a new cluster). */
  id?: string;
  /**
   * Domains that an earlier version of the tool made for this cluster (titled "etcd member NAME of
   * cluster CLUSTER", no mark) are this cluster's: true when the identity was made for a state
   * directory that already held a CA, i.e. for a cluster deployed before domains were marked.
   */
  adoptsUnmarked: boolean;
}

interface StoredIdentity {
  id: string;
  created: string;
  adoptsUnmarked: boolean;
}

export const identityPath = (stateDir: string) => join(stateDir, 'cluster-id.json');

/** The stored identity, or undefined when none was made yet. A damaged file is an error, never replaced. */
export function readIdentity(stateDir: string, cluster: string): ClusterIdentity | undefined {
  const text = readIfExists(identityPath(stateDir));
  if (text === undefined) return undefined;
  let stored: Partial<StoredIdentity>;
  try {
    stored = JSON.parse(text) as Partial<StoredIdentity>;
  } catch {
    stored = {};
  }
  if (typeof stored.id !== 'string' || !/^[0-9a-f-]{36}$/.test(stored.id)) {
    throw new Error(
      `${identityPath(stateDir)} is damaged (no valid "id"); restore it from a copy of the state directory: ` +
        `the cluster's domains carry that ID, and the tool does not touch domains it cannot prove are its own`,
    );
  }
  return { cluster, id: stored.id, adoptsUnmarked: stored.adoptsUnmarked === true };
}

/** The migration is over: from now on only marked domains (and --adopt) are this cluster's. */
export function stopAdoptingUnmarked(stateDir: string): void {
  const stored = JSON.parse(readIfExists(identityPath(stateDir)) ?? '{}') as StoredIdentity;
  writeFileAtomic(identityPath(stateDir), `${JSON.stringify({ ...stored, adoptsUnmarked: false }, null, 2)}\n`, PUBLIC_FILE_MODE);
}

export function writeNewIdentity(stateDir: string, adoptsUnmarked: boolean): void {
  const stored: StoredIdentity = { id: randomUUID(), created: new Date().toISOString(), adoptsUnmarked };
  writeFileAtomic(identityPath(stateDir), `${JSON.stringify(stored, null, 2)}\n`, PUBLIC_FILE_MODE);
}
