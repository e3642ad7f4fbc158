import { join } from 'node:path';
import { PUBLIC_FILE_MODE, readIfExists, writeFileAtomic } from '../core/files.ts';

/**
 * Has the cluster formed, when no member answers? While `is_initializing` is true, members start as
 * `new` unless the cluster is known to exist — and a cluster whose every etcd is down (a power cut, a
 * hypervisor rebooted) answers nothing. Rendering `new` then is wrong, and dangerous: a member whose data
 * directory is empty would found a second cluster instead of being refused.
 *
 * So the state directory keeps a record (`formed.json`) of the VMs the cluster formed on: each member's
 * libvirt domain UUID, which libvirt makes when a domain is first defined and keeps across
 * redefinitions. One of those VMs still there means its disks, and the cluster's data, are too. A record
 * whose VMs are all gone (every domain undefined and made again) is a cluster made anew.
 */

export interface FormationRecord {
  /** When the record was last written. */
  recorded: string;
  /** Member name → the UUID of its domain while it was in the formed cluster. */
  domains: Record<string, string>;
}

export const formationPath = (stateDir: string) => join(stateDir, 'formed.json');

/** The record, or undefined when none was written. A damaged record is an error: guessing could render `new` into a formed cluster. */
export function readFormation(stateDir: string): FormationRecord | undefined {
  const text = readIfExists(formationPath(stateDir));
  if (text === undefined) return undefined;
  let parsed: Partial<FormationRecord> | undefined;
  try {
    parsed = JSON.parse(text) as Partial<FormationRecord>;
  } catch {
    parsed = undefined;
  }
  const domains = parsed?.domains;
  if (
    typeof parsed?.recorded !== 'string' ||
    typeof domains !== 'object' ||
    domains === null ||
    !Object.values(domains).every((uuid) => typeof uuid === 'string')
  ) {
    throw new Error(
      `${formationPath(stateDir)} is damaged; restore it from a copy of the state directory, ` +
        `or delete it if this cluster has never formed (the tool then decides from etcd alone)`,
    );
  }
  return { recorded: parsed.recorded, domains };
}

export function writeFormation(stateDir: string, domains: Record<string, string>, now = new Date()): void {
  const record: FormationRecord = { recorded: now.toISOString(), domains };
  writeFileAtomic(formationPath(stateDir), `${JSON.stringify(record, null, 2)}\n`, PUBLIC_FILE_MODE);
}

/**
 * What the record should say now: the UUIDs seen for the cluster's members in this run, and for members
 * whose domain was not seen (a hypervisor that did not answer) what it said. Members whose domain is
 * gone, and members no longer in the inventory, are dropped.
 */
export function formationToRecord(
  record: FormationRecord | undefined,
  members: readonly string[],
  seen: SeenDomains,
): Record<string, string> {
  const domains: Record<string, string> = {};
  for (const member of members) {
    const now = seen.get(member);
    // null: the hypervisor says the domain is gone, so is its entry.
    const uuid = now === undefined ? record?.domains[member] : now;
    if (uuid) domains[member] = uuid;
  }
  return domains;
}

export interface FormationVerdict {
  formed: boolean;
  /** One line for the run's output. */
  why: string;
}

/**
 * Each inventory member's domain as seen in this run: its UUID, null when its hypervisor
 * says there is none, undefined when unknown (its hypervisor did not answer).
 */
export type SeenDomains = ReadonlyMap<string, string | null | undefined>;

/**
 * The decision when no member answered the formed-cluster probe. A recorded VM still there says the
 * cluster formed; so does one that cannot be seen (its hypervisor did not answer): nothing reaches it
 * in this run, and `new` must not be recorded for it. Only when every recorded VM is known gone is the
 * cluster made anew.
 */
export function formationWithoutAnswer(isInitializing: boolean, record: FormationRecord | undefined, live: SeenDomains): FormationVerdict {
  if (!isInitializing) return { formed: true, why: 'no member answers (is_initializing: false): members start as existing' };
  if (record === undefined) return { formed: false, why: 'not formed yet: members start as new' };
  const recorded = Object.entries(record.domains);
  const still = recorded.filter(([member, uuid]) => live.get(member) === uuid).map(([member]) => member);
  // A recorded member the inventory no longer has (it left) is no evidence either way.
  const unseen = recorded.filter(([member]) => live.has(member) && live.get(member) === undefined).map(([member]) => member);
  const when = record.recorded.slice(0, 10);
  if (still.length > 0) {
    return {
      formed: true,
      why:
        `no member answers, but ${still.join(', ')} ${still.length === 1 ? 'is a VM' : 'are VMs'} ` +
        `of the cluster recorded as formed on ${when} (formed.json): members stay existing`,
    };
  }
  if (unseen.length > 0) {
    return {
      formed: true,
      why:
        `no member answers, and the VMs of ${unseen.join(', ')} cannot be seen; ` +
        `the cluster was recorded as formed on ${when} (formed.json): members stay existing`,
    };
  }
  return { formed: false, why: `not formed yet: none of the VMs of the cluster recorded on ${when} is left, so members start as new` };
}
