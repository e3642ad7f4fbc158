import { setTimeout as delay } from 'node:timers/promises';
import type { Etcd3 } from 'etcd3';
import { CONTROL_NODE, type ControlNode, type Step } from '../core/step.ts';
import { firstAnswering, type EtcdClients } from '../etcd/client.ts';
import { alarmsListed, memberHealth, waitForHealth } from '../etcd/health.ts';
import { RUN_LOCK_PREFIX } from '../inventory/lock-keys.ts';
import { prefixEnd } from '../inventory/reserved.ts';
import { ensureQuorumWithout, handLeadershipAway, rollWaves, type HandedOff } from '../etcd/roll.ts';
import {
  MaintenanceRefusal,
  planCompact,
  planDefrag,
  planDisarm,
  type AlarmFacts,
  type CompactAction,
  type CompactionFacts,
  type DatabaseFacts,
  type DefragAction,
  type DisarmAction,
} from '../etcd/maintenance.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import { memberTargets } from './member-targets.ts';

/**
 * The steps of maintain.ts: compaction (the cluster's, from the control node), defragmentation (each
 * member, one at a time, leader last) and disarming NOSPACE. Their decisions are in etcd/maintenance.ts.
 */

/** How long one defragmentation may take: etcd rewrites the whole database file, blocking that member meanwhile. */
const DEFRAG_TIMEOUT_MS = 10 * 60_000;

/** The first member that answers, with its status, for the cluster-wide calls. */
async function anyAnswering(inventory: Inventory, clients: EtcdClients) {
  const { member, client, answer: status } = await firstAnswering(clients, inventory.members, (c) => c.maintenance.status({}));
  return { member, client, status };
}

/** etcd's backend commits its pending writes every 100 ms (batch interval): a little more than that. */
const BACKEND_COMMIT_MS = 300;

/**
 * Until every member's database figures are current after a compaction. Each member compacts its
 * backend in the background once it has applied the compaction (`physical` waits only on the member
 * asked), and the pages that frees count as in use (bbolt keeps them pending) until the backend
 * commits another write after it. So: a write outside the key space (a lease granted and revoked: no
 * key, no revision, nothing a client sees), every member has applied it and committed, and the sizes
 * in use are read — again, until two readings in a row agree (a member whose background compaction
 * was still running frees more in the next round). The defragmentation decides on those figures; a
 * member read too early was left out (the CI failure "etcd-2: 8331264 -> 8331264").
 */
async function settle(inventory: Inventory, clients: EtcdClients, client: Etcd3): Promise<void> {
  const deadline = Date.now() + 30_000;
  let previous = '';
  for (;;) {
    const lease = await client.leaseClient.leaseGrant({ TTL: '60', ID: '0' });
    await client.leaseClient.leaseRevoke({ ID: lease.ID });
    const index = Number((await client.maintenance.status({})).raftIndex);
    for (const member of inventory.members) {
      const memberClient = await clients.for(member);
      while (Number((await memberClient.maintenance.status({})).raftAppliedIndex) < index) {
        if (Date.now() > deadline) throw new Error(`${member.name} has not applied raft entry ${index} after 30 s`);
        await delay(100);
      }
    }
    await delay(BACKEND_COMMIT_MS);
    const reading = (await Promise.all(inventory.members.map(async (member) => (await clients.for(member)).maintenance.status({}))))
      .map((s) => s.dbSizeInUse)
      .join(',');
    if (reading === previous) return;
    if (Date.now() > deadline) throw new Error(`the database sizes in use still change 30 s after the compaction (${reading})`);
    previous = reading;
  }
}

const isCompactedError = (error: unknown): boolean => /compacted/.test((error as Error).message);

/** How far back the walk past run locks goes: each run adds two revisions (its lock's put and delete). */
const LOCK_REVISIONS_WALKED = 32;

/**
 * The newest revision at or below `from` that is not a run lock's put or delete (see etcd/run-lock.ts):
 * every run holds the cluster's lock, so without this a compaction would always find the last run's
 * lock to compact, and never be done. Throws etcd's "compacted" error once the walk reaches history
 * already compacted: nothing but locks came after the last compaction.
 */
async function newestRevisionNotALock(client: Etcd3, from: number): Promise<number> {
  const locksAt = async (revision: number) => {
    const answer = await client.kv.range({
      key: Buffer.from(RUN_LOCK_PREFIX),
      range_end: prefixEnd(Buffer.from(RUN_LOCK_PREFIX)),
      revision: String(revision),
    });
    return new Map(answer.kvs.map((kv) => [kv.key.toString(), kv.mod_revision]));
  };
  let revision = from;
  for (let walked = 0; revision > 1 && walked < LOCK_REVISIONS_WALKED; walked++, revision--) {
    const [now, before] = await Promise.all([locksAt(revision), locksAt(revision - 1)]);
    const put = [...now.values()].some((modified) => Number(modified) === revision);
    // A key there one revision earlier and gone now was deleted at exactly this revision.
    const deleted = [...before.keys()].some((key) => !now.has(key));
    if (!put && !deleted) return revision;
  }
  return revision;
}

/** What the maintenance steps ask etcd through. */
interface MaintenanceOptions {
  inventory: Inventory;
  clients: EtcdClients;
}

