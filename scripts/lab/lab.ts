import { chmodSync, existsSync, mkdirSync } from 'node:fs';
import { $ } from 'zx';
import { ETCD_RELEASES, LAB, SECOND, labPath } from './config.ts';
import { daemonStatus, ensureSshdFiles, startDaemons, stopDaemons } from './daemons.ts';
import { ensurePackages } from '../system/packages.ts';
import { chooseAcceleration, fixKvmDevice, restoreKvmDevice } from './host.ts';
import { cachedImagePath, ensureImage } from './image.ts';
import { SECOND_IMAGE_RECIPE, cachedSecondImagePath, ensureSecondImage } from './second-image.ts';
import {
  FIRST_HYPERVISOR,
  SECOND_HYPERVISOR,
  ensureLibvirtObjects,
  labObjectsDefined,
  libvirtStatus,
  removeLabVms,
  removeLibvirtObjects,
} from './libvirt.ts';
import { ensureSecondHypervisor, linkBridges, removeSecondHypervisor, secondStatus } from './second.ts';
import { ensureMacvtapSegment, macvtapStatus, removeMacvtapSegment } from './macvtap.ts';
import { ensureReleases, releasesStatus } from './releases.ts';
import { namespaceExists, removeNamespace } from './netns.ts';
import { stopProcess } from './processes.ts';

/**
 * The local lab: `up` (idempotent; recovers from a killed run), `down` (stops only what the lab
 * started and removes its namespace), `status`.
 */

const USAGE = `usage: npx tsx scripts/lab/lab.ts up|down|clear|status

  up       install missing Debian packages, build (or reuse) the VM image and, from it, the image
           members upgrade to (${LAB.secondBaseVolume}), create the network
           namespace ${LAB.namespace}, start virtlogd, libvirtd and the hypervisor's sshd in it, and
           expose that sshd on ${LAB.forwardHost}:${LAB.forwardPort}; creates pools ${LAB.pools.vms},
           ${LAB.pools.images} and network ${LAB.network.name}, and the macvtap segment: host
           interface ${LAB.macvtap.parent} (${LAB.macvtap.hypervisorAddress}), its veth peer in namespace
           ${LAB.macvtap.clientNamespace} (${LAB.macvtap.clientAddress}), where the tool runs for
           inventories/lab-macvtap.yaml; and a second hypervisor ${SECOND.name}: namespace ${SECOND.namespace}
           with its own libvirtd, virtlogd and sshd (exposed on ${LAB.forwardHost}:${SECOND.forwardPort}), its
           own network and pools, its bridge joined to the first one's (inventories/lab-hypervisors.yaml);
           and etcd ${ETCD_RELEASES.map((release) => release.version).join(', ')} repackaged from Debian's builds as etcd's
           GitHub releases, served at ${LAB.releaseUrl} (release-server)
  down     remove the lab's VMs and their disks, network, pools, daemons and namespaces;
           put /dev/kvm back; the built images and releases stay
  clear    remove the lab's VMs and their disks on both hypervisors, nothing else: a lab that is up
           stays up for the next cluster (the e2e runner's files in turn); a lab that is down, stays so
  status   what is running

  ETCD_KVM_LAB_ACCEL=kvm|qemu forces the acceleration choice that up reports.`;

const log = (line: string) => console.log(`lab: ${line}`);

async function up(): Promise<void> {
  const started = performance.now();
  await ensurePackages('lab', (line) => log(`packages: ${line}`));
  // QEMU runs as libvirt-qemu and must traverse to the pools; keys and PID files stay in run/ (0700).
  mkdirSync(LAB.dir, { recursive: true });
  chmodSync(LAB.dir, 0o755);
  mkdirSync(labPath('run'), { recursive: true, mode: 0o700 });
  const acceleration = chooseAcceleration();
  log(`acceleration: ${acceleration.type} (${acceleration.why}); inventories/lab.yaml uses domain_type qemu`);
  const kvmNote = fixKvmDevice();
  if (kvmNote) log(kvmNote);
  const image = await ensureImage(log);
  if (image.builtInMs === undefined) log(`image: reusing ${image.path}`);
  const secondImage = await ensureSecondImage(image.path, log);
  if (secondImage.builtInMs === undefined) log(`second image: reusing ${secondImage.path}`);
  // Before the daemons: the release server is ready once it serves every release.
  await ensureReleases(log);
  await ensureNamespace();
  await $`ip -n ${LAB.namespace} link set lo up`;
  // Before the sshd starts: it also listens on the segment's hypervisor address.
  await ensureMacvtapSegment(log);
  await ensureSecondHypervisor(log);
  await ensureSshdFiles();
  await startDaemons(log);
  const images = { base: image.path, second: secondImage.path };
  await ensureLibvirtObjects(FIRST_HYPERVISOR, images, log);
  await ensureLibvirtObjects(SECOND_HYPERVISOR, images, log);
  await linkBridges(log);
  log(
    `up in ${((performance.now() - started) / 1000).toFixed(1)} s; hypervisors: root@${LAB.forwardHost}:${LAB.forwardPort}, root@${LAB.forwardHost}:${SECOND.forwardPort}`,
  );
}

