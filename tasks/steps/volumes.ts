import type { Change, Step } from '../core/step.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import { GIB, volInfo, volumeState, type VolumeState } from '../libvirt/volumes.ts';
import type { ProbeAnswer, Question } from '../libvirt/virsh.ts';
import type { RemoteContext } from '../libvirt/context.ts';
import { memberTargets } from './member-targets.ts';
import { deployStep } from './deploy-step.ts';

/**
 * Each member's disks: the OS disk as a qcow2 overlay on the base image volume, and the optional data
 * disk. Volumes are only ever created; an existing one is never deleted, resized or overwritten.
 */

interface VolumesState {
  os: VolumeState;
  data?: VolumeState;
  /** The base image (when the OS disk is an overlay the tool creates): its path and size. */
  base?: { path: string; capacityBytes: number } | { missing: string };
}

export type VolumeAction =
  | { kind: 'overlay'; pool: string; name: string; capacityBytes: number; basePath: string }
  | { kind: 'data'; pool: string; name: string; capacityBytes: number };

/** `virsh vol-create-as` for a data disk, or for an OS disk layered on its base image's path. */
export function createVolumeArgs(action: VolumeAction): string[] {
  const common = [
    'vol-create-as',
    '--pool',
    action.pool,
    '--name',
    action.name,
    '--capacity',
    `${action.capacityBytes}`,
    '--format',
    'qcow2',
  ];
  return action.kind === 'overlay' ? [...common, '--backing-vol', action.basePath, '--backing-vol-format', 'qcow2'] : common;
}

/** An OS disk's size: the larger of os_volume_size_gib and the base image's own. */
export const osDiskBytes = (os: { sizeGib?: number }, baseBytes: number): number => Math.max(os.sizeGib ? os.sizeGib * GIB : 0, baseBytes);

type VolumeQuestion = 'os' | 'data' | 'basePath' | 'baseInfo';

export function volumeQuestions(member: Member): Partial<Record<VolumeQuestion, Question>> {
  const { os, data, pool } = member.volumes;
  return {
    os: volInfo(pool, 'existing' in os ? os.existing : os.name),
    ...(data ? { data: volInfo(pool, 'existing' in data ? data.existing : data.name) } : {}),
    ...('base' in os
      ? { basePath: ['vol-path', '--pool', os.base.pool, os.base.volume], baseInfo: volInfo(os.base.pool, os.base.volume) }
      : {}),
  };
}

async function probe(context: RemoteContext, member: Member): Promise<VolumesState> {
  const { os, data, pool } = member.volumes;
  const answers: Partial<Record<VolumeQuestion, ProbeAnswer>> = await context.probe(
    member,
    volumeQuestions(member) as Record<VolumeQuestion, Question>,
  );
  const state: VolumesState = { os: volumeState(answers.os!, `volume ${pool}/${'existing' in os ? os.existing : os.name}`) };
  if (data && answers.data) state.data = volumeState(answers.data, `data volume of ${member.name}`);
  if ('base' in os && answers.baseInfo && answers.basePath) {
    const base = volumeState(answers.baseInfo, `base image ${os.base.pool}/${os.base.volume}`);
    state.base = base.exists
      ? { path: answers.basePath.output.trim(), capacityBytes: base.capacityBytes }
      : { missing: `${os.base.pool}/${os.base.volume}` };
  }
  return state;
}

/**
 * `joining`: these members have just been added to a formed cluster as learners, so an empty disk is
 * what they need (they get their data from the cluster). `formed`: the cluster has formed (etcd said
 * so, or formed.json when no etcd answers): a member's missing data disk is its data lost, never a disk
 * to create — etcd would start `existing` on it empty.
 */
