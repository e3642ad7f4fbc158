/**
 * The `etcd-kvm` command's table of commands (each a script under tasks/), the one list that
 * --help (cli/main.ts) and the shell completion (cli/completion.ts) are made from.
 */

export interface Command {
  name: string;
  /** The entry script under tasks/, without its extension (the same table serves .ts run by tsx and compiled .js). */
  module: string;
  summary: string;
  /** Its long flags, for completion only; test/integration/bin.test.ts holds them against the script's own --help. */
  flags: readonly string[];
}

export const COMMANDS: readonly Command[] = [
  {
    name: 'deploy',
    module: 'deploy',
    summary: 'turn the inventory into a running TLS etcd cluster on libvirt VMs, or bring it back to it',
    // Hand-listed: DEPLOY_FLAGS (tasks/cli/options.ts) comes with the step
    // registry, which this table must not load; bin.test.ts holds them equal.
    flags: [
      '--inventory',
      '--dry-run',
      '--check',
      '--diff',
      '--render-only',
      '--limit',
      '--tags',
      '--skip-tags',
      '--list-phases',
      '--plan-out',
      '--plan',
      '--renew-certs',
      '--rotate-ca',
      '--replace',
      '--adopt',
      '--accept-mismatch',
      '--detailed-exitcode',
      '--profile',
      '--json',
      '--debug',
      '--help',
    ],
  },
  {
    name: 'doctor',
    module: 'doctor',
    summary: 'check the ground before a deploy: tools here; libvirt, /dev/kvm, pools, images, networks there',
    flags: ['--inventory', '--json', '--help'],
  },
  {
    name: 'status',
    module: 'status',
    summary: "read each member's VM, etcd role, sizes, alarms and certificate expiry",
    flags: ['--inventory', '--json', '--help'],
  },
  {
    name: 'verify',
    module: 'verify',
    summary: 'show that the members agree: HashKV at one revision, member lists, alarms, a canary',
    flags: ['--inventory', '--json', '--help'],
  },
  {
    name: 'drill',
    module: 'drill',
    summary: 'a fault drill: real faults one at a time under load, then no write lost and reads linearizable',
    flags: ['--inventory', '--faults', '--hold', '--dry-run', '--json', '--report', '--svg', '--help'],
  },
  {
    name: 'maintain',
    module: 'maintain',
    summary: 'compact, defragment or clear a NOSPACE alarm, on a healthy cluster only',
    flags: ['--inventory', '--compact', '--defrag', '--disarm', '--dry-run', '--help'],
  },
  {
    name: 'backup',
    module: 'backup',
    summary: 'upload a sealed etcd snapshot to restore.s3, or prove one restores (--verify: a restore drill)',
    flags: ['--inventory', '--member', '--keep', '--verify', '--help'],
  },
  {
    name: 'recover',
    module: 'recover',
    summary: 'bring back a cluster that lost its quorum for good, from its most advanced survivor',
    flags: ['--inventory', '--from-member', '--from-snapshot', '--dry-run', '--help'],
  },
  {
    name: 'client',
    module: 'client',
    summary: "write a user's CA, certificate, key and etcdctl.env for a client machine",
    flags: ['--inventory', '--user', '--out', '--help'],
  },
  {
    name: 'monitoring',
    module: 'monitoring',
    summary: 'write a Prometheus configuration, scrape targets and alert rules for the cluster (offline)',
    flags: ['--inventory', '--out', '--dry-run', '--help'],
  },
  {
    name: 'logs',
    module: 'logs',
    summary: "print a member's journal (etcd's by default) over SSH through its hypervisor, host keys pinned",
    flags: ['--inventory', '--lines', '--follow', '--since', '--help'],
  },
  {
    name: 'ssh',
    module: 'ssh',
    summary: 'a shell (or one command) in a member, through its hypervisor with the pinned host keys',
    flags: ['--inventory', '--help'],
  },
  {
    name: 'etcdctl',
    module: 'etcdctl',
    summary: "run this machine's etcdctl against the cluster as root, through the tool's own tunnels",
    flags: ['--inventory', '--member', '--help'],
  },
  {
    name: 'state',
    module: 'state',
    summary: "encrypt or decrypt the state directory's private keys with a passphrase",
    flags: ['--inventory', '--encrypt', '--decrypt', '--help'],
  },
];
