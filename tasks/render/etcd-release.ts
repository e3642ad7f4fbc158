import type { Inventory, Member } from '../inventory/model.ts';
import { etcdBinaryDir } from './guest/dependencies.ts';
import { compareVersions, releaseTag, type EtcdVersion } from '../upgrade/version.ts';

/**
 * etcd's binaries in a member with `binaries: release`: one directory per release under /opt/etcd-kvm,
 * as the archive unpacks (etcd, etcdctl and, from 3.5, etcdutl), the environment file naming the one
 * the unit runs (RELEASE_BINARY_VARIABLE). A roll changes that file to another directory and keeps the
 * one before: going back is the file's old text. The unit's text is the same for every version, so a
 * roll needs no `systemctl daemon-reload` (4 s per member in an emulated guest, as long as the restart).
 * With `binaries: image` etcd is the image's (or install_dependencies'), as it always was.
 */

export const RELEASES_GUEST_DIR = '/opt/etcd-kvm';

/** The environment file's variable naming the binary the unit runs; not ETCD_*, which etcd reads as its own flags. */
export const RELEASE_BINARY_VARIABLE = 'ETCDKVM_BINARY';

/** Some release's binary (the unit's condition: etcd waits until the tool has installed one). */
export const ANY_RELEASE_BINARY = `${RELEASES_GUEST_DIR}/etcd-v*-linux-amd64/etcd`;

export interface GuestRelease {
  version: EtcdVersion;
  /** /opt/etcd-kvm/etcd-v3.5.16-linux-amd64: the archive's top directory, kept as it unpacks. */
  dir: string;
  binary: string;
}

export const guestReleaseOf = (version: EtcdVersion): GuestRelease => {
  const dir = `${RELEASES_GUEST_DIR}/etcd-${releaseTag(version)}-linux-amd64`;
  return { version, dir, binary: `${dir}/etcd` };
};

/** The release every member runs, when the tool manages etcd's binaries. */
export function managedRelease(inventory: Inventory): GuestRelease | undefined {
  const { etcd } = inventory;
  return etcd.binaries === 'release' ? guestReleaseOf(etcd.version) : undefined;
}

/**
 * The release staged ahead of a roll (etcd.stage_version): installed beside the one that runs and
 * not run. None when it is the running one.
 */
export function stagedRelease(inventory: Inventory): GuestRelease | undefined {
  const running = managedRelease(inventory);
  const version = inventory.etcd.binaries === 'release' ? inventory.etcd.stageVersion : undefined;
  if (!running || !version || compareVersions(version, running.version) === 0) return undefined;
  return guestReleaseOf(version);
}

const V3_5: EtcdVersion = { major: 3, minor: 5, patch: 0 };

/** Where a member's etcdctl (and, from 3.5, etcdutl) are: the managed release's, else the image's or the installer's. */
export const etcdToolsDir = (inventory: Inventory, member: Member): string => managedRelease(inventory)?.dir ?? etcdBinaryDir(member);

/**
 * The program that restores a snapshot into a data directory: etcdutl from 3.5 (etcdctl's `snapshot
 * restore` is deprecated there and gone in 3.6), etcdctl before. Only a release the tool installs
 * (binaries: release, or install_dependencies' download) has a version known here; an image's etcdctl
 * restores as it always did.
 */
export function snapshotRestoreProgram(inventory: Inventory, member: Member): string[] {
  const dir = etcdToolsDir(inventory, member);
  const known = knownEtcdVersion(inventory, member);
  return known && compareVersions(known, V3_5) >= 0 ? [`${dir}/etcdutl`] : ['env', 'ETCDCTL_API=3', `${dir}/etcdctl`];
}

/**
 * The settings whose name or default differs between etcd versions, for the version the member runs
 * (release binaries only: with the image's the version is not the tool's to know before etcd runs).
 * etcd's corruption checks, whose names differ too, are corruption-checks.ts's.
 * - snapshot-count: 3.6 lowered the default from 100000 to 10000; pinned, so a roll changes no behaviour.
 * - 3.4 logs with capnslog unless told otherwise (removed in 3.5): zap keeps one log format across a roll.
 */
export function versionSettings(version: EtcdVersion): [string, string][] {
  return [...(compareVersions(version, V3_5) < 0 ? [['ETCD_LOGGER', 'zap'] as [string, string]] : []), ['ETCD_SNAPSHOT_COUNT', '10000']];
}

/** The etcd version a member runs, where the tool installs it: a managed release, or install_dependencies' download. */
export function knownEtcdVersion(inventory: Inventory, member: Member): EtcdVersion | undefined {
  const managed = managedRelease(inventory);
  if (managed) return managed.version;
  return member.installDependencies ? inventory.etcd.version : undefined;
}
