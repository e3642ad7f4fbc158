import type { Member } from '../../inventory/model.ts';
import type { CloudConfigFragment } from './fragment.ts';

/**
 * The optional data disk (vdb) holds etcd's data directory. cloud-init formats it only when it holds
 * no file system yet (overwrite: false), so a disk that already holds etcd's data is mounted as it
 * is. The file system spans the whole disk: cloud-init 22.4's MBR partitioning (disk_setup) fails
 * with bookworm's sfdisk ("Start sector 0 out of range"), and a dedicated disk needs no table. etcd.service requires the mount (RequiresMountsFor), so
 * etcd never starts on the OS disk's empty directory when the data disk is missing.
 */

export const DATA_DISK = { device: '/dev/vdb', label: 'etcd-data', filesystem: 'ext4' } as const;

export function dataVolumeFragment(member: Member, dataDir: string): CloudConfigFragment {
  if (!member.volumes.data) return {};
  return {
    modules: {
      fs_setup: [{ label: DATA_DISK.label, filesystem: DATA_DISK.filesystem, device: DATA_DISK.device, partition: 'none', overwrite: false }],
      mounts: [[`LABEL=${DATA_DISK.label}`, dataDir, DATA_DISK.filesystem, 'defaults,nofail,x-systemd.before=etcd.service', '0', '2']],
    },
  };
}
