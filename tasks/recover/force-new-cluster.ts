import { rmSync } from 'node:fs';
import { setTimeout as delay } from 'node:timers/promises';
import { join } from 'node:path';
import { PRIVATE_FILE_MODE, readIfExists, writeFileAtomic } from '../core/files.ts';
import { commandLine } from '../core/shell.ts';
import type { EtcdClients } from '../etcd/client.ts';
import { memberStatus } from '../etcd/member-status.ts';
import type { Member } from '../inventory/model.ts';
import type { SshConnection } from '../remote/ssh.ts';
import { GUEST_PATHS } from '../render/etcd.ts';

/**
 * The member-side operations of a recovery from a survivor: etcd stopped where it runs, the survivor
 * started once with --force-new-cluster (a systemd drop-in under /run, which a reboot forgets, so a
 * killed recovery never leaves a member forcing a new cluster at every start), then started normally.
 * The state directory records the recovery before the first change (recovery.json), so that a run
 * killed at any point is finished by the next one from the same survivor.
 */

const DROP_IN = GUEST_PATHS.forceNewClusterDropIn;

export interface RecoveryRecord {
  from: string;
  raftIndex: string;
  revision: string;
  started: string;
  /**
   * What binds the record to one recovery: the cluster's ID (the state directory's identity) and the survivor's
   * etcd member ID. Absent from a record an earlier version wrote; resumePlan refuses such a record.
   */
  clusterId?: string;
  memberId?: string;
}

const recordPath = (stateDir: string) => join(stateDir, 'recovery.json');

export function readRecovery(stateDir: string): RecoveryRecord | undefined {
  const text = readIfExists(recordPath(stateDir));
  if (text === undefined) return undefined;
  const record = JSON.parse(text) as Partial<RecoveryRecord>;
  if (typeof record.from !== 'string')
    throw new Error(`${recordPath(stateDir)} is damaged (no "from"): delete it only if no recovery is under way`);
  return record as RecoveryRecord;
}

/** Private: it names what a recovery does to the members, for the operator who runs it. */
export const writeRecovery = (stateDir: string, record: RecoveryRecord) =>
  writeFileAtomic(recordPath(stateDir), `${JSON.stringify(record, null, 2)}\n`, PRIVATE_FILE_MODE);

export const recoveryDone = (stateDir: string) => rmSync(recordPath(stateDir), { force: true });

const sudoSh = (script: string) => ['sudo', 'sh', '-c', script];

export const stopEtcd = (ssh: SshConnection) => ssh.run(['sudo', 'systemctl', 'stop', 'etcd'], { timeoutMs: 120_000 });

/** A non-chosen survivor's data, moved aside on its own disk (never deleted): it rejoins empty. */
export const setAside = (ssh: SshConnection, dataDir: string, stamp: string) =>
  ssh.run([...sudoSh('if [ -d "$1/member" ]; then mv "$1/member" "$1/member.before-recover-$2"; fi'), 'sh', dataDir, stamp]);

export async function hasForceFlag(ssh: SshConnection): Promise<boolean> {
  return (await ssh.exec(['test', '-e', DROP_IN])).code === 0;
}

/** etcd started with --force-new-cluster: a cluster of this one member, with its data. */
export const startForcingNewCluster = (ssh: SshConnection) =>
  ssh.run(
    sudoSh(
      [
        `mkdir -p ${commandLine([DROP_IN.replace(/\/[^/]+$/, '')])}`,
        `printf '[Service]\\nEnvironment=ETCD_FORCE_NEW_CLUSTER=true\\n' > ${commandLine([DROP_IN])}`,
        'systemctl daemon-reload',
        'systemctl restart etcd',
      ].join(' && '),
    ),
    { timeoutMs: 300_000 },
  );

/** The flag gone and etcd started again as it always runs. */
export const startNormally = (ssh: SshConnection) =>
  ssh.run(sudoSh(`rm -f ${commandLine([DROP_IN])} && systemctl daemon-reload && systemctl restart etcd`), { timeoutMs: 300_000 });

/**
 * Until the member leads a cluster (of itself, right after the force: its status names itself as leader), or,
 * with `any`, until it knows a leader (a member of a cluster that others rejoined already).
 */
export async function untilLeading(
  clients: EtcdClients,
  member: Member,
  timeoutMs: number,
  leader: 'itself' | 'any' = 'itself',
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < deadline) {
    try {
      const status = await memberStatus(clients, member);
      if (leader === 'itself' ? status.leader === status.id : status.leader !== '0') return;
      last = `its leader is ${status.leader}`;
    } catch (error) {
      last = (error as Error).message.split('\n')[0]!;
    }
    await delay(2_000);
  }
  throw new Error(`${member.name} did not lead within ${timeoutMs / 1000} s (${last}): see journalctl -u etcd on it`);
}
