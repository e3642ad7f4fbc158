import { parseDomInfo } from './domain-xml.ts';
import type { Virsh } from './virsh.ts';

/** How long a guest gets for an ACPI shutdown before it is powered off; TCG guests stop in ~10-20 s. */
export const SHUTDOWN_GRACE_MS = 120_000;

/**
 * Where a stop ends: `virsh dominfo`'s states of a domain that is no longer active. "in shutdown" is
 * still active (`virsh start` then fails with "Domain is already active", seen in CI once).
 */
const STOPPED = new Set(['shut off', 'crashed']);

/** A running domain stopped: an ACPI shutdown (etcd stops cleanly), powered off once the grace is over. */
export async function shutDown(virsh: Virsh, name: string, graceMs = SHUTDOWN_GRACE_MS): Promise<void> {
  await virsh.run(['shutdown', name]);
  const deadline = Date.now() + graceMs;
  while (!STOPPED.has(parseDomInfo(await virsh.run(['dominfo', name])).state)) {
    if (Date.now() > deadline) {
      await virsh.run(['destroy', name]);
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 1_000));
  }
}
