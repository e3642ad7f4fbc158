import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { $ } from 'zx';
import { ownApt } from './apt.ts';
import { IMAGE_CACHE_DIR, LAB, labPath } from './config.ts';
import { IMAGE_RECIPE, cleanStaleBuilds, recipeHash, seconds, waitForDevice } from './image.ts';

/**
 * The image lab members upgrade to (issue 26): an OS image upgrade is an inventory's base_image changed,
 * and the lab needs a second image, visibly different, to change it to. It is derived from the built base
 * image, never bootstrapped again: the base image's disk copied as raw, its partition mounted, a marker
 * file written and a small package (with the dependencies the base image lacks) installed by dpkg in a
 * chroot, from the base image's own archive. Nothing is booted: the host keys stay absent and the
 * machine-id empty, as in the base image.
 */

export const SECOND_IMAGE_RECIPE = {
  mark: LAB.secondImageMark,
  packages: ['jq'],
  /** Run in the image's chroot once installed: the package works on the image's own libraries. */
  smokeTest: ['jq', '--version'],
} as const;

/** The base image's recipe and this one's: a change to either rebuilds. */
export const secondRecipeHash = (): string =>
  createHash('sha256').update(recipeHash()).update(JSON.stringify(SECOND_IMAGE_RECIPE)).digest('hex').slice(0, 16);

export const cachedSecondImagePath = (): string => join(IMAGE_CACHE_DIR, `debian-12-etcd-2-${secondRecipeHash()}.qcow2`);

/** The lab's own apt sources, lists and downloads for this build (the machine's are never used nor changed); kept for the next build. */
const APT_DIR = labPath('image-apt');
/** Where the packages are copied inside the mounted image for dpkg, removed before it is packed. */
const DEBS_IN_IMAGE = '/tmp/etcd-kvm-lab-debs';
/** What runs in the image's chroot sees the image's programs only, and no terminal: none of the machine's environment. */
const CHROOT_ENV = ['PATH=/usr/sbin:/usr/bin:/sbin:/bin', 'LC_ALL=C.UTF-8', 'DEBIAN_FRONTEND=noninteractive'];

export async function ensureSecondImage(baseImage: string, log: (line: string) => void): Promise<{ path: string; builtInMs?: number }> {
  const path = cachedSecondImagePath();
  if (existsSync(path)) return { path };
  // Named as the base image's builds are, so that a killed one is cleaned the same way.
  await cleanStaleBuilds();
  const started = performance.now();
  const workDir = mkdtempSync(join(IMAGE_CACHE_DIR, '.build-'));
  const mnt = join(workDir, 'mnt');
  const raw = join(workDir, 'disk.raw');
  let loop: string | undefined;
  try {
    log(`second image: from ${baseImage}, with ${SECOND_IMAGE_RECIPE.mark.path} and ${SECOND_IMAGE_RECIPE.packages.join(', ')}`);
    await $`qemu-img convert -f qcow2 -O raw ${baseImage} ${raw}`;
    loop = (await $`losetup --find --show --partscan ${raw}`).stdout.trim();
    // No udev here: ask the kernel for the partition nodes explicitly.
    await $`partx -a ${loop}`.nothrow().quiet();
    const partition = `${loop}p1`;
    await waitForDevice(partition);
    mkdirSync(mnt);
    await $`mount ${partition} ${mnt}`;
    const copied = performance.now();

    writeFileSync(join(mnt, SECOND_IMAGE_RECIPE.mark.path), `${SECOND_IMAGE_RECIPE.mark.line}\n`, { mode: 0o644 });
    const debs = await downloadDebs(join(mnt, 'var/lib/dpkg/status'));
    const fetched = performance.now();
    const installed = await installDebs(mnt, debs);
    checkIdentityAbsent(mnt);
    await $`umount ${mnt}`;
    await $`losetup -d ${loop}`;
    loop = undefined;
    const changed = performance.now();

    const partial = join(workDir, 'image.qcow2');
    await $`qemu-img convert -f raw -O qcow2 ${raw} ${partial}`;
    renameSync(partial, path);
    log(
      `second image: built ${path} in ${seconds(performance.now() - started)} (copy ${seconds(copied - started)}, apt ${seconds(fetched - copied)}, dpkg ${seconds(changed - fetched)}, qcow2 ${seconds(performance.now() - changed)}); installed ${installed.join(', ')}`,
    );
    return { path, builtInMs: Math.round(performance.now() - started) };
  } finally {
    await $`umount -R ${mnt}`.nothrow().quiet();
    if (loop) await $`losetup -d ${loop}`.nothrow().quiet();
    rmSync(workDir, { recursive: true, force: true });
  }
}

