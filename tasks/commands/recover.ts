#!/usr/bin/env -S npx tsx
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { runTool } from '../cli/tool.ts';
import { EXIT, InputError } from '../core/errors.ts';
import { FactCache } from '../core/facts.ts';
import { RunLock } from '../core/lock.ts';
import { PACKAGE_ROOT } from '../core/package-root.ts';
import { DeployContext } from '../deploy/context.ts';
import { takeClusterRunLock } from '../etcd/run-lock.ts';
import { loadInventory } from '../inventory/load.ts';
import { requireLoginKeys } from '../inventory/login-keys.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import { memberNamed } from '../inventory/member-named.ts';
import type { SshConnection } from '../remote/ssh.ts';
import { gatherQuorumFacts, type QuorumFacts } from '../recover/facts.ts';
import {
  hasForceFlag,
  readRecovery,
  recoveryDone,
  setAside,
  startForcingNewCluster,
  startNormally,
  stopEtcd,
  untilLeading,
  writeRecovery,
  type RecoveryRecord,
} from '../recover/force-new-cluster.ts';
import { withOptionalValues } from '../cli/optional-value.ts';
import { removeRestoringInventory, restoringInventoryPath, snapshotRefusal, writeRestoringInventory } from '../recover/from-snapshot.ts';
import { chooseSurvivor, judgeQuorum, recordRefusal, resumePlan, type Survivor } from '../recover/verdict.ts';
import { SnapshotSource } from '../backup/source.ts';

const HELP = `Usage: etcd-kvm recover -i INVENTORY [--from-member NAME | --from-snapshot [TIMESTAMP]] [--dry-run]

Brings back a cluster that lost its quorum for good: fewer members than a quorum still hold their
data (the others' disks are gone). It establishes that from live facts first, and refuses while the
cluster has a leader, or while members that still hold their data could come back (a deploy starts
them). From a survivor: every survivor's raft index and revision are read, the most advanced one is
chosen (or --from-member), etcd stops everywhere, the survivor starts once forcing a new cluster
and then normally, and a deploy makes the other members again and joins them one at a time as
learners with empty data. From a backup, when no member survived (--from-snapshot): the cluster is
founded anew, every member restoring the backup. A recovery killed at any point is finished by running
the same command.

  -i, --inventory FILE     the inventory (required)
      --from-member NAME   recover from this survivor instead of the most advanced one
      --from-snapshot [T]  when no member survived: found the cluster anew from the latest backup in
                           restore.s3 (or the one taken at T, RFC 3339 as in its name), each new
                           member restoring it before etcd first starts
      --dry-run            say which member, at which revision, and what would be lost; change nothing
  -h, --help               this text

Exit: 0 recovered (or the dry-run's plan), 1 refused or failed, 2 bad input.`;

/** How long a survivor may take to lead again after a (forced) start: as long as a member's first start. */
const leadTimeoutMs = (inventory: Inventory) => inventory.cluster.healthTimeout * 1000;

function describeFacts(facts: QuorumFacts): string[] {
  return facts.members.map((member) =>
    member.etcd
      ? `  ${member.name}: etcd answers, raft index ${member.etcd.raftIndex}, ` +
        `revision ${member.etcd.revision}, leader ${member.etcd.leader === '0' ? 'none' : member.etcd.leader}`
      : `  ${member.name}: ${member.dataGone ? `data gone (${member.dataGone})` : `etcd silent (${member.silent}), its disks still there`}`,
  );
}

