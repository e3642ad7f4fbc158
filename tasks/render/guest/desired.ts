import { guestFragmentsBothWays, type CloudInitInput } from '../cloud-init.ts';
import type { GuestService, ImagePackage, ManagedDirectory, RetiredParts } from './fragment.ts';
import { managedRelease, stagedRelease, type GuestRelease } from '../etcd-release.ts';

/**
 * What a member contains once it runs: every file the guest features write (path, content, mode,
 * owner, the service it configures) and every service that must be enabled and running. The same
 * fragments give cloud-init its first boot (renderUserData), so a file can never be in one and
 * missing from the other.
 */

export interface ManagedFile {
  path: string;
  /** Permission bits, as a number (0o644). */
  mode: number;
  /** user:group */
  owner: string;
  /** The real content: written to the guest over stdin, never shown. */
  content: string;
  /** The content with every secret masked: what diffs show. */
  display: string;
  /** Holds a secret: its current content is never read back for a diff. */
  secret: boolean;
  notify?: string;
}

export interface DesiredGuest {
  files: ManagedFile[];
  /** Directories held to their owner and mode where they exist. */
  directories: ManagedDirectory[];
  services: GuestService[];
  /** etcd's data directory: holds member/ once the member has joined its cluster. */
  dataDir: string;
  /** With binaries: release, the etcd release the member runs (installed by the tool before etcd.env names it). */
  release?: GuestRelease;
  /** etcd.stage_version's release: installed beside the running one, not run (a later roll to it restarts only). */
  staged?: GuestRelease;
  /** Units and files the features installed under another configuration: stopped and removed where found. */
  retired: RetiredParts;
  /** Debian packages the features' programs need; `install`: the guest step installs those missing (install_dependencies). */
  packages: { needed: ImagePackage[]; install: boolean };
}

/** `fragments`: the same input's, when the caller has them already (its user-data is rendered from them too). */
export function desiredGuest(input: Omit<CloudInitInput, 'writeSecret'>, fragments = guestFragmentsBothWays(input)): DesiredGuest {
  const { real, shown } = fragments;
  const files: ManagedFile[] = [];
  real.forEach((fragment, i) => {
    const masked = shown[i]!.writeFiles ?? [];
    (fragment.writeFiles ?? []).forEach((file, j) => {
      const display = masked[j]!.content;
      files.push({
        path: file.path,
        mode: Number.parseInt(file.permissions, 8),
        owner: file.owner ?? 'root:root',
        content: file.content,
        display,
        secret: display !== file.content,
        ...(file.notify ? { notify: file.notify } : {}),
      });
    });
  });
  const release = managedRelease(input.inventory);
  const staged = stagedRelease(input.inventory);
  return {
    files,
    directories: real.flatMap((fragment) => fragment.directories ?? []),
    services: real.flatMap((fragment) => fragment.services ?? []),
    dataDir: input.inventory.etcd.dataDir,
    ...(release ? { release } : {}),
    ...(staged ? { staged } : {}),
    retired: {
      units: real.flatMap((fragment) => fragment.retired?.units ?? []),
      paths: real.flatMap((fragment) => fragment.retired?.paths ?? []),
      why: Object.assign({}, ...real.map((fragment) => fragment.retired?.why ?? {})),
    },
    packages: { needed: real.flatMap((fragment) => fragment.needs ?? []), install: input.member.installDependencies },
  };
}
