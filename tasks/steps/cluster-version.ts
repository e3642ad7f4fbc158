import { firstLineOf } from '../core/errors.ts';
import type { Wait } from '../core/step.ts';
import type { ClientIdentity, EtcdClients } from '../etcd/client.ts';
import { versionOf } from '../etcd/version.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import { minorOf, parseVersion } from '../upgrade/version.ts';
import { memberTargets } from './member-targets.ts';
import { deployStep } from './deploy-step.ts';

/**
 * After a roll onto another minor: the cluster version (`/version`'s `etcdcluster`) has moved to
 * etcd.version's minor on every member. etcd's leader moves it a few seconds after the last member
 * runs the new minor; until then the cluster keeps the old minor's behaviour (and a step back is still
 * allowed). On a cluster already there it is one look.
 */
export function clusterVersionWait({
  inventory,
  members,
  clients,
  root,
}: {
  inventory: Inventory;
  members: readonly Member[];
  clients: EtcdClients;
  root: () => ClientIdentity;
}): Wait<string> {
  const { targets, memberNamed } = memberTargets(members);
  const wanted = inventory.etcd.version;
  // The plan has this wait with binaries: release only, where etcd.version is always a release (inventory/model.ts).
  if (!wanted) throw new Error('the cluster version is waited for with binaries: release only');
  const minor = minorOf(wanted);
  return {
    name: 'cluster-version',
    targets,
    deadlineMs: inventory.cluster.healthTimeout * 1000,
    pollMs: 1_000,
    async look(name) {
      try {
        const { etcdcluster } = await versionOf(clients, memberNamed(name), root());
        const seen = parseVersion(etcdcluster);
        if (seen && minorOf(seen) === minor) return { ready: true, seen: etcdcluster };
        return { ready: false, reason: `the cluster version is ${etcdcluster}` };
      } catch (error) {
        return { ready: false, reason: firstLineOf(error) };
      }
    },
    pending: (reason) => `wait for the cluster version to move to ${minor} (now: ${reason})`,
    waiting: (reason) => `waiting for the cluster version ${minor}: ${reason}`,
    failure: (name, reason) =>
      `the cluster version did not move to ${minor} within cluster.health_timeout ` +
      `(${inventory.cluster.healthTimeout} s) as ${name} sees it: ${reason}. ` +
      'It moves once every member runs that minor: status lists the version each member runs.',
  };
}

declare module './deploy-step.ts' {
  interface PassSteps {
    'cluster-version': true;
  }
}

export const clusterVersion = deployStep({
  id: 'cluster-version',
  kind: 'wait',
  on: 'etcd',
  selectable: false,
  changes: [],
  doc: "with binaries: release on a formed cluster: /version's cluster version at etcd.version's minor on every member",
  run: ({ pass }, run) =>
    run.runner.runWait(
      clusterVersionWait({
        inventory: run.clusterOf(pass.cluster),
        members: run.resources.membersNamed(pass.members),
        clients: run.resources.clients,
        root: run.resources.identities.root,
      }),
    ),
});
