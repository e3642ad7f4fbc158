import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { $ } from 'zx';
import { IMAGE_CACHE_DIR } from './config.ts';

/**
 * The lab's VM base image, built offline from Debian bookworm packages: an MBR disk with one ext4
 * partition and GRUB in the boot sector, booting like a cloud image (no direct kernel boot).
 * Everything that shapes the image is in IMAGE_RECIPE; its hash names the cached qcow2.
 */

export const IMAGE_RECIPE = {
  suite: 'bookworm',
  mirrors: ['deb http://deb.debian.org/debian bookworm main', 'deb http://deb.debian.org/debian-security bookworm-security main'],
  packages: [
    'linux-image-cloud-amd64',
    'systemd',
    'systemd-sysv',
    'udev',
    'dbus',
    'cloud-init',
    'cloud-guest-utils',
    'openssh-server',
    'etcd-server',
    'etcd-client',
    'chrony',
    'sudo',
    'iproute2',
    'netbase',
    'ca-certificates',
    'e2fsprogs',
    'less',
    'procps',
    'prometheus-node-exporter',
    // The tool asks each member for its guest facts through the agent, over the hypervisor connection (no SSH into the guest).
    'qemu-guest-agent',
    // A backup agent in every member seals snapshots with libsodium's XChaCha20-Poly1305 (etcd-backup's format): Debian's binding, the guests have no internet.
    'python3-nacl',
    // ...and signs its S3 requests with botocore's SigV4 signer.
    'python3-botocore',
  ],
  // The lab inventories' os_volume_size_gib: their OS volumes are the image's own size, with nothing to grow.
  diskMiB: 4096,
  // quiet: the kernel and systemd print only errors to the consoles, each line of which costs an emulated guest.
  // fsck.mode=skip: systemd-fsck-root took 6.3 s of every boot's critical path (three booting guests); ext4's
  // journal still recovers a member the e2e destroys mid-write, and a lab's disks live for one test file.
  // norandmaps: QEMU's TCG keys the code it translates by virtual address, so with address-space randomization
  // every new process translates libc, libsystemd-shared or Python again; without it each reuses the last one's
  // (an idle member: sudo true 0.87 -> 0.10 s, python3 -c pass 1.47 -> 0.30 s). Lab guests only: they are test
  // machines under emulation, and the tool sets nothing of this on real members.
  // mitigations=off: the emulated CPU runs no other tenant's code, and retpolines turn each of the kernel's indirect
  // calls into a chain of blocks TCG translates and runs in software.
  // ds=nocloud: the seed ISO's datasource in local mode, so cloud-init's init modules run in its local stage (see
  // the customize hook).
  kernelArgs: 'ro quiet fsck.mode=skip norandmaps mitigations=off ds=nocloud console=tty0 console=ttyS0,115200n8',
  // Run in the finished root file system (argument $1) before it is packed.
  customize: `set -eu
root="$1"
# Every VM gets its own identity at first boot: host keys from cloud-init, a fresh machine-id.
rm -f "$root"/etc/ssh/ssh_host_*
: > "$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id"
# cloud-init writes etcd's configuration and starts it; the packaged default must not run first.
chroot "$root" systemctl disable etcd.service
chroot "$root" systemctl enable systemd-networkd.service
# Under emulation every service costs seconds at boot: keep only what the lab needs.
chroot "$root" systemctl mask apt-daily.timer apt-daily-upgrade.timer man-db.timer e2scrub_all.timer fstrim.timer e2scrub_reap.service
# A configured system locale: without one, cloud-init's locale module runs update-locale for en_US.UTF-8,
# which this minimal image does not have, and every first boot ends in 'error'. C.UTF-8 is built into glibc.
printf 'LANG=C.UTF-8\\n' > "$root/etc/default/locale"
mkdir -p "$root/etc/cloud/cloud.cfg.d"
# Under emulation each cloud-init module that spawns tools costs seconds of a first boot. The partition already
# fills the lab's OS volumes (diskMiB): growpart would only spend ~5 s (10 s under three booting guests) finding
# nothing to grow. grub-dpkg records GRUB's install device for the grub-pc package, which this image has not
# (GRUB is placed by hand below): 2.6 s of debconf.
printf '%s\\n' 'datasource_list: [ NoCloud, None ]' 'growpart: { mode: "off" }' 'resize_rootfs: false' 'grub_dpkg: { enabled: false }' \\
  > "$root/etc/cloud/cloud.cfg.d/90-etcd-kvm-lab.cfg"
# cloud-init's config stage runs inside its final stage: one Python start less per boot. Each start imports
# cloud-init (requests, jsonschema, jinja2: ~6 s of an idle guest's CPU), and cloud-config.service took 39.5–44 s
# of a first boot for 7.4 s of modules (three guests booting). The modules keep their order: runcmd is written
# before packages are installed and before scripts-user runs it. Modules for other clouds and distributions
# (snap, landscape, puppet, ...), which the tool's user-data never asks, are left out.
printf '%s\\n' 'cloud_config_modules: []' \\
  'cloud_final_modules: [locale, set-passwords, ntp, timezone, runcmd, package-update-upgrade-install, write-files-deferred, scripts-vendor, scripts-per-once, scripts-per-boot, scripts-per-instance, scripts-user, ssh-authkey-fingerprints, keys-to-console, install-hotplug, final-message, power-state-change]' \\
  > "$root/etc/cloud/cloud.cfg.d/91-etcd-kvm-lab-stages.cfg"
chroot "$root" systemctl mask cloud-config.service
# Likewise its init modules (bootcmd, write_files, mounts, users, ssh keys...) run in its local stage, which
# already holds the datasource: the kernel's ds=nocloud makes the seed's dsmode local, and cloud-init.service,
# whose Python start then only found that the local stage had done its work, is masked. None of these modules
# needs the network, and cloud-init status still says done (a stage that never ran is no error). In a first
# boot the local stage took 36–40 s, 33 s of it Python getting going, and cloud-init.service 21–25 s more.
chroot "$root" systemctl mask cloud-init.service
# The tool renders accept-ra: false on every interface (no router advertisements: without it networkd holds
# each link in 'configuring' for its 12 s router-solicitation timeout, and every first boot waits in
# systemd-networkd-wait-online). cloud-init 22.4's networkd renderer drops accept-ra unless DHCPv6 is on;
# from 24.1 it writes IPv6AcceptRA= whenever accept-ra is set: give this image that behaviour. The build
# fails if the line is not there (another cloud-init).
networkd_renderer="$root/usr/lib/python3/dist-packages/cloudinit/net/networkd.py"
grep -q 'if dhcp in ."ipv6", "yes". and isinstance($' "$networkd_renderer"
sed -i 's/if dhcp in ."ipv6", "yes". and isinstance($/if isinstance(/' "$networkd_renderer"
test "$(grep -c 'if dhcp in ."ipv6", "yes". and isinstance(' "$networkd_renderer")" = 0
# The initramfs holds only what mounts the root file system: virtio's PCI transport and its block driver (ext4 is
# built into the cloud kernel). With MODULES=most it was 15 MB: ~4 s of every boot unpacking it, then its udev
# loading drivers for hardware no lab guest has.
printf '%s\\n' virtio_pci virtio_blk >> "$root/etc/initramfs-tools/modules"
sed -i 's/^MODULES=.*/MODULES=list/' "$root/etc/initramfs-tools/initramfs.conf"
chroot "$root" update-initramfs -u -k all
# TCG shows the guests AMD's SVM, so udev loaded kvm_amd and kvm (and powernow_k8) at every boot for nothing; the
# modules systemd loads by default units (device mapper, DRM, EFI pstore, loop, FUSE) are unused here too.
printf 'blacklist %s\\n' kvm_amd kvm powernow_k8 > "$root/etc/modprobe.d/etcd-kvm-lab.conf"
chroot "$root" systemctl mask modprobe@dm_mod.service modprobe@drm.service modprobe@efi_pstore.service modprobe@loop.service modprobe@fuse.service
# systemd runs every generator at boot and at each daemon-reload (a first boot has two: cloud-init's mounts module
# and the tool's runcmd), each one a process TCG starts slowly. These find nothing in a lab guest (no crypttab,
# no resume device, no GPT auto-mount, no SysV-only service, no rc.local): masked as systemd documents, a link to
# /dev/null in /etc. fstab's (the data disk's mount), getty's (the serial console) and cloud-init's stay.
mkdir -p "$root/etc/systemd/system-generators"
for generator in systemd-cryptsetup-generator systemd-debug-generator systemd-gpt-auto-generator systemd-hibernate-resume-generator \
  systemd-integritysetup-generator systemd-rc-local-generator systemd-run-generator systemd-system-update-generator \
  systemd-sysv-generator systemd-veritysetup-generator; do
  test -e "$root/lib/systemd/system-generators/$generator"
  ln -s /dev/null "$root/etc/systemd/system-generators/$generator"
done
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/*
`,
} as const;

