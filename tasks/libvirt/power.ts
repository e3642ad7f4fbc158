import { parseDomInfo } from './domain-xml.ts';
import type { Virsh } from './virsh.ts';

/** How long a guest gets for an ACPI shutdown before it is powered off; TCG guests stop in ~10-20 s. */
export const SHUTDOWN_GRACE_MS = 120_000;

/**
 * An active domain stopped: an ACPI shutdown (etcd stops cleanly), powered off once the grace is over.
 * libvirt refuses `shutdown` unless the domain runs: a paused one is resumed first, one already "in
 * shutdown" is only waited for, and any other active state (pmsuspended) waits out the grace.
 */
export async function shutDown(virsh: Pick<Virsh, 'run'>, name: string, graceMs = SHUTDOWN_GRACE_MS): Promise<void> {
  const { state } = parseDomInfo(await virsh.run(['dominfo', name]));
  if (state === 'paused') await virsh.run(['resume', name]);
  if (state === 'running' || state === 'paused') await virsh.run(['shutdown', name]);
  const deadline = Date.now() + graceMs;
  // Until it is off: "in shutdown" is still active (parseDomInfo).
  while (parseDomInfo(await virsh.run(['dominfo', name])).active) {
    if (Date.now() > deadline) {
      await virsh.run(['destroy', name]);
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 1_000));
  }
}
