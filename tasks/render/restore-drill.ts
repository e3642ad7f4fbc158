import { MiB } from '../core/limits.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import { GUEST_PATHS } from './etcd.ts';
import { etcdToolsDir, snapshotRestoreProgram } from './etcd-release.ts';

/**
 * What a restore drill runs in a member: the restore of a backup into a scratch directory with the member's
 * own etcd tools, and the throwaway etcd that serves the restored copy on the member's loopback. One
 * description for both drills: `backup --verify` sends these commands over SSH (drill/plan.ts), and the
 * members' agents get them in their configuration for the scheduled drills (guest/member-agent.ts).
 */

/** The throwaway etcd's loopback ports (outside etcd's usual 2379/2380). */
export const DRILL_CLIENT_PORT = 32379;
const DRILL_PEER_URL = 'http://127.0.0.1:32380';
const DRILL_NAME = 'restore-drill';

/** On the member's data disk, beside etcd's data: the disk meant to hold a database of this size. */
export const drillScratch = (inventory: Inventory) => `${inventory.etcd.dataDir}/.etcd-kvm-restore-drill`;

/**
 * The data disk's free space a drill needs: the snapshot file, the database it restores into (its size
 * again), and the write-ahead log etcd preallocates (64 MiB), with room to spare.
 */
export const drillNeedsBytes = (snapshotBytes: number) => 2 * snapshotBytes + 96 * MiB;

/** How long the throwaway etcd may take to answer once started: a first start under emulation takes seconds. */
export const DRILL_ETCD_WINDOW_MS = 120_000;

/** Where the throwaway etcd answers: the member's loopback, never its network. */
export const DRILL_CLIENT_URL = `https://127.0.0.1:${DRILL_CLIENT_PORT}`;

/** The restore of `<scratch>/snapshot.db` into `<scratch>/data` with the member's own etcd tools (their hash check included). */
export function drillRestoreArgv(inventory: Inventory, member: Member): string[] {
  const scratch = drillScratch(inventory);
  return [
    ...snapshotRestoreProgram(inventory, member),
    'snapshot',
    'restore',
    `${scratch}/snapshot.db`,
    '--name',
    DRILL_NAME,
    '--initial-cluster',
    `${DRILL_NAME}=${DRILL_PEER_URL}`,
    '--initial-advertise-peer-urls',
    DRILL_PEER_URL,
    '--data-dir',
    `${scratch}/data`,
  ];
}

/** The throwaway etcd on the restored copy: the member's etcd, its server certificate, the cluster's client CA, loopback only. */
export function drillEtcdArgv(inventory: Inventory, member: Member): string[] {
  return [
    `${etcdToolsDir(inventory, member)}/etcd`,
    `--name=${DRILL_NAME}`,
    `--data-dir=${drillScratch(inventory)}/data`,
    `--listen-client-urls=${DRILL_CLIENT_URL}`,
    `--advertise-client-urls=${DRILL_CLIENT_URL}`,
    `--listen-peer-urls=${DRILL_PEER_URL}`,
    `--initial-advertise-peer-urls=${DRILL_PEER_URL}`,
    `--initial-cluster=${DRILL_NAME}=${DRILL_PEER_URL}`,
    `--cert-file=${GUEST_PATHS.serverCert}`,
    `--key-file=${GUEST_PATHS.serverKey}`,
    `--quota-backend-bytes=${inventory.etcd.spaceQuota}`,
    ...(inventory.etcd.clientCertAuth ? ['--client-cert-auth', `--trusted-ca-file=${GUEST_PATHS.caCert}`] : []),
  ];
}
