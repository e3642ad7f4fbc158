import type { ChosenSnapshot, SnapshotSource } from '../backup/source.ts';
import type { Step } from '../core/step.ts';
import { waitForCloudInit } from '../guest/facts.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { MemberConnections } from '../remote/members.ts';
import type { SshConnection, Stdin } from '../remote/ssh.ts';
import { installRelease, type ReleaseArchives } from '../guest/release-install.ts';
import { managedRelease, snapshotRestoreProgram } from '../render/etcd-release.ts';
import { peerUrl } from '../inventory/urls.ts';
import { memberTargets } from './member-targets.ts';
import { deployStep } from './deploy-step.ts';

/**
 * Restore from an etcd-backup snapshot (restore.enabled), before etcd's first start: every member
 * gets the same snapshot, restored with its own --name and the cluster's --initial-cluster,
 * --initial-cluster-token and its --initial-advertise-peer-urls, then etcd is started. The unit's
 * ConditionPathExists keeps etcd from founding an empty cluster meanwhile. A member whose data
 * directory already holds etcd's data is never touched again. With binaries: release, the release is
 * installed first (the guest step, which would install it, runs after this one): its etcdutl restores.
 */

interface RestoreState {
  /** Why the member could not be asked, in a dry-run while it boots (a run waits, then fails instead). */
  unreachable?: string;
  restored: boolean;
  snapshot?: ChosenSnapshot;
}

/** Where the restore step takes its snapshot (SnapshotSource): the one chosen, its bytes, and where it is kept. */
export type RestoreSource = Pick<SnapshotSource, 'choose' | 'open'> & { readonly bucket: Pick<SnapshotSource['bucket'], 'where'> };

export function restoreStep({
  inventory,
  members,
  connections,
  source,
  releaseArchive,
}: {
  inventory: Inventory;
  members: readonly Member[];
  connections: Pick<MemberConnections, 'reach'>;
  source: RestoreSource;
  /** With binaries: release, the run's release archive on the control node. */
  releaseArchive?: ReleaseArchives;
}): Step<RestoreState, 'restore'> {
  const { targets, memberNamed } = memberTargets(inventory.restore.enabled ? members : []);
  const dataDir = inventory.etcd.dataDir;
  /** How long a booting member's SSH is waited for: cluster.health_timeout (a dry-run's patience asks once). */
  const timeoutMs = inventory.cluster.healthTimeout * 1000;

  return {
    name: 'restore',
    targets,
    async check(name, patience) {
      const member = memberNamed(name);
      let ssh: SshConnection;
      try {
        ssh = await connections.reach(member, { windowMs: patience.windowMs(timeoutMs) });
      } catch (error) {
        return { unreachable: patience.notReady(error), restored: false, snapshot: await source.choose() };
      }
      const hasData = async () => (await ssh.exec(['sudo', 'test', '-d', `${dataDir}/member`])).code === 0;
      if (await hasData()) return { restored: true };
      // Not yet: cloud-init may still be mounting the data disk and writing the unit; ask again after it.
      await ssh.exec(['sudo', 'sh', '-c', waitForCloudInit()], { timeoutMs });
      return (await hasData()) ? { restored: true } : { restored: false, snapshot: await source.choose() };
    },
    plan(state, name) {
      if (state.restored) return [];
      const later = state.unreachable ? ' (once the member has booted)' : '';
      return [
        {
          summary:
            `restore ${name}'s data directory from ${state.snapshot?.name} in ${source.bucket.where}, ` +
            `then start etcd${later} (${state.snapshot?.provenance})`,
          action: 'restore',
        },
      ];
    },
    async apply(_changes, name) {
      const member = memberNamed(name);
      const snapshot = await source.open();
      const ssh = await connections.reach(member, { windowMs: timeoutMs });
      const release = managedRelease(inventory);
      await restoreInto(
        ssh,
        { inventory, member, snapshot, timeoutMs },
        release ? () => installRelease(ssh, releaseArchive, release, timeoutMs) : undefined,
      );
    },
  };
}

/** `etcdutl snapshot restore` of this member, with the cluster the snapshot founds. */
function restoreArgv(inventory: Inventory, member: Member, file: string, dataDir: string): string[] {
  return [
    'sudo',
    ...snapshotRestoreProgram(inventory, member),
    'snapshot',
    'restore',
    file,
    '--name',
    member.name,
    '--initial-cluster',
    inventory.members.map((m) => `${m.name}=${peerUrl(inventory, m)}`).join(','),
    '--initial-cluster-token',
    inventory.cluster.initialToken,
    '--initial-advertise-peer-urls',
    peerUrl(inventory, member),
    '--data-dir',
    dataDir,
  ];
}

/**
 * The snapshot into the member: uploaded over stdin into a file only root reads (it is the cluster's data),
 * restored into a scratch directory beside the data directory, moved into place, and etcd started.
 */
async function restoreInto(
  ssh: SshConnection,
  { inventory, member, snapshot, timeoutMs }: { inventory: Inventory; member: Member; snapshot: Stdin; timeoutMs: number },
  installTools: (() => Promise<unknown>) | undefined,
): Promise<void> {
  const dataDir = inventory.etcd.dataDir;
  const file = '/var/tmp/etcd-kvm-restore.db';
  const scratch = `${dataDir}/.etcd-kvm-restore`;
  // Streamed from the control node's copy; as long as the guest's disk takes it (the run's health_timeout).
  await ssh.run(['sudo', 'sh', '-c', 'umask 077 && cat > "$1"', 'sh', file], { stdin: snapshot, describe: 'snapshot upload', timeoutMs });
  await ssh.run(['sudo', 'rm', '-rf', scratch]);
  if (installTools) await installTools();
  await ssh.run(restoreArgv(inventory, member, file, scratch), { describe: 'snapshot restore' });
  await ssh.run(['sudo', 'mv', `${scratch}/member`, `${dataDir}/member`]);
  await ssh.run(['sudo', 'chown', '-R', 'etcd:etcd', `${dataDir}/member`]);
  await ssh.run(['sudo', 'rm', '-rf', scratch, file]);
  // --no-block: etcd reports ready only once a quorum of restored members runs.
  await ssh.run(['sudo', 'systemctl', 'start', '--no-block', 'etcd.service']);
}

declare module './deploy-step.ts' {
  interface PassSteps {
    restore: true;
  }
}

export const restore = deployStep({
  id: 'restore',
  kind: 'operation',
  on: 'guests',
  selectable: true,
  changes: ['guest'],
  doc: "with restore.enabled, while the cluster forms: one snapshot into every member's empty data directory",
  converge: {
    // A restore founds a cluster; a member with an empty data directory in a formed one is a replacement (see membership).
    inPass: (pass, inventory) =>
      !inventory.restore.enabled || pass.joining
        ? false
        : !pass.formed || 'not run: the cluster has formed, and a restore only founds a new one',
  },
  run: ({ pass }, run) => {
    const { memberSsh, snapshots, membersNamed } = run.resources;
    if (!snapshots) throw new Error('the plan has a restore phase, but restore.enabled is not set');
    return run.runner.runStep(
      restoreStep({
        inventory: run.clusterOf(pass.cluster),
        members: membersNamed(pass.members),
        connections: memberSsh,
        source: snapshots,
        releaseArchive: (version) => run.resources.releaseArchive(version),
      }),
    );
  },
});
