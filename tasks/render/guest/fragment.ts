import type { SecretWriter } from '../../core/secret.ts';
import type { Inventory, Member } from '../../inventory/model.ts';

/**
 * A piece of a member's cloud-config contributed by one guest feature (etcd, data volume, chrony,
 * node exporter, fluent-bit, vault agent, upstream installs). renderUserData merges them in order.
 */

export interface WriteFile {
  path: string;
  permissions: string;
  owner?: string;
  content: string;
  /** Written in the final stage, after packages and users exist (needed for service-owned secrets). */
  defer?: boolean;
}

export type Command = string[];

export interface CloudConfigFragment {
  users?: Record<string, unknown>[];
  writeFiles?: WriteFile[];
  /** Top-level cloud-config modules other than users/write_files/runcmd (disk_setup, mounts…). */
  modules?: Record<string, unknown>;
  /** Commands run by runcmd in the final stage, in fragment order. */
  runcmd?: Command[];
}

export interface GuestContext {
  inventory: Inventory;
  member: Member;
  writeSecret: SecretWriter;
}

/** Secrets inside the guest: readable by the owning service only, written after its user exists. */
export function secretFile(path: string, owner: string, content: string): WriteFile {
  return { path, permissions: owner === 'root:root' ? '0600' : '0400', owner, content, defer: true };
}
