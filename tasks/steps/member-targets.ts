import type { Member } from '../inventory/model.ts';

/** What every per-member step needs: its target names, and the member each target names. */
export function memberTargets(members: readonly Member[]): { targets: string[]; memberNamed: (name: string) => Member } {
  const byName = new Map(members.map((member) => [member.name, member]));
  return {
    targets: [...byName.keys()],
    memberNamed: (name) => {
      const member = byName.get(name);
      if (!member) throw new Error(`${name} is not a target of this step`);
      return member;
    },
  };
}
