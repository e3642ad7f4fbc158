import { copyFileSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { $ } from 'zx';
import { LAB, SECOND, SECOND_LIBVIRT_DIRS, secondPath } from './config.ts';
import { stopDaemons } from './daemons.ts';
import { namespaceExists, removeNamespace } from './netns.ts';
import { stopProcess } from './processes.ts';

/**
 * The second hypervisor's namespace and directories, and the veth pair that puts its bridge on the
 * first one's segment. Everything it has lives under SECOND.dir: `down` removes that directory whole.
 */

const linkExists = async (namespace: string, name: string) =>
  (await $`ip -n ${namespace} link show ${name}`.nothrow().quiet()).exitCode === 0;

/** Idempotent: the namespace, and the directories its libvirt daemons use in place of the machine's (the machine's *.conf copied in on every up). */
export async function ensureSecondHypervisor(log: (line: string) => void): Promise<void> {
  if (!(await namespaceExists(SECOND.namespace))) {
    // Daemons left running in a vanished namespace (a killed run) are started afresh in the new one.
    await stopDaemons(log, `${SECOND.name}-`);
    await $`ip netns add ${SECOND.namespace}`;
    log(`namespace ${SECOND.namespace}: created (the second hypervisor)`);
  }
  await $`ip -n ${SECOND.namespace} link set lo up`;
  for (const [dir, target] of SECOND_LIBVIRT_DIRS) {
    mkdirSync(secondPath(dir), { recursive: true, mode: 0o755 });
    // The machine's directory must exist to be bound over.
    mkdirSync(target, { recursive: true });
  }
  // The daemons' settings are the machine's; its domains, networks and pools are not copied.
  for (const file of readdirSync('/etc/libvirt').filter((name) => name.endsWith('.conf'))) {
    copyFileSync(join('/etc/libvirt', file), join(secondPath('etc'), file));
  }
}

/** The two hypervisors' lab bridges joined by a veth pair (after both networks are started: libvirt makes the bridges). */
export async function linkBridges(log: (line: string) => void): Promise<void> {
  const { near, far } = SECOND.link;
  if (!(await linkExists(LAB.namespace, near)) || !(await linkExists(SECOND.namespace, far))) {
    await $`ip -n ${LAB.namespace} link del ${near}`.nothrow().quiet();
    await $`ip -n ${SECOND.namespace} link del ${far}`.nothrow().quiet();
    await $`ip -n ${LAB.namespace} link add ${near} type veth peer name ${far} netns ${SECOND.namespace}`;
    log(`segment: ${LAB.network.bridge} (${LAB.namespace}) <-> ${SECOND.network.bridge} (${SECOND.namespace})`);
  }
  // Again every time: a network restarted by libvirt comes back as a new bridge without the port.
  await $`ip -n ${LAB.namespace} link set ${near} master ${LAB.network.bridge} up`;
  await $`ip -n ${SECOND.namespace} link set ${far} master ${SECOND.network.bridge} up`;
}

/** Stops whatever still runs in the namespace (its QEMU processes, dnsmasq), removes it, then the hypervisor's directory. */
export async function removeSecondHypervisor(log: (line: string) => void): Promise<void> {
  if (await removeNamespace(SECOND.namespace, stopProcess)) log(`namespace ${SECOND.namespace}: removed`);
  rmSync(SECOND.dir, { recursive: true, force: true });
}

export async function secondStatus(): Promise<string> {
  if (!(await namespaceExists(SECOND.namespace))) return `second hypervisor: absent (no namespace ${SECOND.namespace})`;
  const joined = (await linkExists(SECOND.namespace, SECOND.link.far)) ? 'bridges joined' : 'bridges not joined';
  return `second hypervisor ${SECOND.name}: namespace ${SECOND.namespace}, root@${LAB.forwardHost}:${SECOND.forwardPort}, ${joined}`;
}
