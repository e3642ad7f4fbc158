import { MiB } from '../core/limits.ts';
import { commandLine } from '../core/shell.ts';
import type { HashKV } from '../etcd/hash-kv.ts';
import { wholeCluster, type MemberAnswer } from '../etcd/health.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import { drillEtcdArgv, drillNeedsBytes, drillRestoreArgv, drillScratch } from '../render/restore-drill.ts';
import type { BackupManifest } from '../backup/manifest.ts';

/**
 * A restore drill: what proves a backup restores, decided here and carried out by run.ts. One
 * member (a voting follower of a healthy cluster, never the leader) restores the snapshot into a
 * scratch directory on its data disk with the etcd it runs, starts a throwaway etcd on it that
 * listens on the member's loopback only (its own TLS certificate, the cluster's client CA), and the
 * tool reads that etcd through the member's SSH: its revision, its keys, and its HashKV at the
 * revision the backup's manifest records, which must equal the HashKV recorded when the backup was
 * made. Then the scratch copy goes. The members' own etcd is never touched.
 */

/** The throwaway etcd's transient unit (its commands: render/restore-drill.ts). */
export const DRILL_UNIT = 'etcd-kvm-restore-drill';

/** What a member answers when asked whether it can take the drill. */
export type DrillCandidate = MemberAnswer;

/**
 * The member that restores: the one named, or the first voting follower in inventory order. Only while
 * the cluster is whole (etcd/health.ts, wholeCluster: every member answers, all name one leader, no alarm, no
 * learner): a drill adds load, and a cluster that is short of a member has none to spare. Never the leader, whose
 * slowness every write would feel.
 */
export function drillMember(candidates: readonly DrillCandidate[], named?: string): { member: string } | { refused: string } {
  const { unwhole, leaderId } = wholeCluster(candidates);
  if (unwhole.length > 0) return { refused: `a restore drill runs only on a healthy cluster, and this one is not: ${unwhole.join('; ')}` };
  const isLeader = (candidate: DrillCandidate) => 'id' in candidate.status && candidate.status.id === leaderId;
  if (named !== undefined) {
    const chosen = candidates.find((candidate) => candidate.name === named);
    if (!chosen) return { refused: `--member ${named} is not in the inventory` };
    if (isLeader(chosen)) return { refused: `--member ${named} is the leader: a drill runs on a follower (name another member)` };
    return { member: named };
  }
  const follower = candidates.find((candidate) => !isLeader(candidate));
  return follower ? { member: follower.name } : { refused: 'the cluster has no follower to run a drill on' };
}

export function roomVerdict(member: string, availableBytes: number, snapshotBytes: number): string | undefined {
  const need = drillNeedsBytes(snapshotBytes);
  if (availableBytes >= need) return undefined;
  const mib = (bytes: number) => `${Math.ceil(bytes / MiB)} MiB`;
  return (
    `${member}'s data disk has ${mib(availableBytes)} free, and a drill of this ${mib(snapshotBytes)} snapshot ` +
    `needs ${mib(need)}: nothing was restored (grow the data disk, or run the drill on another member with --member)`
  );
}

/** Stops a drill's etcd and removes its scratch copy: before a drill (a killed run's leftovers) and after it, whatever happened. */
export function drillCleanupScript(inventory: Inventory): string {
  return (
    `systemctl stop ${DRILL_UNIT} 2>/dev/null; systemctl reset-failed ${DRILL_UNIT} ` +
    `2>/dev/null; rm -rf ${commandLine([drillScratch(inventory)])}`
  );
}

/** Cleans up, then prints the data disk's free bytes: one process spawn in the guest for both. */
export function drillPrepareScript(inventory: Inventory): string {
  return `${drillCleanupScript(inventory)}; df -B1 --output=avail ${commandLine([inventory.etcd.dataDir])} | tail -n 1`;
}

