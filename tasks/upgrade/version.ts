/**
 * etcd's release versions, and what etcd supports moving between them: a patch step within a minor,
 * or one minor forward (etcd's upgrade policy, docs/v3.x/upgrades/upgrading-etcd). Backwards is a
 * binary swap while the cluster version has not moved; once it has, only etcd's own downgrade
 * procedure goes back, which this tool does not run.
 */

export interface EtcdVersion {
  major: number;
  minor: number;
  patch: number;
}

/** `v3.5.16`, `3.5.16`; etcd's `/version` and Status answers carry the bare form. */
export function parseVersion(text: string): EtcdVersion | undefined {
  const match = /^v?(\d+)\.(\d+)\.(\d+)$/.exec(text.trim());
  if (!match) return undefined;
  return { major: Number(match[1]), minor: Number(match[2]), patch: Number(match[3]) };
}

export const formatVersion = (version: EtcdVersion) => `${version.major}.${version.minor}.${version.patch}`;

/** The release's tag: how etcd names its release directories and tarballs. */
export const releaseTag = (version: EtcdVersion) => `v${formatVersion(version)}`;

/** 3.5: the minor, as etcd's cluster version is reported and compared. */
export const minorOf = (version: EtcdVersion) => `${version.major}.${version.minor}`;

export function compareVersions(a: EtcdVersion, b: EtcdVersion): number {
  return a.major - b.major || a.minor - b.minor || a.patch - b.patch;
}

export const sameVersion = (a: EtcdVersion, b: EtcdVersion) => compareVersions(a, b) === 0;

/** A minor's rank on one line, so 3.4 → 3.5 is one and 3.4 → 4.0 is not a step anyone supports. */
const minorRank = (version: EtcdVersion) => version.major * 1000 + version.minor;

export type VersionStep =
  | { kind: 'none' }
  | { kind: 'patch' }
  | { kind: 'minor' }
  | { kind: 'back-patch' }
  | { kind: 'back-minor' }
  | { kind: 'too-far'; minors: number };

/** How `from` moves to `to`, as etcd's upgrade policy sees it. */
export function stepBetween(from: EtcdVersion, to: EtcdVersion): VersionStep {
  if (sameVersion(from, to)) return { kind: 'none' };
  const minors = minorRank(to) - minorRank(from);
  if (minors === 0) return { kind: compareVersions(to, from) > 0 ? 'patch' : 'back-patch' };
  if (minors === 1 && from.major === to.major) return { kind: 'minor' };
  if (minors < 0) return minors === -1 && from.major === to.major ? { kind: 'back-minor' } : { kind: 'too-far', minors };
  return { kind: 'too-far', minors };
}
