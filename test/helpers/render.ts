import { parse } from 'yaml';
import { Runner } from '../../tasks/core/runner.ts';
import type { Inventory } from '../../tasks/inventory/model.ts';
import { renderAll } from '../../tasks/deploy/context.ts';
import { PkiStore } from '../../tasks/pki/store.ts';
import type { FirstStart } from '../../tasks/render/etcd.ts';
import type { RenderedFile } from '../../tasks/render/member.ts';
import type { DesiredGuest } from '../../tasks/render/guest/desired.ts';
import { ENABLE_UNLESS_ENABLED } from '../../tasks/render/guest/fragment.ts';
import { pkiStep } from '../../tasks/steps/pki.ts';
import { scratchDir } from './scratch.ts';

/** Issues the PKI into a fresh state directory and renders every member: what a deploy would upload. */
export async function renderWithPki(
  inventory: Inventory,
  firstStart: FirstStart = inventory.cluster.isInitializing ? 'new' : 'existing',
): Promise<{ inventory: Inventory; rendered: Map<string, RenderedFile[]>; guests: Map<string, DesiredGuest> }> {
  const stateDir = scratchDir('render');
  const withState = { ...inventory, stateDir };
  const store = new PkiStore(stateDir);
  const [result] = await new Runner({ dryRun: false, renderer: 'silent' }).runStep(pkiStep({ inventory: withState, store }));
  if (result?.status === 'failed') throw new Error(result.error);
  const { files, guests } = renderAll(withState, withState.members, store, firstStart);
  return { inventory: withState, rendered: files, guests };
}

export function fileOf(files: RenderedFile[] | undefined, name: string): RenderedFile {
  const file = files?.find((f) => f.name === name);
  if (!file) throw new Error(`no rendered ${name}`);
  return file;
}

export interface WriteFile {
  path: string;
  content: string;
  permissions?: string;
  owner?: string;
  defer?: boolean;
}

/** The user-data's write_files, keyed by guest path, as cloud-init will see them. */
export function writeFilesOf(userData: string): Map<string, WriteFile> {
  const config = parse(userData, { version: '1.1' }) as { write_files: WriteFile[] };
  return new Map(config.write_files.map((file) => [file.path, file]));
}

/**
 * Where a first boot's runcmd enables `unit` if it is not (the one enabling command lists it), starts or
 * restarts it (a systemctl command naming it among others): its index, -1 when it does none of that.
 */
export function firstBootStep(runcmd: readonly string[][], action: 'enable' | 'start' | 'restart', unit: string): number {
  return runcmd.findIndex((argv) =>
    action === 'enable'
      ? argv[0] === 'sh' && argv[1] === '-c' && argv[2] === ENABLE_UNLESS_ENABLED && argv.slice(4).includes(unit)
      : argv[0] === 'systemctl' && argv[1] === action && argv.slice(2).includes(unit),
  );
}
