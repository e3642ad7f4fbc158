import type { Member } from '../inventory/model.ts';
import type { ClusterIdentity } from '../pki/identity.ts';
import { renderTemplate } from './templates.ts';

/** The XML namespace of the mark, as libvirt keys metadata by namespace URI. */
export const OWNER_NAMESPACE = 'urn:etcd-kvm:owner:1';
/** The prefix libvirt writes the mark's element with. */
export const OWNER_PREFIX = 'etcd-kvm';

const escapeAttribute = (value: string) => value.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/** A domain's title; domains made before the owner's mark existed are recognised by it (libvirt/ownership.ts). */
export const domainTitle = (member: string, cluster: string) => `etcd member ${member} of cluster ${cluster}`;

/** The mark's element, as `virsh metadata --set` takes it (namespace and prefix given separately). */
export const ownerElement = (identity: ClusterIdentity): string =>
  `<owner cluster="${escapeAttribute(identity.cluster)}" id="${escapeAttribute(identity.id ?? 'new')}"/>`;

type DiskSource = { kind: 'volume'; pool: string; volume: string } | { kind: 'file'; file: string };

interface DomainDisk {
  device: 'disk' | 'cdrom';
  format: 'qcow2' | 'raw';
  source: DiskSource;
  target: string;
  bus: 'virtio' | 'scsi';
  readonly: boolean;
}

/** A volume given by the operator (seed's volume_id): an absolute path is a file, anything else a volume in the pool. */
function existingSource(existing: string, pool: string): DiskSource {
  return existing.startsWith('/') ? { kind: 'file', file: existing } : { kind: 'volume', pool, volume: existing };
}

export function domainDisks(member: Member): DomainDisk[] {
  const { volumes } = member;
  const os =
    'existing' in volumes.os
      ? existingSource(volumes.os.existing, volumes.pool)
      : { kind: 'volume' as const, pool: volumes.pool, volume: volumes.os.name };
  const disks: DomainDisk[] = [{ device: 'disk', format: 'qcow2', source: os, target: 'vda', bus: 'virtio', readonly: false }];
  if (volumes.data) {
    const data =
      'existing' in volumes.data
        ? existingSource(volumes.data.existing, volumes.pool)
        : { kind: 'volume' as const, pool: volumes.pool, volume: volumes.data.name };
    disks.push({ device: 'disk', format: 'qcow2', source: data, target: 'vdb', bus: 'virtio', readonly: false });
  }
  disks.push({
    device: 'cdrom',
    format: 'raw',
    source: { kind: 'volume', pool: volumes.cloudInit.pool, volume: volumes.cloudInit.name },
    target: 'sda',
    bus: 'scsi',
    readonly: true,
  });
  return disks;
}

/**
 * The domain XML of a member. `networkNames` resolves interfaces given by network_id (uuid) to the
 * network's name on the hypervisor (steps/networks.ts); without it (--render-only, which contacts no
 * hypervisor) the uuid stands where the name goes.
 */
export function renderDomainXml(identity: ClusterIdentity, member: Member, networkNames: ReadonlyMap<string, string> = new Map()): string {
  const interfaces = member.interfaces.map((nic) => ({
    mac: nic.mac,
    source:
      nic.source.kind === 'macvtap'
        ? { kind: 'macvtap', device: nic.source.device }
        : {
            kind: 'network',
            network:
              nic.source.kind === 'network' ? nic.source.networkName : (networkNames.get(nic.source.networkId) ?? nic.source.networkId),
          },
  }));
  return renderTemplate('domain.xml.ejs', {
    name: member.name,
    cluster: identity.cluster,
    title: domainTitle(member.name, identity.cluster),
    owner: { namespace: OWNER_NAMESPACE, prefix: OWNER_PREFIX, id: identity.id ?? 'new' },
    domainType: member.hypervisor.domainType,
    tcgTbCacheMib: member.hypervisor.domainType === 'qemu' ? member.hypervisor.tcgTbCacheMib : 0,
    memoryMib: member.memoryMib,
    vcpus: member.vcpus,
    disks: domainDisks(member),
    interfaces,
  });
}