/** Writes standard input (the snapshot) where the drill restores it from, readable by root alone. */
export function drillUploadScript(inventory: Inventory): string {
  const scratch = drillScratch(inventory);
  return `umask 077 && mkdir -p ${commandLine([scratch])} && cat > ${commandLine([`${scratch}/snapshot.db`])}`;
}

/**
 * Restores the uploaded snapshot, removes the file, and starts the throwaway etcd as the etcd user in a
 * transient unit at a low CPU and I/O weight. (The members' agents run the same two commands on their
 * schedule: render/guest/member-agent.ts hands them over in the agent's configuration.)
 */
export function drillStartScript(inventory: Inventory, member: Member): string {
  const scratch = drillScratch(inventory);
  const unit = [
    'systemd-run',
    `--unit=${DRILL_UNIT}`,
    '--property=User=etcd',
    '--property=CPUWeight=10',
    '--property=IOWeight=10',
    '--property=Nice=10',
    ...drillEtcdArgv(inventory, member),
  ];
  return [
    'set -e',
    commandLine(drillRestoreArgv(inventory, member)),
    commandLine(['rm', '-f', `${scratch}/snapshot.db`]),
    commandLine(['chown', '-R', 'etcd:etcd', scratch]),
    commandLine(unit),
  ].join('\n');
}

/** etcd's compact revision in words: -1 is a store never compacted. */
const compaction = (revision: number) => (revision < 0 ? 'never compacted' : `compacted at revision ${revision}`);

/** What the throwaway etcd answered. */
export interface RestoredFacts {
  revision: number;
  keys: number;
  /** Its HashKV at the manifest's revision (asked only when the manifest records one), or why not. */
  hashKV?: HashKV | { error: string };
}

export interface DrillVerdict {
  outcome: 'ok' | 'failed';
  /** One line each: what was shown, or what failed. */
  findings: string[];
}

/**
 * What the restored copy proves against the manifest: a revision at least the recorded one, and (version 2)
 * the HashKV recorded at backup time. A snapshot that is not this cluster's own (named explicitly) restores or
 * not, but proves nothing of this cluster: failed.
 */
export function judgeDrill(manifest: BackupManifest | undefined, restored: RestoredFacts, unauthenticated?: string): DrillVerdict {
  const findings = [`restored: revision ${restored.revision}, ${restored.keys} keys`];
  let ok = true;
  if (!manifest) return { outcome: 'failed', findings: [...findings, `not provably this cluster's: ${unauthenticated ?? 'no manifest'}`] };
  if (unauthenticated) {
    ok = false;
    findings.push(`not provably this cluster's: ${unauthenticated}`);
  }
  if (restored.revision < manifest.revision) {
    ok = false;
    findings.push(
      `its revision ${restored.revision} is below the manifest's ${manifest.revision}: not the snapshot the manifest describes`,
    );
  }
  const recorded = manifest.hashKV;
  const found = restored.hashKV;
  if (!recorded) findings.push('HashKV not compared: the manifest (version 1, made before drills) records none');
  else if (!found || 'error' in found) {
    ok = false;
    findings.push(`HashKV at revision ${manifest.revision} could not be read from the restored copy: ${found?.error ?? 'not asked'}`);
  } else if (found.compactRevision !== recorded.compactRevision)
    findings.push(
      `HashKV not compared: the member was ${compaction(recorded.compactRevision)} when it was hashed, ` +
        `the snapshot ${compaction(found.compactRevision)} (a compaction between the two)`,
    );
  else if (found.hash !== recorded.hash) {
    ok = false;
    findings.push(
      `HashKV at revision ${manifest.revision} is ${found.hash}, but ${recorded.hash} ` +
        `was recorded at backup time: the restored data is not what the cluster held`,
    );
  } else findings.push(`HashKV at revision ${manifest.revision} is ${found.hash}, as recorded at backup time`);
  return { outcome: ok ? 'ok' : 'failed', findings };
}
