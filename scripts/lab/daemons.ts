import { spawn } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { $ } from 'zx';
import { LAB, labPath } from './config.ts';
import { livePid, stopByPidFile, waitFor } from './processes.ts';

/**
 * The lab's daemons. libvirtd, virtlogd and the hypervisor's sshd run inside the network namespace, so
 * bridges, dnsmasq and every VM address exist only there; a socat forwarder on the root namespace's
 * loopback is the only way in.
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

/** virtlogd and libvirtd start alike: daemonised in the namespace with a PID file under run/. */
const libvirtDaemon = (command: string, ready: () => Promise<boolean>): Daemon => ({
  name: command,
  command,
  pidFile: run(`${command}.pid`),
  start: async () => {
    await $`ip netns exec ${LAB.namespace} ${command} --daemon --pid-file ${run(`${command}.pid`)}`;
  },
  ready,
});

const virtlogd = libvirtDaemon('virtlogd', async () => existsSync('/run/libvirt/virtlogd-sock'));
const libvirtd = libvirtDaemon('libvirtd', async () => (await $`virsh -c qemu:///system version`.nothrow().quiet()).exitCode === 0);

const sshd: Daemon = {
  name: 'sshd',
  command: 'sshd',
  pidFile: run('sshd.pid'),
  start: async () => {
    mkdirSync('/run/sshd', { recursive: true, mode: 0o755 });
    await $`ip netns exec ${LAB.namespace} /usr/sbin/sshd -f ${labPath('sshd_config')}`;
  },
  // Both listen addresses: an sshd started from an older config (loopback only) is restarted.
  ready: async () => {
    for (const address of ['127.0.0.1', LAB.macvtap.hypervisorAddress]) {
      const scan = await $`ip netns exec ${LAB.namespace} ssh-keyscan -T 2 -p ${LAB.sshdPortInNamespace} ${address}`.nothrow().quiet();
      if (!scan.stdout.includes('ssh-ed25519')) return false;
    }
    return true;
  },
};

/** socat forks a child per connection that enters the namespace and connects to the sshd there. */
const forwarder: Daemon = {
  name: 'forwarder',
  command: 'socat',
  pidFile: run('forwarder.pid'),
  start: async () => {
    const child = spawn(
      'socat',
      [
        `TCP-LISTEN:${LAB.forwardPort},bind=${LAB.forwardHost},reuseaddr,fork`,
        `EXEC:ip netns exec ${LAB.namespace} socat STDIO TCP4\\:127.0.0.1\\:${LAB.sshdPortInNamespace},nofork`,
      ],
      { detached: true, stdio: 'ignore' },
    );
    child.unref();
    writeFileSync(run('forwarder.pid'), `${child.pid}\n`);
  },
  ready: () =>
    new Promise((resolve) => {
      const socket = connect({ host: LAB.forwardHost, port: LAB.forwardPort });
      socket.once('data', (banner) => {
        socket.destroy();
        resolve(banner.toString().startsWith('SSH-'));
      });
      socket.once('error', () => resolve(false));
    }),
};

/** In start order; stopped in reverse. */
export const DAEMONS: Daemon[] = [virtlogd, libvirtd, sshd, forwarder];

/** Host key, authorised client key and config of the hypervisor's sshd; created once, kept across runs. */
export async function ensureSshdFiles(): Promise<void> {
  mkdirSync(run(), { recursive: true });
  const hostKey = labPath('ssh_host_ed25519_key');
  const clientKey = labPath('client_key');
  if (!existsSync(hostKey)) await $`ssh-keygen -q -t ed25519 -N ${''} -C ${'etcd-kvm-lab hypervisor'} -f ${hostKey}`;
  if (!existsSync(clientKey)) await $`ssh-keygen -q -t ed25519 -N ${''} -C ${'etcd-kvm-lab client'} -f ${clientKey}`;
  writeFileSync(labPath('authorized_keys'), readFileSync(`${clientKey}.pub`), { mode: 0o600 });
  writeFileSync(
    labPath('sshd_config'),
    [
      `Port ${LAB.sshdPortInNamespace}`,
      'ListenAddress 127.0.0.1',
      `ListenAddress ${LAB.macvtap.hypervisorAddress}`,
      `HostKey ${hostKey}`,
      `PidFile ${run('sshd.pid')}`,
      `AuthorizedKeysFile ${labPath('authorized_keys')}`,
      'PermitRootLogin prohibit-password',
      'PasswordAuthentication no',
      'KbdInteractiveAuthentication no',
      'UsePAM no',
      'AllowTcpForwarding yes',
      'MaxSessions 10',
      'Subsystem sftp internal-sftp',
      '',
    ].join('\n'),
  );
  // What the lab inventories point at: the client key and the pinned host key of [127.0.0.1]:2222
  // (inventories/lab.yaml, through the forwarder) and of the macvtap segment's hypervisor address.
  mkdirSync(LAB.clientDir, { recursive: true, mode: 0o700 });
  copyFileSync(clientKey, join(LAB.clientDir, 'client_key'));
  chmodSync(join(LAB.clientDir, 'client_key'), 0o600);
  const hostPublic = readFileSync(`${hostKey}.pub`, 'utf8').trim().split(' ').slice(0, 2).join(' ');
  writeFileSync(join(LAB.clientDir, 'known_hosts'), `[${LAB.forwardHost}]:${LAB.forwardPort} ${hostPublic}\n${LAB.macvtap.hypervisorAddress} ${hostPublic}\n`);
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

export async function stopDaemons(log: (line: string) => void): Promise<void> {
  for (const daemon of [...DAEMONS].reverse()) {
    if (await stopByPidFile(daemon.pidFile, daemon.command)) log(`${daemon.name}: stopped`);
  }
}

export function daemonStatus(): { name: string; pid?: number }[] {
  return DAEMONS.map((daemon) => ({ name: daemon.name, pid: livePid(daemon.pidFile, daemon.command) }));
}
