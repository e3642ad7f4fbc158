import type { Change, Step } from '../core/step.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import { GIB, volInfo, volumeState, type VolumeState } from '../libvirt/volumes.ts';
import type { ProbeAnswer, Question } from '../libvirt/virsh.ts';
import type { LibvirtAnswers, RemoteContext } from '../libvirt/context.ts';
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

/** What the volumes step asks of the hypervisors: their volumes' answers, and a virsh to create the missing ones. */
export type VolumesContext = LibvirtAnswers & Pick<RemoteContext, 'virshFor'>;

async function probe(context: LibvirtAnswers, member: Member): Promise<VolumesState> {
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

type DiskSeen = 'yes' | 'no' | 'unknown';

/**
 * Which members had their OS disk when the step started: a missing disk next to existing ones means a cluster
 * formed without this member's data. Asked once, by the first member that misses its disk, and before any
 * member can apply (every apply comes after its own check, which awaits this).
 */
function disksAtStart(inventory: Inventory, context: LibvirtAnswers): () => Promise<Map<string, DiskSeen>> {
  let seen: Promise<Map<string, DiskSeen>> | undefined;
  const diskOf = (member: Member): Promise<DiskSeen> =>
    probe(context, member).then(
      (state): DiskSeen => (state.os.exists ? 'yes' : 'no'),
      (): DiskSeen => 'unknown',
    );
  return () =>
    (seen ??= Promise.all(inventory.members.map(async (member) => [member.name, await diskOf(member)] as const)).then(
      (entries) => new Map(entries),
    ));
}

/** A missing OS disk: an overlay on the base image, unless the member would start empty in a cluster that exists. */
function osDiskChanges(
  member: Member,
  state: VolumesState & { othersWithDisks: string[] },
  { inventory, joining }: { inventory: Inventory; joining: boolean },
): Change<VolumeAction>[] {
  const { os, data, pool } = member.volumes;
  if (state.os.exists) return [];
  const on = `hypervisor ${member.hypervisor.name}`;
  if ('existing' in os)
    throw new Error(
      `volume_id ${os.existing} does not exist in pool ${pool} on ${on}; ` +
        `create it or drop volume_id to let the tool make an overlay on base_image`,
    );
  // A data disk that is there holds the member's etcd data: a new OS disk boots the same member (an image rebuild).
  const dataKept = state.data?.exists === true;
  if (!joining && !dataKept && (!inventory.cluster.isInitializing || state.othersWithDisks.length > 0)) {
    const exists =
      state.othersWithDisks.length > 0
        ? `other members have their disks: ${state.othersWithDisks.join(', ')}`
        : 'cluster.is_initializing is false';
    throw new Error(
      `refusing to create a new OS disk for ${member.name}: ` +
        `the cluster already exists (${exists}), and a fresh member would start empty. ` +
        'Restore the volume, or remove the member from the cluster (etcdctl member remove <its ID, from etcd-kvm status>) ' +
        `or run with --replace ${member.name}: it then joins as a learner with a ` +
        `fresh disk and its data from the cluster. Nothing was changed for this member.`,
    );
  }
  if (!state.base || 'missing' in state.base) {
    const missing = state.base && 'missing' in state.base ? state.base.missing : '?';
    throw new Error(`base image ${missing} not found on ${on}; upload it (for the local lab: npm run lab:up)`);
  }
  const capacityBytes = osDiskBytes(os, state.base.capacityBytes);
  const kept = dataKept && data ? `; etcd's data stays on ${pool}/${'existing' in data ? data.existing : data.name}` : '';
  const size = `${(capacityBytes / GIB).toFixed(0)} GiB`;
  return [
    {
      summary: `create OS disk ${pool}/${os.name} (${size} qcow2 overlay on ${os.base.pool}/${os.base.volume}${kept})`,
      action: { kind: 'overlay', pool, name: os.name, capacityBytes, basePath: state.base.path },
    },
  ];
}

/** A missing data disk: a new one, unless the cluster has formed, where it held the member's data. */
function dataDiskChanges(
  member: Member,
  state: VolumesState,
  { joining, formed }: { joining: boolean; formed: boolean },
): Change<VolumeAction>[] {
  const { data, pool } = member.volumes;
  if (!data || !state.data || state.data.exists) return [];
  if ('existing' in data)
    throw new Error(`data_volume_id ${data.existing} does not exist in pool ${pool} on hypervisor ${member.hypervisor.name}`);
  if (!joining && formed) {
    throw new Error(
      `refusing to create a new data disk for ${member.name}: the cluster has formed, ` +
        `so ${pool}/${data.name} held this member's etcd data, and etcd would start on an empty one. ` +
        `Restore the volume, or run with --replace ${member.name} (it joins again empty ` +
        `and takes its data from the cluster). Nothing was changed for this member.`,
    );
  }
  return [
    {
      summary: `create data disk ${pool}/${data.name} (${data.sizeGib} GiB qcow2)`,
      action: { kind: 'data', pool, name: data.name, capacityBytes: data.sizeGib * GIB },
    },
  ];
}

/**
 * `joining`: these members have just been added to a formed cluster as learners, so an empty disk is
 * what they need (they get their data from the cluster). `formed`: the cluster has formed (etcd said
 * so, or formed.json when no etcd answers): a member's missing data disk is its data lost, never a disk
 * to create — etcd would start `existing` on it empty.
 */
export function volumesStep({
  inventory,
  members,
  context,
  joining,
  formed,
}: {
  inventory: Inventory;
  members: readonly Member[];
  context: VolumesContext;
  joining: boolean;
  formed: boolean;
}): Step<VolumesState & { othersWithDisks: string[] }, VolumeAction> {
  const { targets, memberNamed } = memberTargets(members);
  const membersWithDisks = disksAtStart(inventory, context);
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
      return [...osDiskChanges(member, state, { inventory, joining }), ...dataDiskChanges(member, state, { joining, formed })];
    },
    async apply(changes, name) {
      const virsh = await context.virshFor(memberNamed(name));
      for (const { action } of changes) await virsh.run(createVolumeArgs(action));
    },
  };
}

declare module './deploy-step.ts' {
  interface PassSteps {
    volumes: true;
  }
}

export const volumes = deployStep({
  id: 'volumes',
  kind: 'operation',
  on: 'hypervisors',
  selectable: true,
  changes: ['libvirt'],
  doc: 'OS overlay and data disks',
  converge: {},
  asksHypervisor: (member) => Object.values(volumeQuestions(member)),
  run: ({ pass }, run) =>
    run.runner.runStep(
      volumesStep({
        inventory: run.clusterOf(pass.cluster),
        members: run.resources.membersNamed(pass.members),
        context: run.resources.remote,
        joining: pass.joining,
        formed: pass.formed,
      }),
    ),
});
