import type { Fact } from '../core/step.ts';
import type { Member } from '../inventory/model.ts';
import type { LibvirtAnswers } from '../libvirt/context.ts';
import { isNotFound, type ProbeAnswer } from '../libvirt/virsh.ts';
import { memberTargets } from './member-targets.ts';
import { deployStep } from './deploy-step.ts';

/**
 * Interfaces given by `network_id` name libvirt's network by its UUID; the domain XML needs its name
 * on the member's hypervisor. Asked there (`virsh net-name`, one probe per member) before rendering;
 * a UUID the hypervisor does not know fails that member, naming it. A fact: it changes nothing.
 */

export const networkIdsOf = (member: Member): string[] => [
  ...new Set(member.interfaces.flatMap((nic) => (nic.source.kind === 'network-id' ? [nic.source.networkId] : []))),
];

/** The names found, by member, then by UUID: what renderAll takes. */
export type NetworkNames = Map<string, Map<string, string>>;

export function networksFact({ members, context }: { members: readonly Member[]; context: LibvirtAnswers }): Fact<Map<string, string>> {
  const { targets, memberNamed } = memberTargets(members.filter((member) => networkIdsOf(member).length > 0));
  return {
    name: 'networks',
    targets,
    async ask(name) {
      const member = memberNamed(name);
      const ids = networkIdsOf(member);
      const answers = await context.probe(member, Object.fromEntries(ids.map((id, i) => [`n${i}`, ['net-name', id]])));
      return new Map(ids.map((id, i) => [id, networkName(member, id, answers[`n${i}`]!)]));
    },
  };
}

/** The network's name from `virsh net-name`'s answer; a UUID the hypervisor does not know fails, naming it. */
function networkName(member: Member, id: string, answer: ProbeAnswer): string {
  if (answer.code === 0) return answer.output.trim();
  if (isNotFound(answer, 'network'))
    throw new Error(
      `network_id ${id} names no libvirt network on hypervisor ${member.hypervisor.name} (virsh net-list --all --uuid lists those there)`,
    );
  throw new Error(`cannot resolve network_id ${id} on hypervisor ${member.hypervisor.name}: ${answer.output.trim().split('\n')[0]}`);
}

export const networks = deployStep({
  id: 'networks',
  kind: 'fact',
  on: 'hypervisors',
  selectable: false,
  changes: [],
  doc: "the libvirt network's name for each interface given by network_id",
});
