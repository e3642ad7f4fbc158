import type { Progress } from '../core/progress.ts';
import type { Step } from '../core/step.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { EtcdClients } from '../etcd/client.ts';
import { memberHealth, waitForHealth, type Health } from '../etcd/health.ts';
import { memberTargets } from './member-targets.ts';

/**
 * Waits until every member reports healthy over TLS with the inventory's member list. Read-only: it is
 * `ok` or it fails with the member, its last answer and where to look. A dry-run asks once and reports
 * the wait it would do.
 */
export function healthStep(inventory: Inventory, members: readonly Member[], clients: EtcdClients, dryRun: boolean, progress?: Progress): Step<Health, null> {
  const { targets, memberNamed } = memberTargets(members);
  return {
    name: 'health',
    targets,
    async check(name) {
      const member = memberNamed(name);
      if (dryRun) return memberHealth(inventory, clients, member);
      const health = await waitForHealth(inventory, clients, member, inventory.cluster.health_timeout * 1000, (answer) => progress?.update(name, answer.healthy ? 'healthy' : `waiting for etcd: ${answer.reason}`));
      progress?.done(name);
      return health;
    },
    warnings(health) {
      if (!health.healthy || !health.alarms.includes('NOSPACE')) return health.healthy ? health.alarms.map((alarm) => `etcd reports an active ${alarm} alarm`) : [];
      return ['etcd reports an active NOSPACE alarm: the cluster refuses writes. Delete what is not needed, then maintain.ts --compact --defrag --disarm (or raise etcd.space_quota)'];
    },
    plan(health) {
      return health.healthy ? [] : [{ summary: `wait for etcd to become healthy (now: ${health.reason})`, action: null }];
    },
    async apply() {
      // Nothing to change: check() already waited.
    },
  };
}
