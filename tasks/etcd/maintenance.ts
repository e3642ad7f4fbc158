import { DISARM_BELOW_QUOTA, type Inventory } from '../inventory/model.ts';
import type { Change } from '../core/step.ts';

/**
 * The decisions of etcd's maintenance, pure: compact the history, defragment a member's database,
 * disarm a NOSPACE alarm. Facts in, changes (or a refusal) out.
 */

export class MaintenanceRefusal extends Error {}

const MiB = 1024 * 1024;
/** Sizes as etcd's operators read them: KiB under a MiB, MiB with one decimal above. */
export const formatBytes = (bytes: number) => (bytes >= MiB ? `${(bytes / MiB).toFixed(1)} MiB` : `${Math.round(bytes / 1024)} KiB`);

export interface DatabaseFacts {
  dbSize: number;
  dbSizeInUse: number;
}

export type DefragAction = { kind: 'defragment'; before: DatabaseFacts };

/** `maintenance.defrag.rule`: what `maintain --defrag` and the members' agents both read. */
export type DefragRule = Inventory['maintenance']['defrag']['rule'];

/**
 * Why the rule holds for a database, or undefined: fragmented (at least `free_bytes` free and at least
 * `free_fraction` of the file), or near the quota with something to free. The agent's `rule_holds`
 * (agent/etcd-kvm-agent.py) decides the same, held to this by one table run against both
 * (test/unit/defrag-agent.test.ts).
 */
export function defragRuleHolds(facts: DatabaseFacts, rule: DefragRule, quota: number): string | undefined {
  const free = Math.max(facts.dbSize - facts.dbSizeInUse, 0);
  if (free >= rule.freeBytes && facts.dbSize > 0 && free / facts.dbSize >= rule.freeFraction)
    return `at least ${formatBytes(rule.freeBytes)}${rule.freeFraction > 0 ? ` and ${Math.round(rule.freeFraction * 100)} %` : ''} free`;
  if (rule.quotaFraction > 0 && facts.dbSize >= quota * rule.quotaFraction && free > 0)
    return `at least ${Math.round(rule.quotaFraction * 100)} % of the quota (${formatBytes(quota)}) with space to free`;
  return undefined;
}

/** Defragment when maintenance.defrag.rule holds for the database. */
export function planDefrag(facts: DatabaseFacts, rule: DefragRule, quota: number): Change<DefragAction>[] {
  const holds = defragRuleHolds(facts, rule, quota);
  if (!holds) return [];
  const free = facts.dbSize - facts.dbSizeInUse;
  return [
    {
      summary: `defragment: database ${formatBytes(facts.dbSize)}, ${formatBytes(free)} of it free (maintenance.defrag.rule: ${holds})`,
      action: { kind: 'defragment', before: facts },
    },
  ];
}

export interface CompactionFacts {
  /** The revision this run compacts to: the store's revision when the run first looked. */
  target: number;
  /** Whether history before `target` is gone already (a read at target - 1 answers "compacted"). */
  compacted: boolean;
}

export type CompactAction = { kind: 'compact'; revision: number };

/** Compact the history up to the revision seen at the start; a later run (or etcd's auto-compaction) takes what came after. */
export function planCompact(facts: CompactionFacts): Change<CompactAction>[] {
  if (facts.compacted || facts.target <= 1) return [];
  return [
    {
      summary: `compact the key-value history up to revision ${facts.target} (older revisions of keys are dropped; current values stay)`,
      action: { kind: 'compact', revision: facts.target },
    },
  ];
}

export interface AlarmFacts {
  /** Active alarms, by the member name (or ID, when the inventory does not name it). */
  alarms: { member: string; alarm: string }[];
  /** Each member's database size; undefined for a member that does not answer. */
  dbSizes: Map<string, number | undefined>;
  quota: number;
}

export type DisarmAction = { kind: 'disarm' };

/**
 * Clears NOSPACE alarms once space has been freed (a compaction and a defragmentation): every
 * member answers, and every database is below 90 % of etcd.space_quota. Alarms other than NOSPACE
 * (CORRUPT) are never cleared here.
 */
export function planDisarm(facts: AlarmFacts): Change<DisarmAction>[] {
  const nospace = facts.alarms.filter((a) => a.alarm === 'NOSPACE');
  if (nospace.length === 0) return [];
  const limit = Math.floor(facts.quota * DISARM_BELOW_QUOTA);
  const problems: string[] = [];
  for (const [member, size] of facts.dbSizes) {
    if (size === undefined) problems.push(`${member} does not answer`);
    else if (size >= limit) problems.push(`${member}'s database is ${formatBytes(size)}`);
  }
  if (problems.length > 0) {
    throw new MaintenanceRefusal(
      `refusing to disarm NOSPACE: ${problems.join(', ')}, and every member must be ` +
        `under ${formatBytes(limit)} (90 % of etcd.space_quota ${formatBytes(facts.quota)}). ` +
        'Free space first (maintain.ts --compact --defrag, after deleting what is not needed), or raise etcd.space_quota and deploy.',
    );
  }
  return [
    {
      summary: `disarm NOSPACE (raised by ${nospace.map((a) => a.member).join(', ')}): every database is under ${formatBytes(limit)}`,
      action: { kind: 'disarm' },
    },
  ];
}
