import type { Hypervisor, Inventory, Member } from '../inventory/model.ts';
import { GIB } from '../libvirt/volumes.ts';

/**
 * What the ground must hold before a deploy can build the inventory's members, per hypervisor: the pools and base
 * images their volumes come from, the libvirt networks and macvtap devices their NICs attach to, and the volumes a
 * deploy would create (for the pools' free space). Pure: derived from the inventory alone; doctor/facts.ts asks each
 * hypervisor about exactly these.
 */

/** A volume the deploy creates in a pool unless it is there, with the capacity it is given. */
export interface PlannedVolume {
  member: string;
  pool: string;
  name: string;
  /** Its capacity in bytes; undefined: the base image's (an OS overlay without os_volume_size_gib). */
  bytes?: number;
  /** The base image whose capacity it takes when `bytes` is undefined. */
  base?: { pool: string; volume: string };
}

export interface GroundAsked {
  hypervisor: Hypervisor;
  members: string[];
  /** Every pool a member's volume, seed ISO or base image is in. */
  pools: string[];
  baseImages: { pool: string; volume: string }[];
  networks: string[];
  macvtapDevices: string[];
  volumes: PlannedVolume[];
}

const unique = <T>(items: readonly T[], key: (item: T) => string): T[] => [...new Map(items.map((item) => [key(item), item])).values()];

function plannedVolumes(member: Member): PlannedVolume[] {
  const { pool, os, data } = member.volumes;
  const planned: PlannedVolume[] = [];
  if ('name' in os)
    planned.push({ member: member.name, pool, name: os.name, ...(os.sizeGib ? { bytes: os.sizeGib * GIB } : { base: os.base }) });
  if (data && 'name' in data) planned.push({ member: member.name, pool, name: data.name, bytes: data.sizeGib * GIB });
  return planned;
}

/** The ground each hypervisor must hold for its members, in the inventory's order of hypervisors. */
export function groundAsked(inventory: Inventory): GroundAsked[] {
  return inventory.hypervisors.map((hypervisor) => {
    const members = inventory.members.filter((member) => member.hypervisor.name === hypervisor.name);
    const baseImages = unique(
      members.flatMap(({ volumes: { os } }) => ('name' in os ? [os.base] : [])),
      (image) => `${image.pool}/${image.volume}`,
    );
    const sources = members.flatMap((member) => member.interfaces.map((nic) => nic.source));
    return {
      hypervisor,
      members: members.map((member) => member.name),
      pools: [
        ...new Set(
          members.length
            ? [...members.flatMap(({ volumes }) => [volumes.pool, volumes.cloudInit.pool]), ...baseImages.map((image) => image.pool)]
            : [],
        ),
      ],
      baseImages,
      networks: [...new Set(sources.flatMap((source) => (source.kind === 'network' ? [source.networkName] : [])))],
      macvtapDevices: [...new Set(sources.flatMap((source) => (source.kind === 'macvtap' ? [source.device] : [])))],
      volumes: members.flatMap(plannedVolumes),
    };
  });
}
