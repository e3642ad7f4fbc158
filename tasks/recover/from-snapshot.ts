import { rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { parseDocument } from 'yaml';
import { readIfExists, writeFileAtomic } from '../core/files.ts';
import type { MemberQuorumFacts } from './verdict.ts';

/**
 * A recovery from a backup, when nothing survived: the deploy founds the cluster anew (every VM the
 * cluster formed on is gone, formed.json says so) and, with restore.enabled, every new member
 * restores the chosen backup before etcd first starts. recover runs that deploy on the operator's
 * inventory with the restore turned on: a copy of it beside it (relative paths and the state
 * directory resolve the same), private, removed once the deploy succeeded.
 */

/** Only when every member's data is gone for certain: a member still holding data is a survivor (or may be one). */
export function snapshotRefusal(members: readonly MemberQuorumFacts[]): string | undefined {
  const holding = members.filter((member) => member.etcd || !member.dataGone).map((member) => member.name);
  if (holding.length === 0) return undefined;
  return (
    `${holding.join(', ')} still ${holding.length > 1 ? 'hold' : 'holds'} data (or may): a backup holds less. ` +
    `Recover from a survivor (--from-member), or run the deploy to start members that are down`
  );
}

/** The inventory's text with the restore on (from `timestamp`, or the latest) and the cluster founded anew. */
export function withRestoreForced(text: string, timestamp: string): string {
  const doc = parseDocument(text);
  doc.setIn(['cluster', 'is_initializing'], true);
  doc.setIn(['defaults', 'restore', 'enabled'], true);
  doc.setIn(['defaults', 'restore', 'backup_timestamp'], timestamp);
  const members = doc.get('members') as { items?: unknown[] } | undefined;
  (members?.items ?? []).forEach((_, i) => {
    if (doc.hasIn(['members', i, 'restore'])) {
      doc.setIn(['members', i, 'restore', 'enabled'], true);
      doc.setIn(['members', i, 'restore', 'backup_timestamp'], timestamp);
    }
  });
  return doc.toString();
}

export const restoringInventoryPath = (inventoryPath: string) => join(dirname(inventoryPath), `.${basename(inventoryPath)}.recover.yaml`);

/** Writes the restoring copy (0600: it holds the inventory's secrets) and returns its path. */
export function writeRestoringInventory(inventoryPath: string, timestamp: string): string {
  const text = readIfExists(inventoryPath);
  if (text === undefined) throw new Error(`${inventoryPath} cannot be read`);
  const path = restoringInventoryPath(inventoryPath);
  writeFileAtomic(path, withRestoreForced(text, timestamp), 0o600);
  return path;
}

export const removeRestoringInventory = (inventoryPath: string) => rmSync(restoringInventoryPath(inventoryPath), { force: true });
