import type { Inventory, Member } from './model.ts';

/** The members on each hypervisor, by its name, in inventory order: what one connection (one probe) serves. */
export function membersByHypervisor(members: readonly Member[]): Map<string, Member[]> {
  const hosted = new Map<string, Member[]>();
  for (const member of members) hosted.set(member.hypervisor.name, [...(hosted.get(member.hypervisor.name) ?? []), member]);
  return hosted;
}

/**
 * Where the members sit against quorum: a hypervisor whose loss alone would leave fewer than a
 * majority of the voting members takes the cluster down with it. Said as warnings, not refused: a lab
 * or a first step may run everything on one host on purpose.
 */
export function placementWarnings(inventory: Inventory): string[] {
  const members = inventory.members;
  const quorum = Math.floor(members.length / 2) + 1;
  return [...membersByHypervisor(members)]
    .filter(([, hosted]) => members.length - hosted.length < quorum)
    .map(
      ([hypervisor, hosted]) =>
        `${hosted.length} of ${members.length} members are on hypervisor ${hypervisor} ` +
        `(${hosted.map((member) => member.name).join(', ')}): losing that host loses quorum (${quorum} needed); ` +
        `put at most ${members.length - quorum} member${members.length - quorum === 1 ? '' : 's'} on any one hypervisor`,
    );
}
