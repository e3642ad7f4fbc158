import { $ } from 'zx';
import { LAB } from './config.ts';
import { namespaceExists, removeNamespace } from './netns.ts';
import { stopProcess } from './processes.ts';

/**
 * The lab's macvtap segment. A host cannot talk to its own macvtap guests, so the members on it are
 * reached from the client namespace at the far end of the veth pair, as an operator's machine on the
 * same LAN would reach them. The hypervisor keeps an address on the parent for its sshd: the parent
 * itself is reachable from the peer, only the parent-to-guest path is not.
 */

const { parent, peer, clientNamespace, hypervisorAddress, clientAddress, prefixLength } = LAB.macvtap;

const linkExists = async (namespace: string, name: string) =>
  (await $`ip -n ${namespace} link show ${name}`.nothrow().quiet()).exitCode === 0;

/** Idempotent: recreates whatever a killed run or a recreated lab namespace left missing. */
export async function ensureMacvtapSegment(log: (line: string) => void): Promise<void> {
  if (!(await namespaceExists(clientNamespace))) {
    await $`ip netns add ${clientNamespace}`;
    log(`namespace ${clientNamespace}: created (the macvtap segment's client side)`);
  }
  await $`ip -n ${clientNamespace} link set lo up`;
  if (!(await linkExists(LAB.namespace, parent)) || !(await linkExists(clientNamespace, peer))) {
    // Half a pair cannot exist (deleting one end deletes both) but a killed run can leave the pair
    // unmoved; start from nothing.
    await $`ip -n ${LAB.namespace} link del ${parent}`.nothrow().quiet();
    await $`ip -n ${LAB.namespace} link del ${peer}`.nothrow().quiet();
    await $`ip -n ${LAB.namespace} link add ${parent} type veth peer name ${peer} netns ${clientNamespace}`;
    log(`macvtap segment: ${parent} (hypervisor, ${hypervisorAddress}) <-> ${peer} (${clientNamespace}, ${clientAddress})`);
  }
  await $`ip -n ${LAB.namespace} addr replace ${`${hypervisorAddress}/${prefixLength}`} dev ${parent}`;
  await $`ip -n ${LAB.namespace} link set ${parent} up`;
  await $`ip -n ${clientNamespace} addr replace ${`${clientAddress}/${prefixLength}`} dev ${peer}`;
  await $`ip -n ${clientNamespace} link set ${peer} up`;
}

/** Removes the client namespace (and with it the veth pair); stops whatever still runs in it. */
export async function removeMacvtapSegment(log: (line: string) => void): Promise<void> {
  if (await removeNamespace(clientNamespace, stopProcess)) log(`namespace ${clientNamespace}: removed`);
}

export async function macvtapStatus(): Promise<string> {
  if (!(await namespaceExists(clientNamespace))) return `macvtap segment: absent (no namespace ${clientNamespace})`;
  const up = (await linkExists(clientNamespace, peer)) ? `${parent} <-> ${peer}` : 'no veth pair';
  return `macvtap segment: ${up}; client namespace ${clientNamespace} (${clientAddress})`;
}
