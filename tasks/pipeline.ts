import { join, resolve } from 'node:path';
import { PRIVATE_FILE_MODE, PUBLIC_FILE_MODE, writeFileAtomic } from './core/files.ts';
import { InputError } from './core/errors.ts';
import type { Runner } from './core/runner.ts';
import type { Inventory, Member } from './inventory/model.ts';
import { materialsFrom, readFacts } from './pki/materials.ts';
import { PkiStore } from './pki/store.ts';
import { renderMember, type RenderedFile } from './render/member.ts';
import { pkiStep } from './steps/pki.ts';
import { renderedFilesStep } from './steps/rendered-files.ts';

/**
 * The order of the deploy, in one place:
 *   1. pki       – CA, member and root client certificates, the tool's SSH key (control node)
 *   2. render    – domain XML and cloud-init files per member, recorded in the state directory
 *   3. remote    – volumes, domains, health, auth bootstrap on the hypervisors (not implemented yet)
 */

export interface PipelineOptions {
  dryRun: boolean;
  renderOnly?: string;
  limit?: string[];
}

export function selectMembers(inventory: Inventory, limit: string[] | undefined): Member[] {
  if (!limit) return inventory.members;
  const unknown = limit.filter((name) => !inventory.members.some((member) => member.name === name));
  if (unknown.length > 0) throw new InputError(`--limit names unknown members: ${unknown.join(', ')}; members are ${inventory.members.map((m) => m.name).join(', ')}`);
  return inventory.members.filter((member) => limit.includes(member.name));
}

export function renderAll(inventory: Inventory, members: Member[], store: PkiStore): Map<string, RenderedFile[]> {
  const pki = materialsFrom(inventory, readFacts(inventory, store));
  const initialClusterState = inventory.cluster.is_initializing ? 'new' : 'existing';
  return new Map(members.map((member) => [member.name, renderMember({ inventory, pki, initialClusterState }, member)]));
}

/** Writes rendered files for review: DIR/<member>/<file>; files holding secrets are 0600, directories 0700. */
export function writeRendered(dir: string, rendered: Map<string, RenderedFile[]>): string[] {
  const written: string[] = [];
  for (const [member, files] of rendered) {
    for (const file of files) {
      const path = join(resolve(dir), member, file.name);
      writeFileAtomic(path, file.content, file.containsSecrets ? PRIVATE_FILE_MODE : PUBLIC_FILE_MODE);
      written.push(path);
    }
  }
  return written;
}

export async function runDeploy(inventory: Inventory, runner: Runner, options: PipelineOptions): Promise<{ written: string[] }> {
  const members = selectMembers(inventory, options.limit);
  const store = new PkiStore(inventory.stateDir);
  let rendered = new Map<string, RenderedFile[]>();
  let written: string[] = [];
  await runner.runPhases([
    { title: 'pki', run: () => runner.runStep(pkiStep(inventory, store)) },
    {
      title: 'render',
      run: async () => {
        rendered = renderAll(inventory, members, store);
        if (options.renderOnly !== undefined) {
          written = writeRendered(options.renderOnly, rendered);
          return [];
        }
        return runner.runStep(renderedFilesStep(inventory.stateDir, rendered));
      },
    },
  ]);
  return { written };
}
