import type { Etcd3 } from 'etcd3';
import { briefError } from '../core/errors.ts';
import { retryWhile } from '../core/retry.ts';
import { etcd3At, firstAnswering } from '../etcd/client.ts';
import { memberAnswers } from '../etcd/health.ts';
import { hashKV } from '../etcd/hash-kv.ts';
import type { ClusterSession } from '../etcd/session.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { SshConnection } from '../remote/ssh.ts';
import { Tunnel } from '../remote/tunnel.ts';
import {
  DRILL_UNIT,
  drillCleanupScript,
  drillMember,
  drillPrepareScript,
  drillStartScript,
  drillUploadScript,
  judgeDrill,
  roomVerdict,
  type DrillVerdict,
  type RestoredFacts,
} from './plan.ts';
import { BACKUP_RECORD_KEYS } from '../backup/runs.ts';
import { DRILL_CLIENT_PORT, DRILL_ETCD_WINDOW_MS } from '../render/restore-drill.ts';
import type { DrillRecord } from './record.ts';
import type { SnapshotFile } from '../backup/snapshot-file.ts';
import { SnapshotDamaged, type ChosenSnapshot, type SnapshotSource } from '../backup/source.ts';

/**
 * `etcd-kvm backup --verify`: a restore drill carried out (plan.ts decides each part). The snapshot is
 * downloaded and checked on the control node (SnapshotSource: its manifest, its seal, its SHA-256), then
 * restored in one member as plan.ts describes; the result is recorded in etcd, where `status` reads it.
 */

/** What the throwaway etcd answers, asked through a tunnel over the member's own SSH to its loopback. */
async function readRestored(
  ssh: SshConnection,
  member: Member,
  session: ClusterSession,
  hashAt: number | undefined,
): Promise<RestoredFacts> {
  const tunnel = await Tunnel.open(() => Promise.resolve(ssh), '127.0.0.1', DRILL_CLIENT_PORT);
  let client: Etcd3 | undefined;
  try {
    client = await etcd3At({ host: '127.0.0.1', port: tunnel.localPort }, member.name, session.root);
    const restored = client;
    // Up, and its own leader: a range needs one, and a single member elects itself a moment after it starts.
    const led = async () => {
      const status = await restored.maintenance.status({});
      if (status.leader !== status.header.member_id) throw new Error('it has not elected itself leader yet');
      return status;
    };
    const status = await retryWhile(led, () => true, { windowMs: DRILL_ETCD_WINDOW_MS, pauseMs: 1_000 }).catch(async (error: unknown) => {
      const log = await ssh.exec(['sudo', 'journalctl', '-u', DRILL_UNIT, '-n', '15', '--no-pager', '-o', 'cat']).catch(() => undefined);
      throw new Error(
        `the drill's etcd did not answer within ${DRILL_ETCD_WINDOW_MS / 1000} s ` +
          `(${briefError(error)}); its last log lines:\n${log?.stdout.trim() ?? '(none)'}`,
      );
    });
    const keys = await restored.getAll().count();
    const facts: RestoredFacts = { revision: Number(status.header.revision), keys };
    if (hashAt === undefined) return facts;
    try {
      return { ...facts, hashKV: await hashKV(restored, hashAt) };
    } catch (error) {
      return { ...facts, hashKV: { error: briefError(error) } };
    }
  } finally {
    client?.close();
    tunnel.close();
  }
}

/** The drill in `member`: prepared (room checked), restored, read, and cleaned up whatever happened. */
async function drillIn(
  inventory: Inventory,
  member: Member,
  session: ClusterSession,
  file: SnapshotFile,
  chosen: ChosenSnapshot,
): Promise<{ restored: RestoredFacts } | { refused: string } | { failed: string }> {
  const ssh = await session.members.get(member);
  const timeoutMs = inventory.cluster.healthTimeout * 1000;
  const free = (await ssh.run(['sudo', 'sh', '-c', drillPrepareScript(inventory)], { describe: 'drill: room' })).trim();
  if (!/^\d+$/.test(free)) throw new Error(`${member.name}: df did not say how much of its data disk is free (${free})`);
  const noRoom = roomVerdict(member.name, Number(free), file.size);
  if (noRoom) return { refused: noRoom };
  try {
    await ssh.run(['sudo', 'sh', '-c', drillUploadScript(inventory)], {
      stdin: file.read(),
      timeoutMs,
      describe: 'drill: snapshot upload',
    });
    await ssh.run(['sudo', 'sh', '-c', drillStartScript(inventory, member)], { timeoutMs, describe: 'drill: snapshot restore' });
    const hashAt = chosen.manifest?.hashKV ? chosen.manifest.revision : undefined;
    return { restored: await readRestored(ssh, member, session, hashAt) };
  } catch (error) {
    // What a drill is for: the backup did not restore (the restore refused it, or etcd would not serve it).
    // Whole (its command's output, the drill etcd's log lines), but bounded: it goes into etcd as the record.
    return { failed: `not restored on ${member.name}: ${String((error as Error).message ?? error).slice(0, 1500)}` };
  } finally {
    await ssh.run(['sudo', 'sh', '-c', drillCleanupScript(inventory)], { describe: 'drill: clean-up' });
  }
}

export interface DrillOutcome {
  record: DrillRecord;
  verdict: DrillVerdict;
}

/**
 * Runs a drill of the snapshot `source` chooses and records it in etcd (the last drill, and the last one
 * that verified). A snapshot that does not download intact (its manifest, seal or SHA-256) is a failed
 * drill, recorded too. A refusal (an unhealthy cluster, no room) restores nothing and records nothing.
 */
export async function restoreDrill(
  inventory: Inventory,
  session: ClusterSession,
  source: SnapshotSource,
  named?: string,
): Promise<DrillOutcome | { refused: string }> {
  const choice = drillMember(await memberAnswers(inventory, session.clients), named);
  if ('refused' in choice) return choice;
  const member = inventory.members.find((m) => m.name === choice.member)!;
  const chosen = await source.choose();
  // Downloaded and checked once, on the control node: a damaged object is the drill's finding, not an error.
  const downloaded = await source.verifiedFile().then(
    (file) => ({ file }),
    (error: unknown) => {
      if (error instanceof SnapshotDamaged) return { damaged: error.message };
      throw error;
    },
  );
  const drilled = 'damaged' in downloaded ? downloaded : await drillIn(inventory, member, session, downloaded.file, chosen);
  if ('refused' in drilled) return drilled;
  const verdict: DrillVerdict =
    'damaged' in drilled
      ? { outcome: 'failed', findings: [`not restored: it did not download intact: ${drilled.damaged}`] }
      : 'failed' in drilled
        ? { outcome: 'failed', findings: [drilled.failed] }
        : judgeDrill(chosen.manifest, drilled.restored, chosen.unauthenticated);
  const record: DrillRecord = {
    object: chosen.name,
    member: member.name,
    finished: new Date().toISOString(),
    outcome: verdict.outcome,
    ...('restored' in drilled ? { revision: drilled.restored.revision, keys: drilled.restored.keys } : {}),
    findings: verdict.findings,
    by: 'the control node',
  };
  const text = JSON.stringify(record);
  await firstAnswering(session.clients, inventory.members, async (client) => {
    await client.put(BACKUP_RECORD_KEYS.lastDrill).value(text);
    if (record.outcome === 'ok') await client.put(BACKUP_RECORD_KEYS.lastVerified).value(text);
  });
  return { record, verdict };
}