async function ensureNamespace(): Promise<void> {
  if (await namespaceExists(LAB.namespace)) return;
  // A namespace vanished under running daemons (or never existed): start them all afresh inside it.
  await stopDaemons(log);
  await $`ip netns add ${LAB.namespace}`;
  log(`namespace ${LAB.namespace}: created`);
}

async function down(): Promise<void> {
  // A killed run leaves libvirt's persistent VMs, pools and network defined but libvirtd gone: start
  // it (in the namespace) just to remove them, or the next `up` would autostart the old VMs. Not when
  // libvirt's configuration holds none of them (a lab already down): that start and stop cost ~9 s.
  const libvirtdDown = daemonStatus().find((daemon) => daemon.name === 'libvirtd')?.pid === undefined;
  if (existsSync(labPath('run')) && libvirtdDown && labObjectsDefined()) {
    await ensureNamespace();
    await startDaemons(log, ['virtlogd', 'libvirtd']).catch((error: Error) => log(`cannot start libvirtd for cleanup: ${error.message}`));
  }
  await removeLibvirtObjects(log).catch((error: Error) => log(`libvirt cleanup incomplete: ${error.message}`));
  await stopDaemons(log);
  await removeMacvtapSegment(log);
  await removeSecondHypervisor(log);
  // Whatever still runs in the namespace was started by the lab (qemu, dnsmasq): stopped too.
  if (await removeNamespace(LAB.namespace, stopProcess)) log(`namespace ${LAB.namespace}: removed`);
  const kvmNote = restoreKvmDevice();
  if (kvmNote) log(kvmNote);
}

async function clear(): Promise<void> {
  // libvirtd is only asked while it runs: a lab that is down has no VM to remove (down removes them).
  await removeLabVms(log);
}

async function status(): Promise<void> {
  console.log(`namespace ${LAB.namespace}: ${(await namespaceExists(LAB.namespace)) ? 'present' : 'absent'}`);
  for (const daemon of daemonStatus()) console.log(`${daemon.name}: ${daemon.pid ? `running (pid ${daemon.pid})` : 'stopped'}`);
  console.log(`image: ${cachedImagePath()} (${existsSync(cachedImagePath()) ? 'built' : 'not built'}), volume ${LAB.baseVolume}`);
  console.log(
    `second image: ${cachedSecondImagePath()} (${existsSync(cachedSecondImagePath()) ? 'built' : 'not built'}), volume ${LAB.secondBaseVolume}: the base image with ${LAB.secondImageMark.path} and ${SECOND_IMAGE_RECIPE.packages.join(', ')}, to upgrade members to`,
  );
  console.log(`acceleration: ${chooseAcceleration().type}`);
  console.log(releasesStatus());
  console.log(await macvtapStatus());
  console.log(await secondStatus());
  console.log(await libvirtStatus(FIRST_HYPERVISOR));
  console.log(await libvirtStatus(SECOND_HYPERVISOR));
}

const commands: Record<string, () => Promise<void>> = { up, down, clear, status };
const command = commands[process.argv[2] ?? ''];
if (!command || process.argv.includes('--help')) {
  console.log(USAGE);
  process.exit(command || process.argv.includes('--help') ? 0 : 2);
}
if (process.getuid?.() !== 0) {
  console.error('lab: must run as root (network namespaces, libvirtd, and /dev/kvm where there is one)');
  process.exit(2);
}
$.verbose = false;
try {
  await command();
} catch (error) {
  const message = error instanceof Error ? error.message : String(error);
  console.error(`lab ${process.argv[2]}: failed: ${message.trim().split('\n').slice(0, 6).join('\n')}`);
  process.exit(1);
}
