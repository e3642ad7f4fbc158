import type { Step } from '../core/step.ts';
import type { Member } from '../inventory/model.ts';
import type { RemoteContext } from '../libvirt/context.ts';
import { isNotFound, type ProbeAnswer } from '../libvirt/virsh.ts';
import { memberTargets } from './member-targets.ts';

/**
 * Interfaces given by `network_id` name libvirt's network by its UUID; the domain XML needs its name
 * on the member's hypervisor. Asked there (`virsh net-name`, one probe per member) before rendering;
 * a UUID the hypervisor does not know fails that member, naming it. Read-only: nothing to apply.
 */

export const networkIdsOf = (member: Member): string[] => [...new Set(member.interfaces.flatMap((nic) => (nic.source.kind === 'network-id' ? [nic.source.networkId] : [])))];

/** The names found, by member, then by UUID: what renderAll takes. */
export type NetworkNames = Map<string, Map<string, string>>;

export function networksStep(members: readonly Member[], context: RemoteContext, resolved: NetworkNames): Step<Map<string, ProbeAnswer>, never> {
  const { targets, memberNamed } = memberTargets(members.filter((member) => networkIdsOf(member).length > 0));
  return {
    name: 'networks',
    targets,
    async check(name) {
      const ids = networkIdsOf(memberNamed(name));
      const answers = await context.probe(memberNamed(name), Object.fromEntries(ids.map((id, i) => [`n${i}`, ['net-name', id]])));
      return new Map(ids.map((id, i) => [id, answers[`n${i}`]!]));
    },
    plan(answers, name) {
      const member = memberNamed(name);
      const names = new Map<string, string>();
      for (const [id, answer] of answers) {
        if (answer.code === 0) names.set(id, answer.output.trim());
        else if (isNotFound(answer, 'network')) throw new Error(`network_id ${id} names no libvirt network on hypervisor ${member.hypervisor.name} (virsh net-list --all --uuid lists those there)`);
        else throw new Error(`cannot resolve network_id ${id} on hypervisor ${member.hypervisor.name}: ${answer.output.trim().split('\n')[0]}`);
      }
      resolved.set(name, names);
      return [];
    },
    async apply() {
      // Never called: resolving changes nothing.
    },
  };
}