const archives = () => join(APT_DIR, 'archives');

/**
 * The recipe's packages and whichever of their dependencies the image lacks, resolved against the image's
 * own dpkg status, from the archive the base image was bootstrapped from. Returns the downloaded files.
 */
async function downloadDebs(imageStatus: string): Promise<string[]> {
  mkdirSync(join(APT_DIR, 'state'), { recursive: true, mode: 0o755 });
  mkdirSync(join(archives(), 'partial'), { recursive: true, mode: 0o755 });
  const apt = ownApt(APT_DIR, IMAGE_RECIPE.mirrors, [
    `Dir::State "${join(APT_DIR, 'state')}";`,
    `Dir::State::status "${imageStatus}";`,
    `Dir::Cache::archives "${archives()}";`,
    '#clear APT::Architectures;',
    'APT::Architectures { "amd64"; };',
    'APT::Install-Recommends "false";',
    'Acquire::Languages "none";',
  ]).run;
  await apt(['update']);
  // Whatever a killed build downloaded goes: only this run's packages are installed.
  await apt(['clean']);
  await apt(['install', '--download-only', '--yes', ...SECOND_IMAGE_RECIPE.packages]);
  const debs = readdirSync(archives())
    .filter((name) => name.endsWith('.deb'))
    .map((name) => join(archives(), name));
  if (debs.length === 0) throw new Error(`second image: apt downloaded nothing for ${SECOND_IMAGE_RECIPE.packages.join(', ')}`);
  return debs;
}

/** dpkg in the image's chroot; the dependencies are marked automatically installed, as apt would have. Returns name=version of each. */
async function installDebs(root: string, debs: string[]): Promise<string[]> {
  const inChroot = (args: string[]) => $`chroot ${root} env -i ${CHROOT_ENV} ${args}`;
  const packages: string[] = [];
  for (const deb of debs) packages.push((await $`dpkg-deb --field ${deb} Package`).stdout.trim());
  const inImage = join(root, DEBS_IN_IMAGE);
  mkdirSync(inImage, { recursive: true });
  const files: string[] = [];
  for (const deb of debs) {
    const name = deb.slice(deb.lastIndexOf('/') + 1);
    copyFileSync(deb, join(inImage, name));
    files.push(`${DEBS_IN_IMAGE}/${name}`);
  }
  try {
    await inChroot(['dpkg', '--install', ...files]);
  } finally {
    rmSync(inImage, { recursive: true, force: true });
    // What apt downloaded is not kept: the next build downloads afresh (apt clean does the same).
    for (const deb of debs) rmSync(deb, { force: true });
  }
  const wanted = new Set<string>(SECOND_IMAGE_RECIPE.packages);
  const dependencies = packages.filter((name) => !wanted.has(name));
  if (dependencies.length > 0) await inChroot(['apt-mark', 'auto', ...dependencies]);
  await inChroot([...SECOND_IMAGE_RECIPE.smokeTest]);
  // One `name<TAB>version` line per package.
  const versions = (await inChroot(['dpkg-query', '--show', ...packages])).stdout;
  return versions
    .split('\n')
    .filter(Boolean)
    .map((line) => line.replace('\t', '='));
}

/** Every VM made from the image gets its own identity at first boot; installing must not have made one. */
function checkIdentityAbsent(root: string): void {
  const hostKeys = readdirSync(join(root, 'etc/ssh')).filter((name) => name.startsWith('ssh_host_'));
  const machineId = readFileSync(join(root, 'etc/machine-id'), 'utf8');
  if (hostKeys.length > 0 || machineId !== '' || existsSync(join(root, 'var/lib/dbus/machine-id'))) {
    throw new Error(`second image: an identity appeared (host keys: ${hostKeys.join(', ') || 'none'}, machine-id: '${machineId.trim()}')`);
  }
}
