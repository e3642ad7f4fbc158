/**
 * A piece of a member's cloud-config contributed by one guest feature (etcd, data volume, chrony,
 * node exporter, fluent-bit, vault agent, upstream installs). renderUserData merges them in order.
 */

import { SYSTEMCTL_ENABLE } from './systemctl.ts';

export interface WriteFile {
  path: string;
  permissions: string;
  owner?: string;
  content: string;
  /** Written in the final stage, after packages and users exist (needed for service-owned secrets). */
  defer?: boolean;
  /**
   * The unit this file configures: when the file changes after the unit started, the unit is
   * restarted (or reloaded, as the service says). Files a service re-reads by itself notify nothing.
   */
  notify?: string;
}

/** A service a feature runs in the guest: enabled and running, restarted when a file it reads changes. */
export interface GuestService {
  unit: string;
  /** How a changed file takes effect: a restart, or a reload where the service supports one. */
  onChange: 'restart' | 'reload';
  /** Restarted one member at a time, each waiting for the cluster's health (etcd: never lose quorum). */
  rolling?: boolean;
  /**
   * The managed EnvironmentFile whose variables the running process must carry: a process started
   * before the file changed is stale, whatever the file's time says (a run killed between writing and
   * restarting is finished by the next). Variables in `ignore` take effect only at first start.
   */
  environment?: { path: string; ignore: readonly string[] };
  /** Started at first boot without waiting for it (`systemctl --no-block`): the boot ends whether it runs yet or not. */
  firstBootNoWait?: true;
}

export type Command = string[];

export interface CloudConfigFragment {
  users?: Record<string, unknown>[];
  writeFiles?: WriteFile[];
  /** Top-level cloud-config modules other than users/write_files/runcmd (disk_setup, mounts…). */
  modules?: Record<string, unknown>;
  /** One-time preparation run by runcmd in the final stage, in fragment order, before its services start. */
  runcmd?: Command[];
  /** Services enabled and (re)started at first boot after the preparation, and kept so on every run. */
  services?: GuestService[];
  /**
   * What this feature installs under another configuration of the inventory and must not outlive it
   * (a task turned off): the guest step stops the units and removes the files wherever they are left.
   * A first boot has none of them: cloud-init ignores it.
   */
  retired?: RetiredParts;
  /** Debian packages this feature's programs need in the guest (see ImagePackage). */
  needs?: ImagePackage[];
  /** Directories of this feature's files that its service's user must enter (see ManagedDirectory). */
  directories?: ManagedDirectory[];
}

/**
 * A directory the guest step holds to its owner and mode where it exists (a write makes it as it is wanted, and
 * cloud-init's write_files makes its files' directories 0755 and root's at first boot). Versions before 2026-12-03
 * made the directories of a feature turned on after the first boot 0700, which the feature's service, running as
 * another user, could not enter: the next run repairs them.
 */
export interface ManagedDirectory {
  path: string;
  /** Permission bits, as a number (0o755). */
  mode: number;
  /** user:group */
  owner: string;
}

/**
 * A Debian package a feature's program needs in the member's image. With install_dependencies it is among
 * cloud-init's packages at first boot, and the guest step installs it where it is missing; without, a member
 * whose image lacks it is refused by name (never a timer that fails at every tick). The probe stats `path`,
 * a file the package installs (no process in the guest).
 */
export interface ImagePackage {
  name: string;
  path: string;
  /** What needs it, for the refusal. */
  why: string;
}

export interface RetiredParts {
  /** Units stopped and their enable links removed (their unit files are among `paths`). */
  units: string[];
  paths: string[];
  /** Why a path must go, where it is not a task turned off in the inventory. */
  why?: Record<string, string>;
}

/** Secrets inside the guest: readable by the owning service only, written after its user exists. */
export function secretFile(path: string, owner: string, content: string, notify?: string): WriteFile {
  return { path, permissions: owner === 'root:root' ? '0600' : '0400', owner, content, defer: true, ...(notify ? { notify } : {}) };
}

/** The states `systemctl is-enabled --quiet` answers 0 for: nothing to enable. */
const NEEDS_NO_ENABLE = ['enabled', 'enabled-runtime', 'static', 'indirect', 'generated', 'transient', 'alias'];

/**
 * `sh -c ENABLE_UNLESS_ENABLED sh UNIT…`: enables those of the units that are not, with one systemctl asking
 * every unit's state (one line each, in order) and at most one enabling the rest. A process costs seconds
 * in a guest booting under emulation beside others (the restore chain's members spent ~9 s a systemctl).
 */
export const ENABLE_UNLESS_ENABLED = [
  'set -f; todo=',
  'for unit; do',
  '  IFS= read -r state || state=',
  `  case $state in ${NEEDS_NO_ENABLE.join('|')}) ;; *) todo="$todo $unit" ;; esac`,
  'done <<EOF',
  '$(systemctl is-enabled "$@" 2>/dev/null)',
  'EOF',
  `[ -z "$todo" ] || ${SYSTEMCTL_ENABLE} $todo`,
].join('\n');

/**
 * First boot: every fragment's preparation in fragment order, then their services: systemd reads the unit
 * files write_files put in place once (each reload costs ~7 s under emulation), the services not enabled
 * are enabled, and they are started together — restarted where a fragment wrote a file the service reads,
 * since the image may already run it with its packaged configuration (chrony). The cluster's own service
 * (etcd, rolling) starts last: its start returns only once the cluster has formed, and the first boot,
 * which the deploy waits for, then ends at once instead of restarting chrony and the rest afterwards
 * (~9 s under emulation). A joiner booted ahead of its turn starts etcd without waiting (firstBootNoWait): it is not a member yet.
 */
export function firstBootCommands(fragments: readonly CloudConfigFragment[]): Command[] {
  const preparation = fragments.flatMap((fragment) => fragment.runcmd ?? []);
  const services = fragments.flatMap((fragment) =>
    (fragment.services ?? []).map((service) => ({
      unit: service.unit,
      rolling: service.rolling === true,
      noWait: service.firstBootNoWait === true,
      verb: (fragment.writeFiles ?? []).some((file) => file.notify === service.unit) ? 'restart' : 'start',
    })),
  );
  if (!services.length) return preparation;
  const together = (['start', 'restart'] as const)
    .map((verb) => [verb, ...services.filter((service) => !service.rolling && service.verb === verb).map((service) => service.unit)])
    .filter((command) => command.length > 1);
  return [
    ...preparation,
    ['systemctl', 'daemon-reload'],
    ['sh', '-c', ENABLE_UNLESS_ENABLED, 'sh', ...services.map((service) => service.unit)],
    ...together.map((command) => ['systemctl', ...command]),
    ...services
      .filter((service) => service.rolling)
      .map((service) => ['systemctl', ...(service.noWait ? ['--no-block'] : []), service.verb, service.unit]),
  ];
}