function describePlan(inventory: Inventory, chosen: Survivor, survivors: readonly Survivor[], gone: readonly string[]): string[] {
  const others = inventory.members.map((member) => member.name).filter((name) => name !== chosen.name);
  const asideNames = survivors.filter((survivor) => survivor.name !== chosen.name).map((survivor) => survivor.name);
  return [
    `recover from ${chosen.name} at revision ${chosen.revision} (raft ` +
      `index ${chosen.raftIndex}): every write ${chosen.name} had applied is kept;` +
      ` writes that ${gone.join(', ') || 'the lost members'} applied after raft index ${chosen.raftIndex}, if any, are lost`,
    '  1. stop etcd on every survivor',
    ...(asideNames.length
      ? [`  2. move ${asideNames.join(', ')}'s data aside on its own disk (<data_dir>/member.before-recover-<time>, never deleted)`]
      : []),
    `  ${asideNames.length ? 3 : 2}. start ${chosen.name} once with ` +
      `--force-new-cluster (a cluster of one member, with its data), then normally`,
    `  ${asideNames.length ? 4 : 3}. deploy: ${others.join(', ')} made again where gone, ` +
      `and joined one at a time as learners with empty data, then promoted`,
  ];
}

function runDeploy(inventoryPath: string): number {
  console.log(`\ndeploy: the other members rejoin (etcd-kvm deploy -i ${inventoryPath})`);
  const done = spawnSync(process.execPath, [join(PACKAGE_ROOT, 'bin', 'etcd-kvm.mjs'), 'deploy', '-i', inventoryPath], {
    stdio: 'inherit',
  });
  return done.status ?? EXIT.failed;
}

/**
 * What the recovery does, from the members' facts: resume one begun (recovery.json), or begin one from the
 * chosen survivor (recorded before anything changes); an exit code when it stops here (a refusal, a dry-run).
 */
function decideRecovery(
  inventory: Inventory,
  facts: QuorumFacts,
  clusterId: string,
  options: { fromMember?: string; dryRun: boolean },
): { record: RecoveryRecord; force: boolean } | number {
  const begun = readRecovery(inventory.stateDir);
  const verdict = judgeQuorum(facts.members, facts.voting);
  if (begun) {
    if (options.fromMember !== undefined && options.fromMember !== begun.from)
      throw new InputError(`a recovery from ${begun.from} is under way (since ${begun.started}): finish it without --from-member`);
    const survivor = facts.members.find((member) => member.name === begun.from);
    const unbound = recordRefusal({ record: begun, clusterId, ...(survivor ? { survivor } : {}) });
    const resumed = unbound ? { refused: unbound } : resumePlan(begun.from, verdict);
    if ('refused' in resumed) {
      console.log(`refused to resume the recovery from ${begun.from} begun ${begun.started}: ${resumed.refused}`);
      return EXIT.failed;
    }
    console.log(`resuming the recovery from ${begun.from} begun ${begun.started}: ${resumed.say}`);
    return options.dryRun ? EXIT.ok : { record: begun, force: resumed.force };
  }
  if (verdict.kind !== 'lost') {
    console.log(`refused: ${verdict.why}`);
    return EXIT.failed;
  }
  console.log(`quorum lost: ${verdict.why}`);
  const chosen = chooseSurvivor(verdict.survivors, options.fromMember);
  if ('refused' in chosen) {
    console.log(`refused: ${chosen.refused}`);
    return EXIT.failed;
  }
  console.log(describePlan(inventory, chosen, verdict.survivors, verdict.gone).join('\n'));
  if (options.dryRun) return EXIT.ok;
  const record: RecoveryRecord = {
    from: chosen.name,
    raftIndex: String(chosen.raftIndex),
    revision: String(chosen.revision),
    started: new Date().toISOString(),
    clusterId,
    memberId: chosen.id,
  };
  writeRecovery(inventory.stateDir, record);
  return { record, force: true };
}

