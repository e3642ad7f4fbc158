import { accessSync, constants, statSync } from 'node:fs';
import { InputError } from '../core/errors.ts';
import { unreadableReason } from '../core/files.ts';
import type { Inventory } from './model.ts';
import { formatProblem, type Problem } from './problems.ts';

function unreadable(file: string): string | undefined {
  try {
    if (statSync(file).isDirectory()) return unreadableReason({ code: 'EISDIR' });
    accessSync(file, constants.R_OK);
    return undefined;
  } catch (error) {
    return unreadableReason(error);
  }
}

/**
 * The private keys the run logs into hypervisors and bastions with, where the inventory (or the
 * ssh_config's IdentityFile) names one: each must be readable here. Asked before the first connection, so
 * a key file that is not there is bad input said at its field, not a hypervisor "unreachable" mid-run.
 */
export function loginKeyProblems(inventory: Inventory): Problem[] {
  const hosts = new Map<string, { path: (string | number)[]; file: string }>();
  for (const hypervisor of inventory.hypervisors) {
    if (hypervisor.privateKey)
      hosts.set(`h:${hypervisor.name}`, { path: ['hypervisors', hypervisor.name, 'private_key'], file: hypervisor.privateKey });
    for (const hop of hypervisor.jump)
      if (hop.privateKey) hosts.set(`b:${hop.name}`, { path: ['bastions', hop.name, 'private_key'], file: hop.privateKey });
  }
  return [...hosts.values()].flatMap(({ path, file }) => {
    const why = unreadable(file);
    return why
      ? [
          {
            path,
            message: `cannot read the private key ${file} (${why})`,
            hint:
              'give the path of a readable key (relative to the inventory), ' +
              "fix the ssh_config's IdentityFile it came from, or leave it out to use ssh-agent",
          },
        ]
      : [];
  });
}

/** Exit 2 before anything is asked of any host when a login key cannot be read. */
export function requireLoginKeys(inventory: Inventory): void {
  const problems = loginKeyProblems(inventory);
  if (problems.length === 0) return;
  throw new InputError(
    `inventory ${inventory.path}: ${problems.length === 1 ? 'a key' : 'keys'} to log in with cannot be read; nothing was changed`,
    problems.map((problem) => formatProblem(problem)),
  );
}
