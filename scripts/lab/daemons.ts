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

/** An sshd daemonised in a namespace from its own config, ready when every listen address shows its host key. */
const sshDaemon = (name: string, namespace: string, config: string, port: number, addresses: readonly string[]): Daemon => ({
  name,
  command: 'sshd',
  pidFile: run(`${name}.pid`),
  start: async () => {
    mkdirSync('/run/sshd', { recursive: true, mode: 0o755 });
    await $`ip netns exec ${namespace} /usr/sbin/sshd -f ${labPath(config)}`;
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

const sshd = sshDaemon('sshd', LAB.namespace, 'sshd_config', LAB.sshdPortInNamespace, ['127.0.0.1', LAB.macvtap.hypervisorAddress]);
const bastionSshd = sshDaemon('bastion-sshd', LAB.macvtap.clientNamespace, 'bastion_sshd_config', LAB.bastion.portInNamespace, ['127.0.0.1']);

/** socat on the root namespace's loopback forks a child per connection that enters the namespace and connects to the sshd there. */
const forwarderTo = (name: string, listenPort: number, namespace: string, port: number): Daemon => ({
  name,
  command: 'socat',
  pidFile: run(`${name}.pid`),
  start: async () => {
    const child = spawn(
      'socat',
      [`TCP-LISTEN:${listenPort},bind=${LAB.forwardHost},reuseaddr,fork`, `EXEC:ip netns exec ${namespace} socat STDIO TCP4\\:127.0.0.1\\:${port},nofork`],
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
const bastionForwarder = forwarderTo('bastion-forwarder', LAB.bastion.forwardPort, LAB.macvtap.clientNamespace, LAB.bastion.portInNamespace);

/** In start order; stopped in reverse. */
export const DAEMONS: Daemon[] = [virtlogd, libvirtd, sshd, forwarder, bastionSshd, bastionForwarder];

/** Host key, authorised client key and config of the hypervisor's sshd; created once, kept across runs. */
export async function ensureSshdFiles(): Promise<void> {
  mkdirSync(run(), { recursive: true });
  const hostKey = labPath('ssh_host_ed25519_key');
  const clientKey = labPath('client_key');
  if (!existsSync(hostKey)) await $`ssh-keygen -q -t ed25519 -N ${''} -C ${'etcd-kvm-lab hypervisor'} -f ${hostKey}`;
  if (!existsSync(clientKey)) await $`ssh-keygen -q -t ed25519 -N ${''} -C ${'etcd-kvm-lab client'} -f ${clientKey}`;
  writeFileSync(labPath('authorized_keys'), readFileSync(`${clientKey}.pub`), { mode: 0o600 });
  // The bastion has a host key of its own: every hop of a jump chain is verified on its own.
  const bastionHostKey = labPath('bastion_ssh_host_ed25519_key');
  if (!existsSync(bastionHostKey)) await $`ssh-keygen -q -t ed25519 -N ${''} -C ${'etcd-kvm-lab bastion'} -f ${bastionHostKey}`;
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
  writeFileSync(labPath('sshd_config'), sshdConfig(LAB.sshdPortInNamespace, ['127.0.0.1', LAB.macvtap.hypervisorAddress], hostKey, run('sshd.pid')));
  writeFileSync(labPath('bastion_sshd_config'), sshdConfig(LAB.bastion.portInNamespace, ['127.0.0.1'], bastionHostKey, run('bastion-sshd.pid')));
  // What the lab inventories point at: the client key and the pinned host key of [127.0.0.1]:2222
  // (inventories/lab.yaml, through the forwarder) and of the macvtap segment's hypervisor address.
  mkdirSync(LAB.clientDir, { recursive: true, mode: 0o700 });
  copyFileSync(clientKey, join(LAB.clientDir, 'client_key'));
  chmodSync(join(LAB.clientDir, 'client_key'), 0o600);
  const hostPublic = readFileSync(`${hostKey}.pub`, 'utf8').trim().split(' ').slice(0, 2).join(' ');
  const bastionPublic = readFileSync(`${bastionHostKey}.pub`, 'utf8').trim().split(' ').slice(0, 2).join(' ');
  writeFileSync(
    join(LAB.clientDir, 'known_hosts'),
    `[${LAB.forwardHost}]:${LAB.forwardPort} ${hostPublic}\n${LAB.macvtap.hypervisorAddress} ${hostPublic}\n[${LAB.forwardHost}]:${LAB.bastion.forwardPort} ${bastionPublic}\n`,
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

export async function stopDaemons(log: (line: string) => void): Promise<void> {
  for (const daemon of [...DAEMONS].reverse()) {
    if (await stopByPidFile(daemon.pidFile, daemon.command)) log(`${daemon.name}: stopped`);
  }
}

export function daemonStatus(): { name: string; pid?: number }[] {
  return DAEMONS.map((daemon) => ({ name: daemon.name, pid: livePid(daemon.pidFile, daemon.command) }));
}
