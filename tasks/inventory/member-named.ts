import { InputError } from '../core/errors.ts';
import type { Inventory, Member } from './model.ts';

/** The inventory's present member of this name; another name is bad input, said with the names there are. */
export function memberNamed(inventory: Inventory, name: string, given = name): Member {
  const member = inventory.members.find((candidate) => candidate.name === name);
  if (member) return member;
  throw new InputError(`${given} is not a member of the inventory; members are ${inventory.members.map((m) => m.name).join(', ')}`);
}
