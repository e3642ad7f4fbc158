import { spawn } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { $ } from 'zx';
import { LAB, SECOND, SECOND_LIBVIRT_DIRS, SECOND_URI, labPath, secondPath } from './config.ts';
import { livePid, stopByPidFile, waitFor } from './processes.ts';
import { RELEASE_SERVER_COMMAND, releasesServed, startReleaseServer } from './releases.ts';
import { virshAt } from './libvirt.ts';

/**
 * The lab's daemons. libvirtd, virtlogd and the hypervisor's sshd run inside the network namespace, so
 * bridges, dnsmasq and every VM address exist only there; a socat forwarder on the root namespace's
 * loopback is the only way in. The second hypervisor has the same four of its own.
 */

interface Daemon {
  name: string;
  /** /proc/<pid>/comm of the process, to tell a live daemon from a recycled PID. */
  command: string;
  pidFile: string;
  start(): Promise<void>;
  ready(): Promise<boolean>;
}

const run = (...parts: string[]) => labPath('run', ...parts);

/** A command line in a network namespace: the first hypervisor's, or the second's with its own libvirt directories. */
type Within = (command: string[]) => string[];
const inFirst: Within = (command) => ['ip', 'netns', 'exec', LAB.namespace, ...command];
/**
 * In the second hypervisor's network namespace and a private mount namespace where its directories
 * stand in for the machine's libvirt ones. A daemon keeps the mount namespace after the shell is gone;
 * every daemon of the second hypervisor (and every SSH session of its sshd) sees the same directories.
 */
const inSecond: Within = (command) => {
  const binds = SECOND_LIBVIRT_DIRS.map(([dir, target]) => `mount --bind '${secondPath(dir)}' '${target}' && `).join('');
  return [
    'ip',
    'netns',
    'exec',
    SECOND.namespace,
    'unshare',
    '--mount',
    '--propagation',
    'private',
    'sh',
    '-c',
    `${binds}exec "$@"`,
    'sh',
    ...command,
  ];
};

/** virtlogd and libvirtd start alike: daemonised in the namespace with a PID file under run/. */
const libvirtDaemon = (name: string, command: string, within: Within, ready: () => Promise<boolean>): Daemon => ({
  name,
  command,
  pidFile: run(`${name}.pid`),
  start: async () => {
    await $`${within([command, '--daemon', '--pid-file', run(`${name}.pid`)])}`;
  },
  ready,
});

const virtlogd = libvirtDaemon('virtlogd', 'virtlogd', inFirst, async () => existsSync('/run/libvirt/virtlogd-sock'));
const libvirtd = libvirtDaemon('libvirtd', 'libvirtd', inFirst, () => virshAt('qemu:///system').ok(['version']));
const secondVirtlogd = libvirtDaemon('lab2-virtlogd', 'virtlogd', inSecond, async () => existsSync(secondPath('run', 'virtlogd-sock')));
const secondLibvirtd = libvirtDaemon('lab2-libvirtd', 'libvirtd', inSecond, () => virshAt(SECOND_URI).ok(['version']));

/** The lab's root shell start-up file, empty: what a hypervisor's root shell runs before each SSH command. */
const PLAIN_BASHRC = labPath('root_bashrc');

/**
 * Every SSH command runs through the user's shell, and bash started by sshd reads ~/.bashrc. This
 * machine's /root/.bashrc runs `pyenv init`, a dozen processes (~0.13 s before every command the
 * tool sends a hypervisor, measured with strace): a cost of the development machine, not of a
 * hypervisor. The lab's sshds run in a private mount namespace where an empty file stands in for it.
 */
const withPlainShell =
  (within: Within): Within =>
  (command) =>
    within([
      'unshare',
      '--mount',
      '--propagation',
      'private',
      'sh',
      '-c',
      `if [ -f /root/.bashrc ]; then mount --bind '${PLAIN_BASHRC}' /root/.bashrc; fi; exec "$@"`,
      'sh',
      ...command,
    ]);

/** An sshd daemonised in a namespace from its own config, ready when every listen address shows its host key. */
const sshDaemon = (
  name: string,
  namespace: string,
  within: Within,
  config: string,
  port: number,
  addresses: readonly string[],
): Daemon => ({
  name,
  command: 'sshd',
  pidFile: run(`${name}.pid`),
  start: async () => {
    mkdirSync('/run/sshd', { recursive: true, mode: 0o755 });
    await $`${withPlainShell(within)(['/usr/sbin/sshd', '-f', labPath(config)])}`;
  },
  // Every listen address: an sshd started from an older config (fewer addresses) is restarted.
  ready: async () => {
    for (const address of addresses) {
      const scan = await $`ip netns exec ${namespace} ssh-keyscan -T 2 -p ${port} ${address}`.nothrow().quiet();
      if (!scan.stdout.includes('ssh-ed25519')) return false;
    }
    return true;
  },
});