export const recipeHash = (): string => createHash('sha256').update(JSON.stringify(IMAGE_RECIPE)).digest('hex').slice(0, 16);

export const cachedImagePath = (): string => join(IMAGE_CACHE_DIR, `debian-12-etcd-${recipeHash()}.qcow2`);

/** Removes what a killed build left: mounts, loop devices and work directories. */
export async function cleanStaleBuilds(): Promise<void> {
  if (!existsSync(IMAGE_CACHE_DIR)) return;
  for (const entry of readdirSync(IMAGE_CACHE_DIR).filter((name) => name.startsWith('.build-'))) {
    const workDir = join(IMAGE_CACHE_DIR, entry);
    await $`umount -R ${join(workDir, 'mnt')}`.nothrow().quiet();
    const loops = (await $`losetup -j ${join(workDir, 'disk.raw')} -O NAME -n`.nothrow().quiet()).stdout.split('\n').filter(Boolean);
    for (const loop of loops) await $`losetup -d ${loop.trim()}`.nothrow().quiet();
    rmSync(workDir, { recursive: true, force: true });
  }
}

export async function ensureImage(log: (line: string) => void): Promise<{ path: string; builtInMs?: number }> {
  const path = cachedImagePath();
  if (existsSync(path)) return { path };
  mkdirSync(IMAGE_CACHE_DIR, { recursive: true });
  await cleanStaleBuilds();
  const started = performance.now();
  const workDir = mkdtempSync(join(IMAGE_CACHE_DIR, '.build-'));
  const mnt = join(workDir, 'mnt');
  const raw = join(workDir, 'disk.raw');
  let loop: string | undefined;
  try {
    const hook = join(workDir, 'customize.sh');
    writeFileSync(hook, IMAGE_RECIPE.customize, { mode: 0o755 });
    // The root file system is kept until the qcow2 exists, so a failed or killed assembly does not repeat it.
    const rootfs = join(IMAGE_CACHE_DIR, `rootfs-${recipeHash()}.tar`);
    if (!existsSync(rootfs)) {
      log(`image: mmdebstrap ${IMAGE_RECIPE.suite} with ${IMAGE_RECIPE.packages.length} packages (a few minutes)`);
      await $`mmdebstrap --quiet --variant=minbase --include=${IMAGE_RECIPE.packages.join(',')} --customize-hook=${`${hook} "$1"`} ${IMAGE_RECIPE.suite} ${join(workDir, 'rootfs.tar')} ${IMAGE_RECIPE.mirrors}`;
      renameSync(join(workDir, 'rootfs.tar'), rootfs);
    }
    const debootstrapped = performance.now();

    log('image: partitioning, file system, GRUB');
    await $`truncate -s ${`${IMAGE_RECIPE.diskMiB}M`} ${raw}`;
    await $`sfdisk --quiet ${raw}`.stdin.end('label: dos\nstart=2048, type=83, bootable\n');
    loop = (await $`losetup --find --show --partscan ${raw}`).stdout.trim();
    // No udev here: ask the kernel for the partition nodes explicitly.
    await $`partx -a ${loop}`.nothrow().quiet();
    const partition = `${loop}p1`;
    await waitForDevice(partition);
    await $`mkfs.ext4 -q -L root ${partition}`;
    const uuid = (await $`blkid -s UUID -o value ${partition}`).stdout.trim();
    mkdirSync(mnt);
    await $`mount ${partition} ${mnt}`;
    await $`tar -xpf ${rootfs} -C ${mnt} --numeric-owner --xattrs --xattrs-include=*`;
    writeFileSync(join(mnt, 'etc/fstab'), `UUID=${uuid} / ext4 errors=remount-ro 0 1\n`);
    const kernel = readdirSync(join(mnt, 'boot')).find((name) => name.startsWith('vmlinuz-'));
    if (!kernel) throw new Error('image: no kernel in /boot after mmdebstrap');
    const version = kernel.slice('vmlinuz-'.length);
    await installGrub(mnt, workDir, raw);
    // root=UUID, never the loop device the image was built on.
    writeFileSync(
      join(mnt, 'boot/grub/grub.cfg'),
      [
        'set timeout=0',
        'serial --unit=0 --speed=115200',
        'terminal_input serial console',
        'terminal_output serial console',
        `search --no-floppy --fs-uuid --set=root ${uuid}`,
        `linux /boot/vmlinuz-${version} root=UUID=${uuid} ${IMAGE_RECIPE.kernelArgs}`,
        `initrd /boot/initrd.img-${version}`,
        'boot',
        '',
      ].join('\n'),
    );
    await $`umount ${mnt}`;
    await $`losetup -d ${loop}`;
    loop = undefined;
    const assembled = performance.now();

    log('image: converting to qcow2');
    const partial = join(workDir, 'image.qcow2');
    await $`qemu-img convert -f raw -O qcow2 ${raw} ${partial}`;
    renameSync(partial, path);
    rmSync(rootfs);
    log(
      `image: built ${path} in ${seconds(performance.now() - started)} (mmdebstrap ${seconds(debootstrapped - started)}, assembly ${seconds(assembled - debootstrapped)}, qcow2 ${seconds(performance.now() - assembled)})`,
    );
    return { path, builtInMs: Math.round(performance.now() - started) };
  } finally {
    await $`umount -R ${mnt}`.nothrow().quiet();
    if (loop) await $`losetup -d ${loop}`.nothrow().quiet();
    rmSync(workDir, { recursive: true, force: true });
  }
}

