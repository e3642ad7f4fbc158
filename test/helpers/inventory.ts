import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { scratchDir } from './scratch.ts';
import { InputError } from '../../tasks/core/errors.ts';
import { loadInventory } from '../../tasks/inventory/load.ts';
import type { Inventory } from '../../tasks/inventory/model.ts';

export type Doc = Record<string, unknown> & { members: Record<string, unknown>[] };

/** A small valid inventory: three members on one libvirt network, cert auth, bootstrap on the first. */
export function baseDocument(): Doc {
  const nic = (ip: string) => [{ network_name: 'net', ip, prefix_length: 24, gateway: '10.10.0.1' }];
  return {
    cluster: { name: 'test', initial_token: 'test-token' },
    // The machine's ~/.ssh/config stays out of unit tests.
    ssh_config: false,
    hypervisors: { hv: { address: '127.0.0.1' } },
    defaults: { install_dependencies: false, base_image: { pool: 'images', volume: 'base.qcow2' }, vcpus: 1, memory: 1024 },
    members: [
      { name: 'etcd-1', libvirt_networks: nic('10.10.0.11'), authentication_bootstrap: { bootstrap: true } },
      { name: 'etcd-2', libvirt_networks: nic('10.10.0.12') },
      { name: 'etcd-3', libvirt_networks: nic('10.10.0.13') },
    ],
  };
}

export function writeInventory(doc: unknown, dir = scratchDir('inventory')): string {
  const path = join(dir, 'inventory.yaml');
  writeFileSync(path, typeof doc === 'string' ? doc : stringify(doc));
  return path;
}

export function load(doc: unknown): Inventory {
  return loadInventory(writeInventory(doc));
}

/** The problems an invalid inventory is rejected with; fails if it loads. */
export function problemsOf(doc: unknown): string[] {
  try {
    load(doc);
  } catch (error) {
    if (error instanceof InputError) return [...error.problems];
    throw error;
  }
  throw new Error('inventory loaded, but problems were expected');
}

/** Each problem with where it is written (`in FILE:LINE:COLUMN[, found VALUE]`), for an inventory given as text. */
export function locatedProblemsOf(text: string): { problem: string; at: string | undefined }[] {
  try {
    load(text);
  } catch (error) {
    if (error instanceof InputError) return error.problems.map((problem, i) => ({ problem, at: error.locations[i] }));
    throw error;
  }
  throw new Error('inventory loaded, but problems were expected');
}
