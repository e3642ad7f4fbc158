import { derivedMac } from './mac.ts';
import type { Hypervisor, Member } from './model.ts';
import type { Problem } from './problems.ts';

/**
 * Objects two members could share by accident, checked on the built members, where names are final
 * (defaults and derived names applied), absent members included: their disks stay. The rules on the
 * document see only what was written; these see what the tool will name.
 */

interface OwnVolume {
  member: Member;
  role: 'OS disk' | 'data disk' | 'seed ISO';
  pool: string;
  name: string;
  /** The member's field that named the volume; undefined when the name derives from the member's. */
  field?: 'volume_id' | 'data_volume_id' | 'cloud_init_volume_name';
}

/** A volume given as an absolute path is a file on the hypervisor (render/domain.ts): the pool does not matter then. */
const isFile = (name: string) => name.startsWith('/');
const keyOf = (member: Member, pool: string, name: string) => `${member.hypervisor.name}\0${isFile(name) ? name : `${pool}/${name}`}`;
const describe = (pool: string, name: string) => (isFile(name) ? `file ${name}` : `volume ${pool}/${name}`);

function ownVolumes(member: Member): OwnVolume[] {
  const { os, data, pool, cloudInit } = member.volumes;
  return [
    'existing' in os
      ? { member, role: 'OS disk', pool, name: os.existing, field: 'volume_id' }
      : { member, role: 'OS disk', pool, name: os.name },
    ...(data
      ? [
          'existing' in data
            ? ({ member, role: 'data disk', pool, name: data.existing, field: 'data_volume_id' } as const)
            : ({ member, role: 'data disk', pool, name: data.name } as const),
        ]
      : []),
    {
      member,
      role: 'seed ISO',
      ...cloudInit,
      ...(cloudInit.name === `${member.name}-cloud-init.iso` ? {} : { field: 'cloud_init_volume_name' as const }),
    },
  ];
}

function collision(volume: OwnVolume, taken: string): Problem {
  const { member, pool, name } = volume;
  const where = `names ${describe(pool, name)} on hypervisor ${member.hypervisor.name}, which is ${taken}`;
  const path = ['members', member.index, volume.field ?? 'name'];
  if (volume.role === 'seed ISO') {
    return {
      path,
      message: `${where}: the tool deletes and rewrites a seed ISO whenever it changes`,
      hint: `give each member a seed ISO name of its own (the default is ${member.name}-cloud-init.iso); never set it under defaults`,
    };
  }
  return {
    path,
    message: `${where}: one volume would be two disks, written by both`,
    hint: `give each disk a volume of its own${volume.field ? `; never set ${volume.field} under defaults` : ''}`,
  };
}

/**
 * Every member's OS disk, data disk and seed ISO is its own, on its hypervisor: no other member's and
 * not a base image; and no base image is a member's disk. The seed matters most: it is the one volume
 * the tool deletes and writes again. Names derived from member names come first, then the base images,
 * then the names the operator gave: a clash is reported at a field the operator set.
 */
export function volumeCollisions(members: readonly Member[]): Problem[] {
  const volumes = members.flatMap(ownVolumes);
  const owner = new Map<string, string>();
  const problems: Problem[] = [];
  const claim = (volume: OwnVolume) => {
    const key = keyOf(volume.member, volume.pool, volume.name);
    const taken = owner.get(key);
    if (taken) problems.push(collision(volume, taken));
    else owner.set(key, `${volume.member.name}'s ${volume.role}`);
  };
  volumes.filter((volume) => !volume.field).forEach(claim);
  for (const member of members) {
    const os = member.volumes.os;
    if (!('base' in os)) continue;
    const key = keyOf(member, os.base.pool, os.base.volume);
    const taken = owner.get(key);
    // Members share a base image by design; a member's derived disk is another matter, said once.
    if (taken === undefined) owner.set(key, 'the base image');
    else if (taken !== 'the base image') {
      problems.push({
        path: ['members', member.index, 'base_image'],
        message:
          `names volume ${os.base.pool}/${os.base.volume} on hypervisor ${member.hypervisor.name}, ` +
          `which is ${taken}: the member's disk would be layered on a disk a VM writes`,
        hint: "base_image is the OS image members' disks are layered on, never a member's own disk",
      });
      owner.set(key, 'the base image');
    }
  }
  volumes.filter((volume) => volume.field).forEach(claim);
  return problems;
}

/** Where an interface of a built member is in the inventory: libvirt networks come first, then macvtap interfaces. */
function interfacePath(member: Member, i: number): (string | number)[] {
  const networks = member.interfaces.filter((nic) => nic.source.kind !== 'macvtap').length;
  return i < networks ? ['members', member.index, 'libvirt_networks', i] : ['members', member.index, 'macvtap_interfaces', i - networks];
}

/**
 * A MAC the tool derived (from the cluster, member and interface) that another interface has: 24 bits of
 * a hash can meet an explicit MAC, or, rarely, another derived one. Two explicit ones are uniqueAddresses'.
 */
export function derivedMacCollisions(cluster: string, members: readonly Member[]): Problem[] {
  const nics = members.flatMap((member) =>
    member.interfaces.map((nic, i) => ({
      mac: nic.mac,
      path: interfacePath(member, i),
      derived: nic.mac === derivedMac(cluster, member.name, i),
    })),
  );
  const seen = new Map(nics.filter((nic) => !nic.derived).map((nic) => [nic.mac, nic.path]));
  return nics
    .filter((nic) => nic.derived)
    .flatMap((nic): Problem[] => {
      const earlier = seen.get(nic.mac);
      if (!earlier) {
        seen.set(nic.mac, nic.path);
        return [];
      }
      return [
        {
          path: nic.path,
          message: `its derived MAC ${nic.mac} is already used at ${earlier.join('.')}`,
          hint: 'set mac: on this interface to an address of its own',
        },
      ];
    });
}

/**
 * Two hypervisor names for one libvirt (same address, port, URI and way there): their members' volumes
 * would share pools while every check above tells them apart by hypervisor, and placement would count
 * one host as two.
 */
export function sameHostHypervisors(hypervisors: readonly Hypervisor[]): Problem[] {
  const seen = new Map<string, string>();
  return hypervisors.flatMap((hypervisor): Problem[] => {
    const key = JSON.stringify([
      hypervisor.address.toLowerCase(),
      hypervisor.port,
      hypervisor.libvirtUri,
      hypervisor.jump.map((hop) => [hop.address.toLowerCase(), hop.port]),
    ]);
    const earlier = seen.get(key);
    if (!earlier) {
      seen.set(key, hypervisor.name);
      return [];
    }
    return [
      {
        path: ['hypervisors', hypervisor.name, 'address'],
        message: `reaches the libvirt of hypervisor ${earlier} (${hypervisor.address}:${hypervisor.port}, ${hypervisor.libvirtUri})`,
        hint: 'one host is one hypervisor: list all its members under one name',
      },
    ];
  });
}
