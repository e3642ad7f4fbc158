import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { $ } from 'zx';
import { LAB, labPath } from './config.ts';

/** The lab's libvirt objects: two dir pools, the isolated network, the base image volume. Never autostarted. */

const virsh = (args: string[]) => $`virsh -q -c qemu:///system ${args}`.quiet();
const virshOk = async (args: string[]) => (await $`virsh -q -c qemu:///system ${args}`.nothrow().quiet()).exitCode === 0;

const poolDir = (pool: string) => labPath('pools', pool);

async function ensurePool(name: string): Promise<void> {
  const dir = poolDir(name);
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  if (!(await virshOk(['pool-info', name]))) await virsh(['pool-define-as', name, 'dir', '--target', dir]);
  const info = (await virsh(['pool-info', name])).stdout;
  if (!/State:\s+running/.test(info)) await virsh(['pool-start', name]);
  await virsh(['pool-refresh', name]);
}

function networkXml(): string {
  const { name, bridge, address, prefixLength } = LAB.network;
  // Isolated (no <forward>): the VMs reach each other and the host side of the bridge, nothing else.
  return `<network>
  <name>${name}</name>
  <bridge name='${bridge}' stp='off'/>
  <ip address='${address}' prefix='${prefixLength}'/>
</network>
`;
}

async function ensureNetwork(): Promise<void> {
  const { name } = LAB.network;
  if (!(await virshOk(['net-info', name]))) {
    const file = labPath('network.xml');
    writeFileSync(file, networkXml());
    await virsh(['net-define', file]);
  }
  const info = (await virsh(['net-info', name])).stdout;
  if (!/Active:\s+yes/.test(info)) await virsh(['net-start', name]);
}

/**
 * Puts the cached image into the images pool. Replaced only when the recipe changed and no VM disk in
 * the lab still uses it as backing store; copied under a temporary name so a killed copy leaves no volume.
 */
async function ensureBaseVolume(imagePath: string, log: (line: string) => void): Promise<void> {
  const dir = poolDir(LAB.pools.images);
  for (const stale of readdirSync(dir).filter((file) => file.startsWith('.partial-'))) rmSync(join(dir, stale));
  const target = join(dir, LAB.baseVolume);
  const stamp = labPath('base-image.source');
  const current = existsSync(stamp) ? readFileSync(stamp, 'utf8').trim() : '';
  if (existsSync(target) && current === imagePath) return;
  if (existsSync(target) && readdirSync(poolDir(LAB.pools.vms)).length > 0) {
    log(`base image: ${imagePath} is newer, but VM disks still use the old one as backing store; run lab:down first to switch`);
    return;
  }
  const partial = join(dir, `.partial-${process.pid}`);
  copyFileSync(imagePath, partial);
  renameSync(partial, target);
  writeFileSync(stamp, `${imagePath}\n`);
  await virsh(['pool-refresh', LAB.pools.images]);
  log(`base image: ${LAB.pools.images}/${LAB.baseVolume} from ${imagePath}`);
}

export async function ensureLibvirtObjects(imagePath: string, log: (line: string) => void): Promise<void> {
  await ensurePool(LAB.pools.images);
  await ensurePool(LAB.pools.vms);
  await ensureBaseVolume(imagePath, log);
  await ensureNetwork();
}

/** Lab domains: those with a disk in the lab's VM pool. */
async function labDomains(): Promise<string[]> {
  const names = (await virsh(['list', '--all', '--name'])).stdout.split('\n').map((line) => line.trim()).filter(Boolean);
  const domains: string[] = [];
  for (const name of names) {
    const xml = (await virsh(['dumpxml', '--inactive', name])).stdout;
    if (xml.includes(`pool='${LAB.pools.vms}'`) || xml.includes(poolDir(LAB.pools.vms))) domains.push(name);
  }
  return domains;
}

/** Removes the lab's VMs, their disks, the network and the pools; the base image stays cached. */
export async function removeLibvirtObjects(log: (line: string) => void): Promise<void> {
  if (!(await virshOk(['version']))) return;
  for (const domain of await labDomains()) {
    await virsh(['destroy', domain]).nothrow();
    await virsh(['undefine', domain, '--nvram']).nothrow();
    log(`domain ${domain}: removed`);
  }
  if (await virshOk(['net-info', LAB.network.name])) {
    await virsh(['net-destroy', LAB.network.name]).nothrow();
    await virsh(['net-undefine', LAB.network.name]);
  }
  for (const pool of [LAB.pools.vms, LAB.pools.images]) {
    if (!(await virshOk(['pool-info', pool]))) continue;
    await virsh(['pool-destroy', pool]).nothrow();
    await virsh(['pool-undefine', pool]);
  }
  rmSync(poolDir(LAB.pools.vms), { recursive: true, force: true });
}

export async function libvirtStatus(): Promise<string> {
  if (!(await virshOk(['version']))) return 'libvirt: not reachable';
  const domains = (await virsh(['list', '--all'])).stdout.trim() || '(no domains)';
  const pools = (await virsh(['pool-list', '--all'])).stdout.trim();
  const networks = (await virsh(['net-list', '--all'])).stdout.trim();
  return `domains:\n${domains}\npools:\n${pools}\nnetworks:\n${networks}`;
}
