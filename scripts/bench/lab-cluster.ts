import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { $ } from 'zx';
import { LAB } from '../lab/config.ts';
import { LAB_INVENTORY, LAB_STATE, MEMBER_IPS, rootIdentity, tlsArgs } from '../../test/helpers/lab-names.ts';

/**
 * The lab cluster as the benches drive it from outside the tool: brought up empty, a member's etcd asked for its
 * health, a command run in a member over SSH, etcd restarted by hand. `npm run lab:up` first; a fresh cluster
 * removes the lab's members and state, as the e2e tests do.
 */

/** The lab up, with no member VM, disk or state directory left: the next deploy is a cold one. */
export async function freshLabCluster(): Promise<void> {
  await $`npm run lab:up`.quiet();
  for (const name of Object.keys(MEMBER_IPS)) {
    await $`virsh -q -c qemu:///system destroy ${name}`.nothrow().quiet();
    await $`virsh -q -c qemu:///system undefine ${name}`.nothrow().quiet();
  }
  for (const volume of Object.keys(MEMBER_IPS).flatMap((name) => [`${name}-os.qcow2`, `${name}-data.qcow2`, `${name}-cloud-init.iso`]))
    await $`virsh -q -c qemu:///system vol-delete --pool etcd-lab ${volume}`.nothrow().quiet();
  rmSync(LAB_STATE, { recursive: true, force: true });
}

/** etcdctl inside the lab's namespace with root's certificate. */
export const labEtcdctl = (endpoints: string[], args: string[]) =>
  $`ip netns exec etcd-kvm-lab etcdctl --dial-timeout=2s --command-timeout=10s --endpoints=${endpoints.join(',')} ${tlsArgs(rootIdentity)} ${args}`
    .nothrow()
    .quiet();

export async function healthy(ip: string): Promise<boolean> {
  const endpoint = `https://${ip}:2379`;
  const result =
    await $`ip netns exec etcd-kvm-lab etcdctl --dial-timeout=1s --command-timeout=2s --endpoints=${endpoint} ${tlsArgs(rootIdentity)} endpoint health`
      .nothrow()
      .quiet();
  return result.exitCode === 0;
}

/** A command in a member over SSH, through the lab hypervisor's sshd, with the state directory's pinned host keys. */
export function inMember(ip: string, command: string) {
  const hypervisor = '.etcd-kvm/lab/hypervisor';
  const proxy = `ssh -i ${hypervisor}/client_key -o UserKnownHostsFile=${hypervisor}/known_hosts -o StrictHostKeyChecking=yes -p 2222 -W %h:%p root@127.0.0.1`;
  const options = ['-o', 'BatchMode=yes', '-o', `UserKnownHostsFile=${join(LAB_STATE, 'ssh/known_hosts')}`, '-o', `ProxyCommand=${proxy}`];
  return $`ssh ${options} -i ${join(LAB_STATE, 'ssh/admin.key')} ${`admin@${ip}`} ${command}`;
}

/** One member's etcd restarted by hand, to healthy: the floor of what a roll can cost per member. */
export async function restartToHealthy(ip: string): Promise<number> {
  const started = performance.now();
  await inMember(ip, 'sudo systemctl restart etcd');
  while (!(await healthy(ip))) {
    if (performance.now() - started > 300_000) throw new Error(`${ip} not healthy 5 min after its restart`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return performance.now() - started;
}

/**
 * The lab inventory on the lab's release server at `version`, with more etcd settings (`etcd`), given another base
 * image, and given, the `maintenance` section, written to `path` (0600) for a bench's deploys.
 */
export function writeReleaseInventory(
  path: string,
  version: string,
  etcd: Record<string, unknown> = {},
  image?: string,
  maintenance?: Record<string, unknown>,
): void {
  const doc = parse(readFileSync(LAB_INVENTORY, 'utf8'));
  doc.etcd = { ...doc.etcd, binaries: 'release', version, release_url: LAB.releaseUrl, ...etcd };
  if (image) doc.defaults.base_image = { pool: LAB.pools.images, volume: image };
  if (maintenance) doc.maintenance = maintenance;
  writeFileSync(path, stringify(doc), { mode: 0o600 });
}