const GRUB_PC = '/usr/lib/grub/i386-pc';
const GRUB_MODULES = [
  'biosdisk',
  'part_msdos',
  'ext2',
  'normal',
  'linux',
  'search',
  'search_fs_uuid',
  'serial',
  'terminal',
  'configfile',
  'echo',
  'test',
  'gzio',
];

/**
 * GRUB for BIOS, placed as grub-install would: boot.img in the MBR, core.img in the gap before the first
 * partition, modules under /boot/grub. Done by hand because grub-install cannot map a loop device to a
 * BIOS drive without udev. grub-mkimage already writes core.img's own length into its first sector, and
 * boot.img loads sector 1 by default, so nothing needs patching.
 */
async function installGrub(mnt: string, workDir: string, raw: string): Promise<void> {
  const grubDir = join(mnt, 'boot/grub');
  mkdirSync(join(grubDir, 'i386-pc'), { recursive: true });
  await $`cp -r ${GRUB_PC}/. ${join(grubDir, 'i386-pc')}`;
  const core = join(workDir, 'core.img');
  await $`grub-mkimage -O i386-pc -o ${core} -p ${'(hd0,msdos1)/boot/grub'} ${GRUB_MODULES}`;
  // 440 bytes: the boot code only, never the partition table after it.
  await $`dd if=${join(GRUB_PC, 'boot.img')} of=${raw} bs=440 count=1 conv=notrunc status=none`;
  await $`dd if=${core} of=${raw} bs=512 seek=1 conv=notrunc status=none`;
}

export async function waitForDevice(path: string): Promise<void> {
  for (let attempt = 0; attempt < 50; attempt++) {
    if (existsSync(path)) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`image: ${path} did not appear after partx`);
}

export const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
