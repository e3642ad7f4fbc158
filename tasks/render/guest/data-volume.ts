import type { Member } from '../../inventory/model.ts';
import type { CloudConfigFragment } from './fragment.ts';

/**
 * The optional data disk (vdb) holds etcd's data directory. It is formatted only when it holds no
 * file system or partition table at all (`blkid -p` finds no signature), by a bootcmd that runs
 * before cloud-init mounts it — not by fs_setup: cloud-init 22.4's fs_setup with `partition: none`
 * skips its existing-file-system check and runs mkfs with -F on a whole disk, so a member whose OS
 * disk is replaced would lose its data disk at the new instance's first boot (seen in the lab). The
 * file system spans the whole disk: MBR partitioning (disk_setup) fails with bookworm's sfdisk
 * ("Start sector 0 out of range"), and a dedicated disk needs no table. etcd.service requires the
 * mount (RequiresMountsFor), so etcd never starts on the OS disk's empty directory when the data
 * disk is missing.
 */

export const DATA_DISK = { device: '/dev/vdb', label: 'etcd-data', filesystem: 'ext4' } as const;

/** Formats the device unless it already holds anything blkid recognises; safe to run on every boot. */
export const FORMAT_IF_BLANK = ['sh', '-c', 'blkid -p "$1" >/dev/null 2>&1 || mkfs.ext4 -q -L "$2" "$1"', 'sh'] as const;

export function dataVolumeFragment(member: Member, dataDir: string): CloudConfigFragment {
  if (!member.volumes.data) return {};
  return {
    modules: {
      bootcmd: [[...FORMAT_IF_BLANK, DATA_DISK.device, DATA_DISK.label]],
      mounts: [[`LABEL=${DATA_DISK.label}`, dataDir, DATA_DISK.filesystem, 'defaults,nofail,x-systemd.before=etcd.service', '0', '2']],
    },
  };
}