/** The other members' etcd stopped and their data moved aside, then the survivor started with --force-new-cluster. */
async function forceNewClusterFrom(context: DeployContext, facts: QuorumFacts, from: Member, record: RecoveryRecord, ssh: SshConnection) {
  const { inventory } = context;
  const stamp = record.started.replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
  for (const other of facts.members.filter((member) => member.etcd && member.name !== from.name)) {
    const otherSsh = await context.memberSsh.reach(memberNamed(inventory, other.name), { windowMs: leadTimeoutMs(inventory) });
    console.log(`${other.name}: etcd stopped, its data moved aside`);
    await stopEtcd(otherSsh);
    await setAside(otherSsh, inventory.etcd.dataDir, stamp);
  }
  console.log(`${from.name}: starting etcd with --force-new-cluster`);
  await stopEtcd(ssh);
  await startForcingNewCluster(ssh);
  console.log(`${from.name}: etcd started with --force-new-cluster`);
  await untilLeading(context.clients, from, leadTimeoutMs(inventory));
}

/**
 * Up to the deploy: the verdict, the plan, and the survivor leading a cluster of its own again. Resolves
 * to the record of the recovery when the deploy is to run, or to an exit code when it is not.
 */
async function recoverSurvivor(inventory: Inventory, options: { fromMember?: string; dryRun: boolean }): Promise<RecoveryRecord | number> {
  // The rendered unit of a member restoring waits for its data: members rejoining empty would never start.
  if (inventory.restore.enabled)
    throw new InputError(
      'restore.enabled is true: members that rejoin the recovered cluster would wait for a restore ' +
        'that never comes (their etcd unit starts only once its data directory holds a member)',
      ['set restore.enabled: false (it only founds a cluster), then run recover again'],
    );
  const context = await DeployContext.open(inventory, [], new FactCache());
  try {
    const facts = await gatherQuorumFacts(inventory, context.remote, context.clients);
    console.log(`members (${facts.voting} voting in etcd's member list):\n${describeFacts(facts).join('\n')}`);
    const clusterId = context.owner().identity.id;
    // Every deploy's pki step records the cluster's ID first: a state directory without one never deployed it.
    if (clusterId === undefined)
      throw new InputError(
        `${inventory.stateDir} holds no cluster ID (cluster-id.json): it is not the state directory that deployed this cluster`,
      );
    const decided = decideRecovery(inventory, facts, clusterId, options);
    if (typeof decided === 'number') return decided;
    const { record, force } = decided;
    // The cluster's run lock too, as every run that changes it takes: held while the cluster has a quorum (a recovery
    // resumed after its forced start, a stale record), said to be local-only while it has none (no lease without a leader).
    const clusterLock = await takeClusterRunLock(
      inventory,
      { connections: context.remote.connections, identity: context.identities.root, clients: context.clients },
      {
        command: ['recover', ...process.argv.slice(2)].join(' '),
        say: (line) => console.log(line),
        // Not stopped half-way: a forced start left in the middle is worse than one finished under a lost lock.
        onLost: (why) => console.log(`lock: ${why}: the recovery goes on`),
      },
    );
    try {
      const from = memberNamed(inventory, record.from);
      const ssh = await context.memberSsh.reach(from, { windowMs: leadTimeoutMs(inventory) });
      if (force) await forceNewClusterFrom(context, facts, from, record, ssh);
      if (await hasForceFlag(ssh)) {
        console.log(`${from.name}: etcd started again without --force-new-cluster`);
        await startNormally(ssh);
        // Itself, while it is the cluster's one voting member; any leader, once others rejoined before the run was killed.
        await untilLeading(context.clients, from, leadTimeoutMs(inventory), force ? 'itself' : 'any');
      }
    } finally {
      // The deploy after it takes the lock itself.
      await clusterLock?.release();
    }
    return record;
  } finally {
    await context.close();
  }
}

/**
 * Nothing survived: the backup to found the cluster anew from (the latest, or the one taken at
 * `timestamp`), named with its time and revision before anything changes.
 */