export function compactStep({ inventory, clients }: MaintenanceOptions): Step<CompactionFacts, CompactAction, ControlNode> {
  // Fixed at the first look, so the re-check after the apply asks about the same revision even while writes go on.
  let target: number | undefined;
  return {
    name: 'compact',
    targets: [CONTROL_NODE],
    async check() {
      const { client, status } = await anyAnswering(inventory, clients);
      target ??= Number(status.header.revision);
      try {
        // The history since the last compaction, less the tool's own run locks (each run puts and deletes one).
        const newest = await newestRevisionNotALock(client, target);
        if (newest <= 1) return { target, compacted: true };
        await client.kv.range({ key: Buffer.from([0]), revision: String(newest - 1), limit: '1' });
        return { target, compacted: false };
      } catch (error) {
        if (isCompactedError(error)) return { target, compacted: true };
        throw error;
      }
    },
    plan: (facts) => planCompact(facts),
    async apply(changes) {
      const { client } = await anyAnswering(inventory, clients);
      for (const { action } of changes)
        await client.kv.compact({ revision: String(action.revision), physical: true }, { deadline: Date.now() + DEFRAG_TIMEOUT_MS });
      await settle(inventory, clients, client);
    },
  };
}

/** Database sizes before and after, per member defragmented in this run, and the leadership it handed off first, for the report. */
export type DefragRecord = Map<string, { before: DatabaseFacts; after: DatabaseFacts; handedOff?: HandedOff }>;

export function defragStep({
  inventory,
  clients,
  record,
}: MaintenanceOptions & { record: DefragRecord }): Step<DatabaseFacts, DefragAction> {
  const { targets, memberNamed } = memberTargets(inventory.members);
  const sizes = async (member: Member): Promise<DatabaseFacts> => {
    const status = await (await clients.for(member)).maintenance.status({});
    return { dbSize: Number(status.dbSize), dbSizeInUse: Number(status.dbSizeInUse) };
  };
  return {
    name: 'defrag',
    targets,
    check: (name) => sizes(memberNamed(name)),
    plan: (facts) => planDefrag(facts, inventory.maintenance.defrag.rule, inventory.etcd.spaceQuota),
    // One member at a time, followers first, the leader last: a member being defragmented answers nothing.
    rollingOrder: (pending) =>
      rollWaves(
        inventory,
        clients,
        pending.map(({ target }) => ({ target, kind: 'restarts' })),
      ),
    async apply(changes, name) {
      const member = memberNamed(name);
      for (const { action } of changes) {
        await ensureQuorumWithout(inventory, clients, member);
        // A member being defragmented answers nothing: were it the leader, no write would be taken meanwhile.
        const handedOff = await handLeadershipAway(inventory, clients, member);
        await (await clients.for(member)).maintenance.defragment({ deadline: Date.now() + DEFRAG_TIMEOUT_MS });
        await waitForHealth(inventory, clients, member, inventory.cluster.healthTimeout * 1000);
        record.set(name, { before: action.before, after: await sizes(member), ...(handedOff ? { handedOff } : {}) });
      }
    },
  };
}

export function disarmStep({
  inventory,
  clients,
}: MaintenanceOptions): Step<AlarmFacts & { ids: Map<string, string> }, DisarmAction, ControlNode> {
  return {
    name: 'disarm',
    targets: [CONTROL_NODE],
    async check() {
      const { client } = await anyAnswering(inventory, clients);
      const [list, statuses] = await Promise.all([
        client.cluster.memberList({}),
        Promise.all(inventory.members.map(async (member) => (await clients.for(member)).maintenance.status({}).catch(() => undefined))),
      ]);
      const nameOf = (id: string) => list.members.find((m) => m.ID === id)?.name || id;
      const dbSizes = new Map(inventory.members.map((member, i) => [member.name, statuses[i] ? Number(statuses[i].dbSize) : undefined]));
      // The alarms as the statuses list them (never Alarm's Get: etcd puts it through raft, etcd/health.ts).
      const listed = alarmsListed(statuses.flatMap((status) => (status ? [status.errors] : [])));
      const alarms = listed.map(({ memberId, alarm }) => ({ member: nameOf(memberId), alarm, id: memberId }));
      return { alarms, dbSizes, quota: inventory.etcd.spaceQuota, ids: new Map(alarms.map((a) => [a.member, a.id])) };
    },
    plan: (facts) => planDisarm(facts),
    async apply(_changes, _target, facts) {
      const { client } = await anyAnswering(inventory, clients);
      for (const alarm of facts.alarms.filter((a) => a.alarm === 'NOSPACE')) {
        await client.maintenance.alarm({ action: 'Deactivate', memberID: facts.ids.get(alarm.member)!, alarm: 'Nospace' });
      }
    },
  };
}

/**
 * Maintenance starts only on a healthy cluster: every member answers with a leader and the
 * inventory's member list. A step on the control node, so a refusal stops every step after it.
 */
export function healthyClusterStep({ inventory, clients }: MaintenanceOptions): Step<string[], never, ControlNode> {
  return {
    name: 'healthy',
    targets: [CONTROL_NODE],
    async check() {
      const answers = await Promise.all(
        inventory.members.map(async (member) => ({ member, health: await memberHealth(inventory, clients, member) })),
      );
      return answers.flatMap(({ member, health }) => (health.healthy ? [] : [`${member.name}: ${health.reason}`]));
    },
    plan(unhealthy) {
      if (unhealthy.length > 0)
        throw new MaintenanceRefusal(
          `maintenance runs only on a healthy cluster; not healthy: ${unhealthy.join('; ')}. Run the deploy to repair it, then again.`,
        );
      return [];
    },
    async apply() {
      // Never called: the plan is empty or a refusal.
    },
  };
}
