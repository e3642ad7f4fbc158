import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect } from 'node:net';
import { run } from './exec.ts';
import type { Processes } from './processes.ts';

/** A real OpenSSH server on 127.0.0.1 with its own host key and one authorised client key. */
export interface TestSshd {
  port: number;
  dir: string;
  clientKey: string;
  hostPublicKey: string;
  /** A known_hosts line for this server. */
  knownHostsLine: string;
}

async function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

export async function startSshd(processes: Processes, port: number): Promise<TestSshd> {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-sshd-'));
  const keygen = (path: string) => {
    const made = run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', path]);
    if (made.status !== 0) throw new Error(made.stderr);
  };
  keygen(join(dir, 'host_key'));
  keygen(join(dir, 'client_key'));
  writeFileSync(join(dir, 'authorized_keys'), readFileSync(join(dir, 'client_key.pub')));
  // sshd insists on its privilege-separation directory.
  mkdirSync('/run/sshd', { recursive: true, mode: 0o755 });
  processes.start(
    '/usr/sbin/sshd',
    [
      '-D',
      '-e',
      '-f',
      '/dev/null',
      '-o',
      `Port=${port}`,
      '-o',
      'ListenAddress=127.0.0.1',
      '-o',
      `HostKey=${join(dir, 'host_key')}`,
      '-o',
      `AuthorizedKeysFile=${join(dir, 'authorized_keys')}`,
      '-o',
      `PidFile=${join(dir, 'sshd.pid')}`,
      '-o',
      'StrictModes=no',
      '-o',
      'UsePAM=no',
      '-o',
      'PasswordAuthentication=no',
      '-o',
      `AllowUsers=${userInfo().username}`,
      '-o',
      'PermitRootLogin=prohibit-password',
    ],
    { env: process.env, logFile: join(dir, 'sshd.log') },
  );
  for (let i = 0; i < 100 && !(await listening(port)); i++) await sleep(100);
  if (!(await listening(port))) throw new Error(`sshd did not listen on ${port}: ${readFileSync(join(dir, 'sshd.log'), 'utf8')}`);
  const hostPublicKey = readFileSync(join(dir, 'host_key.pub'), 'utf8').trim();
  const [type, blob] = hostPublicKey.split(' ');
  return { port, dir, clientKey: join(dir, 'client_key'), hostPublicKey, knownHostsLine: `[127.0.0.1]:${port} ${type} ${blob}\n` };
}
