import type { ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Inventory } from '../../tasks/inventory/model.ts';
import { GUEST_PATHS, parseEnvironmentFile } from '../../tasks/render/etcd.ts';
import type { RenderedFile } from '../../tasks/render/member.ts';
import type { Processes } from './processes.ts';
import { fileOf, writeFilesOf } from './render.ts';

/** The ETCD_* variables naming files, with the guest path each names as rendered. */
export const FILE_SETTINGS = (clientCertAuth: boolean): [string, string][] => [
  ['ETCD_CERT_FILE', GUEST_PATHS.serverCert],
  ['ETCD_PEER_CERT_FILE', GUEST_PATHS.peerCert],
  ['ETCD_KEY_FILE', GUEST_PATHS.serverKey],
  ['ETCD_PEER_KEY_FILE', GUEST_PATHS.peerKey],
  ['ETCD_PEER_TRUSTED_CA_FILE', GUEST_PATHS.peerTrustedCa],
  ...(clientCertAuth ? [['ETCD_TRUSTED_CA_FILE', GUEST_PATHS.caCert] as [string, string]] : []),
];

/**
 * The kernel gives every outgoing connection, and every listener on port 0, a local port from
 * ip_local_port_range; on loopback that connection's address is 127.0.0.1, etcd-1's. A fixed port
 * inside the range can be held by any test's client at the moment etcd-1 starts (or by its
 * TIME_WAIT, 60 s after it closed), and etcd-1 then exits at once: "bind: address already in use".
 * Seen under load, with the unit tests' connections beside the integration tests.
 */
export function refuseEphemeralPorts(ports: readonly number[]): void {
  const [low, high] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
  const inside = ports.filter((port) => port >= low! && port <= high!);
  if (inside.length > 0)
    throw new Error(`ports ${inside.join(', ')} are in the kernel's ephemeral range ${low}-${high}: choose fixed ports below it`);
}

export interface LoopbackMember {
  /** The member's etcd.env as rendered, before its file locations moved. */
  rendered: Map<string, string>;
  process: ChildProcess;
}

/**
 * Starts one Debian etcd per member from its rendered user-data, on the members' loopback addresses:
 * only the data directory and the files the environment names move out of guest paths (into a
 * temporary directory); every other ETCD_* variable is used exactly as rendered.
 */
export function startRenderedMembers(
  inventory: Inventory,
  rendered: Map<string, RenderedFile[]>,
  processes: Processes,
): { work: string; members: Map<string, LoopbackMember> } {
  refuseEphemeralPorts([inventory.etcd.clientPort, inventory.etcd.peerPort, inventory.monitoring.metricsPort]);
  const work = mkdtempSync(join(tmpdir(), 'etcd-kvm-etcd-'));
  processes.removeAfter(work);
  const members = new Map<string, LoopbackMember>();
  for (const member of inventory.members) {
    const files = writeFilesOf(fileOf(rendered.get(member.name), 'user-data').content);
    const dir = join(work, member.name);
    mkdirSync(join(dir, 'data'), { recursive: true, mode: 0o700 });
    const asRendered = parseEnvironmentFile(files.get(GUEST_PATHS.environmentFile)!.content);
    const env = new Map(asRendered);
    env.set('ETCD_DATA_DIR', join(dir, 'data'));
    for (const [key, guestPath] of FILE_SETTINGS(inventory.etcd.clientCertAuth)) {
      const path = join(dir, guestPath.split('/').pop()!);
      writeFileSync(path, files.get(guestPath)!.content, { mode: 0o600 });
      env.set(key, path);
    }
    const process_ = processes.start('etcd', [], {
      env: { PATH: process.env.PATH, ...Object.fromEntries(env) },
      logFile: join(dir, 'etcd.log'),
    });
    // An etcd that ends by itself (not stopped by the test) says why here, not as a health wait that runs out.
    process_.once('exit', (code) => {
      if (code !== null && code !== 0)
        console.error(`${member.name}'s etcd exited ${code}:\n${readFileSync(join(dir, 'etcd.log'), 'utf8').slice(-2000)}`);
    });
    members.set(member.name, { rendered: asRendered, process: process_ });
  }
  return { work, members };
}