const sshd = sshDaemon('sshd', LAB.namespace, inFirst, 'sshd_config', LAB.sshdPortInNamespace, [
  '127.0.0.1',
  LAB.macvtap.hypervisorAddress,
]);
const inClient: Within = (command) => ['ip', 'netns', 'exec', LAB.macvtap.clientNamespace, ...command];
const bastionSshd = sshDaemon('bastion-sshd', LAB.macvtap.clientNamespace, inClient, 'bastion_sshd_config', LAB.bastion.portInNamespace, [
  '127.0.0.1',
]);
/** The second hypervisor's sshd: its sessions run virsh against the second libvirtd. */
const secondSshd = sshDaemon('lab2-sshd', SECOND.namespace, inSecond, 'lab2_sshd_config', SECOND.sshdPortInNamespace, ['127.0.0.1']);

/** socat on the root namespace's loopback forks a child per connection that enters the namespace and connects to the sshd there. */
const forwarderTo = (name: string, listenPort: number, namespace: string, port: number): Daemon => ({
  name,
  command: 'socat',
  pidFile: run(`${name}.pid`),
  start: async () => {
    const child = spawn(
      'socat',
      [
        `TCP-LISTEN:${listenPort},bind=${LAB.forwardHost},reuseaddr,fork,nodelay`,
        `EXEC:ip netns exec ${namespace} socat STDIO TCP4\\:127.0.0.1\\:${port}\\,nodelay,nofork`,
      ],
      { detached: true, stdio: 'ignore' },
    );
    child.unref();
    writeFileSync(run(`${name}.pid`), `${child.pid}\n`);
  },
  ready: () =>
    new Promise((resolve) => {
      const socket = connect({ host: LAB.forwardHost, port: listenPort });
      socket.once('data', (banner) => {
        socket.destroy();
        resolve(banner.toString().startsWith('SSH-'));
      });
      socket.once('error', () => resolve(false));
    }),
});

const forwarder = forwarderTo('forwarder', LAB.forwardPort, LAB.namespace, LAB.sshdPortInNamespace);
const bastionForwarder = forwarderTo(
  'bastion-forwarder',
  LAB.bastion.forwardPort,
  LAB.macvtap.clientNamespace,
  LAB.bastion.portInNamespace,
);
const secondForwarder = forwarderTo('lab2-forwarder', SECOND.forwardPort, SECOND.namespace, SECOND.sshdPortInNamespace);

/** The etcd releases lab:up builds (releases.ts), over HTTP on the root namespace's loopback. */
const releaseServer: Daemon = {
  name: 'release-server',
  command: RELEASE_SERVER_COMMAND,
  pidFile: run('release-server.pid'),
  start: async () => startReleaseServer(run('release-server.pid')),
  ready: releasesServed,
};

/** In start order; stopped in reverse. */
export const DAEMONS: Daemon[] = [
  virtlogd,
  libvirtd,
  sshd,
  forwarder,
  bastionSshd,
  bastionForwarder,
  secondVirtlogd,
  secondLibvirtd,
  secondSshd,
  secondForwarder,
  releaseServer,
];

