import { join, resolve } from 'node:path';
import { PRIVATE_FILE_MODE, PUBLIC_FILE_MODE, writeFileAtomic } from './core/files.ts';
import { InputError } from './core/errors.ts';
import type { Runner } from './core/runner.ts';
import type { Inventory, Member } from './inventory/model.ts';
import { clientIdentities, materialsFrom, readFacts } from './pki/materials.ts';
import { PkiStore } from './pki/store.ts';
import { renderMember, type RenderedFile } from './render/member.ts';
import { pkiStep } from './steps/pki.ts';
import { renderedFilesStep } from './steps/rendered-files.ts';
import { EtcdClients, preloadEtcdClient } from './etcd/client.ts';
import { RemoteContext } from './remote/context.ts';
import { authStep } from './steps/auth.ts';
import { cloudInitIsoStep, seedQuestions } from './steps/cloud-init-iso.ts';
import { domainQuestions, domainsStep } from './steps/domains.ts';
import { healthStep } from './steps/health.ts';
import { restoreStep } from './steps/restore.ts';
import { MemberConnections } from './remote/members.ts';
import { volumeQuestions, volumesStep } from './steps/volumes.ts';

/**
 * The order of the deploy, in one place:
 *   1. pki       – CA, member and root client certificates, the tool's SSH key (control node)
 *   2. render    – domain XML and cloud-init files per member, recorded in the state directory
 *   3. volumes   – OS overlay and data disks (hypervisors, over SSH)
 *   4. cloud-init– the NoCloud seed ISO per member
 *   5. domain    – define, start, autostart; rolling restart when a definition changed
 *   6. restore   – only with restore.enabled: the same etcd-backup snapshot into every member's empty
 *                  data directory (SSH to the member), then etcd starts
 *   7. health    – every member healthy with the inventory's member list (etcd's API, via the hypervisor)
 *   8. auth      – root role and user, auth enable, from the designated member only
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
  const remote = new RemoteContext();
  const identity = clientIdentities(inventory, store);
  const clients = new EtcdClients(remote.connections, inventory.etcd.client_port, identity.health);
  // Restore settings are the same on every member (a load rule): the first restoring member's serve all.
  const restoring = members.find((member) => member.input.restore.enabled);
  // Loaded only when needed: importing the S3 SDK costs ~120 ms at every start otherwise.
  const snapshots = restoring ? new (await import('./backup/source.ts')).SnapshotSource(restoring.input.restore) : undefined;
  const memberSsh = new MemberConnections(remote.connections, { privateKeyPath: store.pathsOf('ssh/admin').privateKey, knownHostsPath: store.knownHostsPath });
  const remotePhases = [
    {
      title: 'volumes',
      run: async () => {
        void preloadEtcdClient();
        await remote.prefetch(members, (member) => [...Object.values(volumeQuestions(member)), ...Object.values(seedQuestions(member)), ...Object.values(domainQuestions(member))]);
        return runner.runStep(volumesStep(inventory, members, remote));
      },
    },
    { title: 'cloud-init', run: () => runner.runStep(cloudInitIsoStep(inventory.stateDir, members, rendered, remote)) },
    { title: 'domain', run: () => runner.runStep(domainsStep({ inventory, members, rendered, context: remote, clients })) },
    ...(snapshots ? [{ title: 'restore', run: () => runner.runStep(restoreStep(inventory, members, memberSsh, snapshots, options.dryRun)) }] : []),
    { title: 'health', run: () => runner.runStep(healthStep(inventory, members, clients, options.dryRun)) },
    { title: 'auth', run: () => runner.runStep(authStep(inventory, members, clients, identity, options.dryRun)) },
  ];
  try {
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
      ...(options.renderOnly === undefined ? remotePhases : []),
    ]);
  } finally {
    clients.close();
    snapshots?.close();
    await memberSsh.closeAll();
    await remote.close();
  }
  return { written };
}
