import { firstLineOf } from '../core/errors.ts';
import type { Wait } from '../core/step.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { EtcdClients } from '../etcd/client.ts';
import { catchUp, type CatchUpMark } from '../etcd/roll.ts';
import { HEALTH_POLL_MS, healthFailure, memberHealth, type Health } from '../etcd/health.ts';
import { memberTargets } from './member-targets.ts';
import { deployStep } from './deploy-step.ts';

/** An active alarm is worth knowing; NOSPACE says what to do. */
export const alarmWarnings = (alarms: readonly string[]): string[] =>
  alarms.includes('NOSPACE')
    ? [
        'etcd reports an active NOSPACE alarm: the cluster refuses writes. Delete what is not needed, ' +
          'then maintain.ts --compact --defrag --disarm (or raise etcd.space_quota)',
      ]
    : alarms.map((alarm) => `etcd reports an active ${alarm} alarm`);

/**
 * A wait: every member healthy over TLS with the inventory's member list, within
 * cluster.health_timeout; with `caughtUp`, also applied what the leader had applied when the member
 * was first seen healthy (after a member came back, before the next one goes). Failed at the
 * deadline with the member, its last answer and where to look; a member whose hypervisor connection
 * is dead fails at once (no answer could come through it).
 */
export function healthWait({
  inventory,
  members,
  clients,
  caughtUp = false,
}: {
  inventory: Inventory;
  members: readonly Member[];
  clients: EtcdClients;
  caughtUp?: boolean;
}): Wait<Health> {
  const { targets, memberNamed } = memberTargets(members);
  const marks = new Map<string, CatchUpMark>(members.map((member) => [member.name, {}]));
  return {
    name: 'health',
    targets,
    deadlineMs: inventory.cluster.healthTimeout * 1000,
    pollMs: HEALTH_POLL_MS,
    async look(name) {
      const member = memberNamed(name);
      const health = await memberHealth(inventory, clients, member);
      if (health.healthy) {
        const behind = caughtUp
          ? await catchUp(inventory, clients, member, marks.get(name)!).then(
              (progress) => (progress.caughtUp ? undefined : progress.what),
              (error: unknown) => firstLineOf(error),
            )
          : undefined;
        if (behind !== undefined) return { ready: false, reason: `healthy, catching up with the leader: ${behind}` };
        return { ready: true, seen: health, warnings: alarmWarnings(health.alarms) };
      }
      const unreachable = clients.unreachable(member);
      if (unreachable !== undefined) return { ready: false, reason: `etcd on ${name} cannot be asked: ${unreachable}`, final: true };
      return { ready: false, reason: health.reason };
    },
    pending: (reason) => `wait for etcd to become healthy (now: ${reason})`,
    waiting: (reason) => `waiting for etcd: ${reason}`,
    failure: (name, reason) => healthFailure(memberNamed(name), inventory.cluster.healthTimeout * 1000, reason),
  };
}

declare module './deploy-step.ts' {
  interface PassSteps {
    health: true;
  }
}

export const health = deployStep({
  id: 'health',
  kind: 'wait',
  on: 'etcd',
  selectable: true,
  changes: [],
  doc: "every member healthy with the inventory's voting members, within cluster.health_timeout",
  run: ({ pass, caughtUp }, run) =>
    run.runner.runWait(
      healthWait({
        inventory: run.clusterOf(pass.cluster),
        members: run.resources.membersNamed(pass.members),
        clients: run.resources.clients,
        caughtUp: caughtUp === true,
      }),
    ),
});
