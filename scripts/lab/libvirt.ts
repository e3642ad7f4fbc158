import { copyFileSync, existsSync, linkSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { $ } from 'zx';
import { LAB, SECOND, SECOND_URI } from './config.ts';

/** The lab's libvirt objects on each hypervisor: two dir pools, the isolated network, the two image volumes. Never autostarted. */

/** One of the lab's hypervisors as the lab scripts on the root namespace see it. */
export interface LabHypervisor {
  name: string;
  /** libvirt's URI from the root namespace. */
  uri: string;
  /** Its lab directory: pools/, the network's definition, which cached image each image volume came from. */
  dir: string;
  network: { name: string; bridge: string; address: string; prefixLength: number };
}

export const FIRST_HYPERVISOR: LabHypervisor = { name: 'lab', uri: 'qemu:///system', dir: LAB.dir, network: LAB.network };
export const SECOND_HYPERVISOR: LabHypervisor = { name: SECOND.name, uri: SECOND_URI, dir: SECOND.dir, network: SECOND.network };

const poolDir = (hypervisor: LabHypervisor, pool: string) => join(hypervisor.dir, 'pools', pool);
/** Which cached image each volume of the images pool was made from, one file per volume beside the pools. */
const IMAGE_STAMPS: Record<string, string> = { [LAB.baseVolume]: 'base-image.source', [LAB.secondBaseVolume]: 'second-base-image.source' };
const imageStamp = (hypervisor: LabHypervisor, volume: string) => join(hypervisor.dir, IMAGE_STAMPS[volume] ?? `${volume}.source`);

/** The cached images the images pool holds: the base image, and the one members upgrade to. */
export interface LabImages {
  base: string;
  second: string;
}

/** virsh against one libvirtd, from the root namespace. */
export const virshAt = (uri: string) => ({
  run: (args: string[]) => $`virsh -q -c ${uri} ${args}`.quiet(),
  ok: async (args: string[]) => (await $`virsh -q -c ${uri} ${args}`.nothrow().quiet()).exitCode === 0,
});
const virshOn = (hypervisor: LabHypervisor) => virshAt(hypervisor.uri);

async function ensurePool(hypervisor: LabHypervisor, name: string): Promise<void> {
  const { run: virsh, ok: virshOk } = virshOn(hypervisor);
  const dir = poolDir(hypervisor, name);
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  if (!(await virshOk(['pool-info', name]))) await virsh(['pool-define-as', name, 'dir', '--target', dir]);
  const info = (await virsh(['pool-info', name])).stdout;
  if (!/State:\s+running/.test(info)) await virsh(['pool-start', name]);
  await virsh(['pool-refresh', name]);
}

function networkXml({ name, bridge, address, prefixLength }: LabHypervisor['network']): string {
  // Isolated (no <forward>): the VMs reach each other and the host side of the bridge, nothing else.
  return `<network>
  <name>${name}</name>
  <bridge name='${bridge}' stp='off'/>
  <ip address='${address}' prefix='${prefixLength}'/>
</network>
`;
}

async function ensureNetwork(hypervisor: LabHypervisor): Promise<void> {
  const { run: virsh, ok: virshOk } = virshOn(hypervisor);
  const { name } = hypervisor.network;
  if (!(await virshOk(['net-info', name]))) {
    const file = join(hypervisor.dir, 'network.xml');
    writeFileSync(file, networkXml(hypervisor.network));
    await virsh(['net-define', file]);
  }
  const info = (await virsh(['net-info', name])).stdout;
  if (!/Active:\s+yes/.test(info)) await virsh(['net-start', name]);
}

/**
 * Puts a cached image into the images pool as `volume`. Replaced only when the recipe changed and no VM disk in
 * the lab still uses it as backing store; linked (or copied) under a temporary name so a killed copy
 * leaves no volume. QEMU only reads it: a hard link to the cache costs no space.
 */
async function ensureImageVolume(hypervisor: LabHypervisor, volume: string, imagePath: string, log: (line: string) => void): Promise<void> {
  const dir = poolDir(hypervisor, LAB.pools.images);
  for (const stale of readdirSync(dir).filter((file) => file.startsWith('.partial-'))) rmSync(join(dir, stale));
  const target = join(dir, volume);
  const stamp = imageStamp(hypervisor, volume);
  const current = existsSync(stamp) ? readFileSync(stamp, 'utf8').trim() : '';
  if (existsSync(target) && current === imagePath) return;
  if (existsSync(target) && readdirSync(poolDir(hypervisor, LAB.pools.vms)).length > 0) {
    log(
      `${hypervisor.name}: image ${imagePath} for ${volume} is newer, but VM disks may still use the old one as backing store; run lab:down first to switch`,
    );
    return;
  }
  const partial = join(dir, `.partial-${process.pid}`);
  try {
    linkSync(imagePath, partial);
  } catch {
    copyFileSync(imagePath, partial);
  }
  renameSync(partial, target);
  writeFileSync(stamp, `${imagePath}\n`);
  await virshOn(hypervisor).run(['pool-refresh', LAB.pools.images]);
  log(`${hypervisor.name}: image ${LAB.pools.images}/${volume} from ${imagePath}`);
}

export async function ensureLibvirtObjects(hypervisor: LabHypervisor, images: LabImages, log: (line: string) => void): Promise<void> {
  await ensurePool(hypervisor, LAB.pools.images);
  await ensurePool(hypervisor, LAB.pools.vms);
  await ensureImageVolume(hypervisor, LAB.baseVolume, images.base, log);
  await ensureImageVolume(hypervisor, LAB.secondBaseVolume, images.second, log);
  await ensureNetwork(hypervisor);
}

/** Lab domains: those with a disk in the lab's VM pool (on the second hypervisor, its libvirtd being the lab's own, every domain has). */
async function labDomains(hypervisor: LabHypervisor): Promise<string[]> {
  const { run: virsh } = virshOn(hypervisor);
  const vmsDir = poolDir(hypervisor, LAB.pools.vms);
  const names = (await virsh(['list', '--all', '--name'])).stdout
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean);
  const domains: string[] = [];
  for (const name of names) {
    const xml = (await virsh(['dumpxml', '--inactive', name])).stdout;
    if (xml.includes(`pool='${LAB.pools.vms}'`) || xml.includes(vmsDir)) domains.push(name);
  }
  return domains;
}