/** Host key, authorised client key and config of the hypervisor's sshd; created once, kept across runs. */
export async function ensureSshdFiles(): Promise<void> {
  mkdirSync(run(), { recursive: true });
  const hostKey = labPath('ssh_host_ed25519_key');
  const clientKey = labPath('client_key');
  if (!existsSync(hostKey)) await $`ssh-keygen -q -t ed25519 -N ${''} -C ${'etcd-kvm-lab hypervisor'} -f ${hostKey}`;
  if (!existsSync(clientKey)) await $`ssh-keygen -q -t ed25519 -N ${''} -C ${'etcd-kvm-lab client'} -f ${clientKey}`;
  writeFileSync(labPath('authorized_keys'), readFileSync(`${clientKey}.pub`), { mode: 0o600 });
  writeFileSync(PLAIN_BASHRC, '', { mode: 0o644 });
  // The bastion has a host key of its own: every hop of a jump chain is verified on its own.
  const bastionHostKey = labPath('bastion_ssh_host_ed25519_key');
  if (!existsSync(bastionHostKey)) await $`ssh-keygen -q -t ed25519 -N ${''} -C ${'etcd-kvm-lab bastion'} -f ${bastionHostKey}`;
  const secondHostKey = labPath('lab2_ssh_host_ed25519_key');
  if (!existsSync(secondHostKey)) await $`ssh-keygen -q -t ed25519 -N ${''} -C ${'etcd-kvm-lab second hypervisor'} -f ${secondHostKey}`;
  const sshdConfig = (port: number, listen: readonly string[], key: string, pidFile: string) =>
    [
      `Port ${port}`,
      ...listen.map((address) => `ListenAddress ${address}`),
      `HostKey ${key}`,
      `PidFile ${pidFile}`,
      `AuthorizedKeysFile ${labPath('authorized_keys')}`,
      'PermitRootLogin prohibit-password',
      'PasswordAuthentication no',
      'KbdInteractiveAuthentication no',
      'UsePAM no',
      'AllowTcpForwarding yes',
      'MaxSessions 10',
      'Subsystem sftp internal-sftp',
      '',
    ].join('\n');
  writeFileSync(
    labPath('sshd_config'),
    sshdConfig(LAB.sshdPortInNamespace, ['127.0.0.1', LAB.macvtap.hypervisorAddress], hostKey, run('sshd.pid')),
  );
  writeFileSync(
    labPath('bastion_sshd_config'),
    sshdConfig(LAB.bastion.portInNamespace, ['127.0.0.1'], bastionHostKey, run('bastion-sshd.pid')),
  );
  writeFileSync(labPath('lab2_sshd_config'), sshdConfig(SECOND.sshdPortInNamespace, ['127.0.0.1'], secondHostKey, run('lab2-sshd.pid')));
  // What the lab inventories point at: the client key and the pinned host keys of [127.0.0.1]:2222
  // (inventories/lab.yaml, through the forwarder), of the macvtap segment's hypervisor address, of the
  // bastion ([127.0.0.1]:2223) and of the second hypervisor ([127.0.0.1]:2224).
  mkdirSync(LAB.clientDir, { recursive: true, mode: 0o700 });
  copyFileSync(clientKey, join(LAB.clientDir, 'client_key'));
  chmodSync(join(LAB.clientDir, 'client_key'), 0o600);
  const publicOf = (key: string) => readFileSync(`${key}.pub`, 'utf8').trim().split(' ').slice(0, 2).join(' ');
  const hostPublic = publicOf(hostKey);
  writeFileSync(
    join(LAB.clientDir, 'known_hosts'),
    [
      `[${LAB.forwardHost}]:${LAB.forwardPort} ${hostPublic}`,
      `${LAB.macvtap.hypervisorAddress} ${hostPublic}`,
      `[${LAB.forwardHost}]:${LAB.bastion.forwardPort} ${publicOf(bastionHostKey)}`,
      `[${LAB.forwardHost}]:${SECOND.forwardPort} ${publicOf(secondHostKey)}`,
      '',
    ].join('\n'),
  );
}

/** Starts the daemons that are not running (all, or the named ones), in order. */
export async function startDaemons(log: (line: string) => void, only?: readonly string[]): Promise<void> {
  for (const daemon of DAEMONS.filter((candidate) => !only || only.includes(candidate.name))) {
    const pid = livePid(daemon.pidFile, daemon.command);
    if (pid !== undefined && (await daemon.ready())) continue;
    if (pid !== undefined) await stopByPidFile(daemon.pidFile, daemon.command);
    await daemon.start();
    await waitFor(daemon.name, daemon.ready, 30_000);
    log(`${daemon.name}: started (pid ${livePid(daemon.pidFile, daemon.command) ?? '?'})`);
  }
}

/** Stops the running daemons (all, or those whose name starts with `prefix`), in reverse order. */
export async function stopDaemons(log: (line: string) => void, prefix = ''): Promise<void> {
  for (const daemon of [...DAEMONS].reverse().filter((candidate) => candidate.name.startsWith(prefix))) {
    if (await stopByPidFile(daemon.pidFile, daemon.command)) log(`${daemon.name}: stopped`);
  }
}

export function daemonStatus(): { name: string; pid?: number }[] {
  return DAEMONS.map((daemon) => ({ name: daemon.name, pid: livePid(daemon.pidFile, daemon.command) }));
}
