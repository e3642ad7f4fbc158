import type { Inventory } from './model.ts';

/**
 * Where the members sit against quorum: a hypervisor whose loss alone would leave fewer than a
 * majority of the voting members takes the cluster down with it. Said as warnings, not refused: a lab
 * or a first step may run everything on one host on purpose.
 */
export function placementWarnings(inventory: Inventory): string[] {
  const members = inventory.members;
  const quorum = Math.floor(members.length / 2) + 1;
  const byHypervisor = new Map<string, string[]>();
  for (const member of members) byHypervisor.set(member.hypervisor.name, [...(byHypervisor.get(member.hypervisor.name) ?? []), member.name]);
  return [...byHypervisor]
    .filter(([, names]) => members.length - names.length < quorum)
    .map(
      ([hypervisor, names]) =>
        `${names.length} of ${members.length} members are on hypervisor ${hypervisor} (${names.join(', ')}): losing that host loses quorum (${quorum} needed); ` +
        `put at most ${members.length - quorum} member${members.length - quorum === 1 ? '' : 's'} on any one hypervisor`,
    );
}