/** Each lab domain on the hypervisor stopped and undefined. */
async function removeDomains(hypervisor: LabHypervisor, log: (line: string) => void): Promise<void> {
  const { run: virsh } = virshOn(hypervisor);
  for (const domain of await labDomains(hypervisor)) {
    await virsh(['destroy', domain]).nothrow();
    await virsh(['undefine', domain, '--nvram']).nothrow();
    log(`${hypervisor.name}: domain ${domain}: removed`);
  }
}

/** Where the machine's libvirtd (the first hypervisor's) keeps what it defines persistently. */
const LIBVIRT_CONFIG = '/etc/libvirt';

/**
 * Whether the machine's libvirt still defines any of the lab's objects (read from its configuration, without a
 * libvirtd): a network or a pool of the lab's names, or a domain with a disk in the lab's VM pool.
 */
export function labObjectsDefined(): boolean {
  const xmlIn = (dir: string) => (existsSync(dir) ? readdirSync(dir).filter((name) => name.endsWith('.xml')) : []);
  if (xmlIn(join(LIBVIRT_CONFIG, 'qemu/networks')).includes(`${LAB.network.name}.xml`)) return true;
  const pools = xmlIn(join(LIBVIRT_CONFIG, 'storage'));
  if (Object.values(LAB.pools).some((pool) => pools.includes(`${pool}.xml`))) return true;
  const vmsDir = poolDir(FIRST_HYPERVISOR, LAB.pools.vms);
  return xmlIn(join(LIBVIRT_CONFIG, 'qemu')).some((name) => {
    const xml = readFileSync(join(LIBVIRT_CONFIG, 'qemu', name), 'utf8');
    return xml.includes(`pool='${LAB.pools.vms}'`) || xml.includes(vmsDir);
  });
}

/**
 * Removes the first hypervisor's lab VMs, their disks, the network and the pools (its libvirt is the
 * machine's: only the lab's objects go); the base image stays cached. The second hypervisor keeps
 * everything under its own directory, removed whole once its daemons are stopped.
 */
export async function removeLibvirtObjects(log: (line: string) => void): Promise<void> {
  const { run: virsh, ok: virshOk } = virshOn(FIRST_HYPERVISOR);
  if (!(await virshOk(['version']))) return;
  await removeDomains(FIRST_HYPERVISOR, log);
  if (await virshOk(['net-info', LAB.network.name])) {
    await virsh(['net-destroy', LAB.network.name]).nothrow();
    await virsh(['net-undefine', LAB.network.name]);
  }
  for (const pool of [LAB.pools.vms, LAB.pools.images]) {
    if (!(await virshOk(['pool-info', pool]))) continue;
    await virsh(['pool-destroy', pool]).nothrow();
    await virsh(['pool-undefine', pool]);
  }
  rmSync(poolDir(FIRST_HYPERVISOR, LAB.pools.vms), { recursive: true, force: true });
}

export async function libvirtStatus(hypervisor: LabHypervisor): Promise<string> {
  const { run: virsh, ok: virshOk } = virshOn(hypervisor);
  if (!(await virshOk(['version']))) return `${hypervisor.name}: libvirt not reachable`;
  const domains = (await virsh(['list', '--all'])).stdout.trim() || '(no domains)';
  const pools = (await virsh(['pool-list', '--all'])).stdout.trim();
  const networks = (await virsh(['net-list', '--all'])).stdout.trim();
  const volumes = (await virsh(['vol-list', LAB.pools.images]).nothrow()).stdout.trim() || '(none)';
  return `${hypervisor.name} domains:\n${domains}\npools:\n${pools}\nnetworks:\n${networks}\nimages (${LAB.pools.images}):\n${volumes}`;
}

/**
 * The lab's VMs and their disks removed from both hypervisors, all else left running: what a test file needs of the
 * lab the file before it used (`lab.ts clear`). The images pool, the network and the daemons stay.
 */
export async function removeLabVms(log: (line: string) => void): Promise<void> {
  for (const hypervisor of [FIRST_HYPERVISOR, SECOND_HYPERVISOR]) {
    const { run: virsh, ok: virshOk } = virshOn(hypervisor);
    if (!(await virshOk(['version']))) continue;
    await removeDomains(hypervisor, log);
    const vmsDir = poolDir(hypervisor, LAB.pools.vms);
    const volumes = existsSync(vmsDir) ? readdirSync(vmsDir) : [];
    for (const volume of volumes) rmSync(join(vmsDir, volume), { recursive: true, force: true });
    if (volumes.length > 0 && (await virshOk(['pool-info', LAB.pools.vms]))) await virsh(['pool-refresh', LAB.pools.vms]);
    if (volumes.length > 0) log(`${hypervisor.name}: ${volumes.length} volume(s) of ${LAB.pools.vms} removed`);
  }
}