export function volumesStep(
  inventory: Inventory,
  members: readonly Member[],
  context: RemoteContext,
  { joining, formed }: { joining: boolean; formed: boolean },
): Step<VolumesState & { othersWithDisks: string[] }, VolumeAction> {
  const { targets, memberNamed } = memberTargets(members);
  // Which members had their OS disk when this step started: a missing disk next to existing ones means a
  // cluster formed without this member's data. Taken once, by the first member that misses its disk, and
  // before any member can apply (every apply comes after its own check, which awaits this).
  type DiskSeen = 'yes' | 'no' | 'unknown';
  let disksAtStart: Promise<Map<string, DiskSeen>> | undefined;
  const membersWithDisks = () =>
    (disksAtStart ??= Promise.all(
      inventory.members.map(
        async (member) =>
          [
            member.name,
            await probe(context, member).then(
              (state): DiskSeen => (state.os.exists ? 'yes' : 'no'),
              (): DiskSeen => 'unknown',
            ),
          ] as const,
      ),
    ).then((entries) => new Map<string, DiskSeen>(entries)));
  return {
    name: 'volumes',
    targets,
    async check(name) {
      const state = await probe(context, memberNamed(name));
      if (state.os.exists) return { ...state, othersWithDisks: [] };
      // A member that cannot be read counts as having a disk: refusing is the safe side.
      const others = [...(await membersWithDisks()).entries()].filter(([other, disk]) => other !== name && disk !== 'no');
      return { ...state, othersWithDisks: others.map(([other, disk]) => (disk === 'yes' ? other : `${other} (unreadable)`)) };
    },
    plan(state, name) {
      const member = memberNamed(name);
      const { os, data, pool } = member.volumes;
      const changes: Change<VolumeAction>[] = [];
      if (!state.os.exists) {
        if ('existing' in os)
          throw new Error(
            `volume_id ${os.existing} does not exist in pool ${pool} on hypervisor ${member.hypervisor.name}; create it or drop volume_id to let the tool make an overlay on base_image`,
          );
        // A data disk that is there holds the member's etcd data: a new OS disk boots the same member (an image rebuild).
        const dataKept = state.data?.exists === true;
        if (!joining && !dataKept && (!inventory.cluster.is_initializing || state.othersWithDisks.length > 0)) {
          throw new Error(
            `refusing to create a new OS disk for ${name}: the cluster already exists (${state.othersWithDisks.length > 0 ? `other members have their disks: ${state.othersWithDisks.join(', ')}` : 'cluster.is_initializing is false'}), ` +
              'and a fresh member would start empty. Restore the volume, or remove the member from the cluster (etcdctl member remove <its ID, ' +
              `from status.ts>) or run with --replace ${name}: it then joins as a learner with a fresh disk and its data from the cluster. Nothing was changed for this member.`,
          );
        }
        if (!state.base || 'missing' in state.base) {
          throw new Error(
            `base image ${state.base && 'missing' in state.base ? state.base.missing : '?'} not found on hypervisor ${member.hypervisor.name}; upload it (for the local lab: npm run lab:up)`,
          );
        }
        const capacityBytes = osDiskBytes(os, state.base.capacityBytes);
        const kept = dataKept && data ? `; etcd's data stays on ${pool}/${'existing' in data ? data.existing : data.name}` : '';
        changes.push({
          summary: `create OS disk ${pool}/${os.name} (${(capacityBytes / GIB).toFixed(0)} GiB qcow2 overlay on ${os.base.pool}/${os.base.volume}${kept})`,
          action: { kind: 'overlay', pool, name: os.name, capacityBytes, basePath: state.base.path },
        });
      }
      if (data && state.data && !state.data.exists) {
        if ('existing' in data)
          throw new Error(`data_volume_id ${data.existing} does not exist in pool ${pool} on hypervisor ${member.hypervisor.name}`);
        if (!joining && formed) {
          throw new Error(
            `refusing to create a new data disk for ${name}: the cluster has formed, so ${pool}/${data.name} held this member's etcd data, and etcd would start on an empty one. ` +
              `Restore the volume, or run with --replace ${name} (it joins again empty and takes its data from the cluster). Nothing was changed for this member.`,
          );
        }
        changes.push({
          summary: `create data disk ${pool}/${data.name} (${data.sizeGib} GiB qcow2)`,
          action: { kind: 'data', pool, name: data.name, capacityBytes: data.sizeGib * GIB },
        });
      }
      return changes;
    },
    async apply(changes, name) {
      const virsh = await context.virshFor(memberNamed(name));
      for (const { action } of changes) await virsh.run(createVolumeArgs(action));
    },
  };
}

export const volumes = deployStep({
  id: 'volumes',
  kind: 'operation',
  on: 'hypervisors',
  selectable: true,
  changes: ['libvirt'],
  doc: 'OS overlay and data disks',
  asksHypervisor: (member) => Object.values(volumeQuestions(member)),
  run: ({ pass }, run) =>
    run.runner.runStep(
      volumesStep(run.clusterOf(pass.cluster), run.resources.membersNamed(pass.members), run.resources.remote, {
        joining: pass.joining,
        formed: pass.formed,
      }),
    ),
});