async function recoverFromSnapshot(
  inventory: Inventory,
  timestamp: string,
  dryRun: boolean,
): Promise<{ object: string; timestamp: string } | number> {
  const { s3 } = inventory.restore;
  if (!s3.endpoint || !s3.bucket || !s3.objectPrefix)
    throw new InputError(
      '--from-snapshot reads the backups where restore.s3 points: set restore.s3 (endpoint, bucket, object_prefix, keys)',
    );
  const context = await DeployContext.open(inventory, [], new FactCache());
  const source = new SnapshotSource(
    { ...inventory.restore, backupTimestamp: timestamp },
    inventory.etcd.spaceQuota,
    () => context.owner().identity.id,
  );
  try {
    const facts = await gatherQuorumFacts(inventory, context.remote, context.clients);
    console.log(`members (${facts.voting} voting):\n${describeFacts(facts).join('\n')}`);
    const refusal = snapshotRefusal(facts.members);
    if (refusal) {
      console.log(`refused: ${refusal}`);
      return EXIT.failed;
    }
    const chosen = await source.choose();
    const object = chosen.name;
    const taken = /-(\d{4}-\d{2}-\d{2}T[\d:.]+Z)\.dump$/.exec(object)![1]!;
    console.log(
      `recover from ${object} in ${source.bucket.where}, taken ${taken} (${chosen.provenance}): ` +
        `the cluster is founded anew holding exactly what it held then, auth and users included; every write after ${taken} is lost`,
    );
    console.log('  deploy: every member made again, each restoring that backup into its empty data directory before etcd first starts');
    return dryRun ? EXIT.ok : { object, timestamp: taken };
  } finally {
    await source.close();
    await context.close();
  }
}

process.exitCode = await runTool(
  {
    help: HELP,
    options: { 'from-member': { type: 'string' }, 'from-snapshot': { type: 'string' }, 'dry-run': { type: 'boolean', default: false } },
    failure: 'recover failed',
    async run(values, path) {
      const inventory = loadInventory(path);
      requireLoginKeys(inventory);
      const dryRun = values['dry-run'] === true;
      if (values['from-snapshot'] !== undefined) {
        if (values['from-member'] !== undefined) throw new InputError('give --from-member or --from-snapshot, not both');
        // A recovery from a backup under way (its restoring inventory is there): the deploy finishes it, members restored once only.
        const underWay = existsSync(restoringInventoryPath(inventory.path));
        if (underWay) console.log(`resuming the recovery from the backup that ${restoringInventoryPath(inventory.path)} names`);
        const chosen = underWay
          ? { object: 'the backup', timestamp: '' }
          : await recoverFromSnapshot(inventory, String(values['from-snapshot']), dryRun);
        if (typeof chosen === 'number') return chosen;
        if (underWay && dryRun) return EXIT.ok;
        const restoring = underWay ? restoringInventoryPath(inventory.path) : writeRestoringInventory(inventory.path, chosen.timestamp);
        const deployed = runDeploy(restoring);
        if (deployed !== EXIT.ok) {
          console.error(
            `error: the deploy that restores ${chosen.object} failed (exit ${deployed}): fix what it says, then run recover again`,
          );
          return EXIT.failed;
        }
        removeRestoringInventory(inventory.path);
        console.log(`recovered from ${chosen.object}: the cluster holds what it held then`);
        return EXIT.ok;
      }
      const fromMember = typeof values['from-member'] === 'string' ? { fromMember: values['from-member'] } : {};
      const lock = dryRun ? undefined : RunLock.acquire(inventory.stateDir);
      let outcome: RecoveryRecord | number;
      try {
        outcome = await recoverSurvivor(inventory, { dryRun, ...fromMember });
      } finally {
        // The deploy takes the state directory's lock itself.
        lock?.release();
      }
      if (typeof outcome === 'number') return outcome;
      const deployed = runDeploy(inventory.path);
      if (deployed !== EXIT.ok) {
        console.error(`error: the deploy that rejoins the members failed (exit ${deployed}): fix what it says, then run recover again`);
        return EXIT.failed;
      }
      recoveryDone(inventory.stateDir);
      console.log(`recovered from ${outcome.from} (revision ${outcome.revision} when the recovery began)`);
      return EXIT.ok;
    },
  },
  withOptionalValues(process.argv.slice(2), ['--from-snapshot']),
);
