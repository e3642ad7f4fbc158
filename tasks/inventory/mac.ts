import { createHash } from 'node:crypto';

/**
 * A stable MAC address for an interface the operator left without one.
 * Derived from the cluster, member and interface index so re-runs render the same domain;
 * 52:54:00 is QEMU's locally administered prefix, as libvirt itself uses.
 */
export function derivedMac(cluster: string, member: string, interfaceIndex: number): string {
  const digest = createHash('sha256').update(`${cluster}/${member}/${interfaceIndex}`).digest();
  const tail = [digest[0], digest[1], digest[2]].map((byte) => (byte ?? 0).toString(16).padStart(2, '0'));
  return ['52', '54', '00', ...tail].join(':');
}

export const MAC_PATTERN = /^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$/;
