import type { Secret } from '../core/secret.ts';
import type { PermissionSettings, RoleSettings, UserSettings } from '../inventory/model.ts';
import { prefixEnd, TOOL_KEY_PREFIX } from '../inventory/reserved.ts';

/**
 * Application users and roles: what the inventory wants against what etcd has, as operations. etcd
 * keeps no mark on a user or role, so the names the tool created are kept in one key (MANAGED_KEY);
 * only those are ever changed or deleted. A wanted name etcd already has without it (made by hand) is
 * refused, never taken over. The set is widened before anything is created and narrowed only after
 * the deletions, so a run killed in between leaves nothing the next run would not recognise.
 *
 * MANAGED_KEY is an ordinary key: a role granted by hand could rewrite it, and a name added there
 * would make the next run delete that user. So the control node keeps the same record in its state
 * directory (STATE_RECORD), which no application reaches, and a user or role is deleted only when both
 * records name it. Where they disagree it is left alone and said (accessWarnings): a name only etcd's
 * record has is dropped from it; a name only the state directory's has stays there, said every run
 * until an operator settles it. A state directory from before this record starts empty: what left the
 * inventory before its first run is then left alone, with the warning saying how to delete it.
 */

/** Where the tool keeps the names of the users and roles it created: JSON {"users": [...], "roles": [...]}. */
export const MANAGED_KEY = `${TOOL_KEY_PREFIX}managed-access`;
/** The same record in the state directory: the control node's own, which decides with MANAGED_KEY. */
export const STATE_RECORD = 'managed-access.json';

export type Access = PermissionSettings['access'];
type PermType = 'Read' | 'Write' | 'Readwrite';
const PERM_TYPE: Record<Access, PermType> = { read: 'Read', write: 'Write', readwrite: 'Readwrite' };

/** A permission as etcd holds it: a key, or the range [key, rangeEnd). */
export interface Permission {
  permType: PermType;
  key: Buffer;
  rangeEnd: Buffer;
}

export { prefixEnd };

export function permissionOf(input: PermissionSettings): Permission {
  const permType = PERM_TYPE[input.access];
  if (input.prefix !== undefined) {
    const key = Buffer.from(input.prefix);
    return { permType, key, rangeEnd: prefixEnd(key) };
  }
  return { permType, key: Buffer.from(input.key ?? ''), rangeEnd: Buffer.alloc(0) };
}

const identityOf = (p: Permission) => `${p.permType}:${p.key.toString('hex')}:${p.rangeEnd.toString('hex')}`;
/** etcd revokes by key and range only: one entry per range, whatever its type. */
const rangeOf = (p: Permission) => `${p.key.toString('hex')}:${p.rangeEnd.toString('hex')}`;

/** How an operator reads a permission: "readwrite prefix /app1/". */
export function describePermission(p: Permission): string {
  const access = p.permType.toLowerCase();
  const text = (b: Buffer) => JSON.stringify(b.toString('utf8'));
  if (p.rangeEnd.length === 0) return `${access} key ${text(p.key)}`;
  if (p.rangeEnd.equals(prefixEnd(p.key))) return `${access} prefix ${text(p.key)}`;
  return `${access} range [${text(p.key)}, ${text(p.rangeEnd)})`;
}

/** The names of the users and roles the tool made, as one record holds them. */
export interface ManagedNames {
  users: string[];
  roles: string[];
}

/** What etcd has, read by the step's check. */
export interface LiveAccess {
  users: Map<string, { roles: string[] }>;
  roles: Map<string, Permission[]>;
  /** MANAGED_KEY's record. */
  managed: ManagedNames;
  /** Password mode: managed users whose inventory password etcd does not accept. */
  passwordsDiffer: string[];
}

export interface WantedAccess {
  roles: Record<string, RoleSettings>;
  users: Record<string, UserSettings>;
  /** Certificate mode: users have no password (their certificate's CN logs them in). */
  certificateMode: boolean;
}

export type AccessAction =
  /** Both records written: etcd's (MANAGED_KEY) and the state directory's (STATE_RECORD). */
  | { kind: 'record-managed'; etcd: ManagedNames; stateDir: ManagedNames }
  | { kind: 'add-role'; role: string }
  | { kind: 'grant-permission'; role: string; permission: Permission }
  | { kind: 'revoke-permission'; role: string; permission: Permission }
  | { kind: 'add-user'; user: string; password?: Secret }
  | { kind: 'change-password'; user: string; password: Secret }
  | { kind: 'grant-role'; user: string; role: string }
  | { kind: 'revoke-role'; user: string; role: string }
  | { kind: 'delete-user'; user: string }
  | { kind: 'delete-role'; role: string };

export interface AccessChange {
  summary: string;
  action: AccessAction;
}

/** A wanted user or role that etcd has and the tool did not create. */
export class AccessRefusal extends Error {}

const sortedUnion = (...lists: readonly (readonly string[])[]) => [...new Set(lists.flat())].sort();
const sameSet = (a: readonly string[], b: readonly string[]) =>
  a.length === b.length && sortedUnion(a).join('\0') === sortedUnion(b).join('\0');
const sameRecord = (a: ManagedNames, b: ManagedNames) => sameSet(a.users, b.users) && sameSet(a.roles, b.roles);

type Kind = 'user' | 'role';
const KINDS: readonly Kind[] = ['user', 'role'];

/** Names out of the inventory that a record still holds, by what becomes of them. */
interface Departures {
  /** Both records name it and etcd has it: the tool made it, and deletes it. */
  agreed: string[];
  /** Only MANAGED_KEY names it, and etcd has it: left alone, and dropped from MANAGED_KEY. */
  onlyInEtcd: string[];
  /** Only the state directory names it, and etcd has it: left alone, and kept in the state directory's record. */
  onlyInStateDir: string[];
  /** etcd no longer has it (deleted by an earlier run, or by hand): forgotten. */
  gone: string[];
}

/** Pure: what becomes of the users (or roles) no longer wanted that either record names. */
export function departures(
  wanted: readonly string[],
  exists: (name: string) => boolean,
  inEtcd: readonly string[],
  inStateDir: readonly string[],
): Departures {
  const result: Departures = { agreed: [], onlyInEtcd: [], onlyInStateDir: [], gone: [] };
  for (const name of sortedUnion(inEtcd, inStateDir).filter((name) => !wanted.includes(name))) {
    if (!exists(name)) result.gone.push(name);
    else if (inEtcd.includes(name) && inStateDir.includes(name)) result.agreed.push(name);
    else if (inEtcd.includes(name)) result.onlyInEtcd.push(name);
    else result.onlyInStateDir.push(name);
  }
  return result;
}

function departuresOf(wanted: WantedAccess, live: LiveAccess, stateRecord: ManagedNames): Record<Kind, Departures> {
  return {
    user: departures(Object.keys(wanted.users), (name) => live.users.has(name), live.managed.users, stateRecord.users),
    role: departures(Object.keys(wanted.roles), (name) => live.roles.has(name), live.managed.roles, stateRecord.roles),
  };
}

/** Pure: the users and roles the two records disagree on, left alone this run, as an operator reads them. */
export function accessWarnings(wanted: WantedAccess, live: LiveAccess, stateRecord: ManagedNames): string[] {
  const departing = departuresOf(wanted, live, stateRecord);
  return KINDS.flatMap((kind) => [
    ...departing[kind].onlyInEtcd.map(
      (name) =>
        `${kind} ${name} is named in ${MANAGED_KEY} but not in the state directory's record (${STATE_RECORD}), ` +
        `so the tool cannot tell it made it: left alone (not deleted) and dropped from ${MANAGED_KEY}. ` +
        `If the tool made it before this record existed, delete it with etcdctl ${kind} delete ${name}; ` +
        `if not, something that can write ${MANAGED_KEY} added it (check the roles granted by hand)`,
    ),
    ...departing[kind].onlyInStateDir.map(
      (name) =>
        `${kind} ${name} is in the state directory's record (${STATE_RECORD}) but missing from ${MANAGED_KEY}: left alone (not deleted). ` +
        `Delete it with etcdctl ${kind} delete ${name} if it is to go (the tool then forgets it), or put its name back in ${MANAGED_KEY}`,
    ),
  ]);
}

/** Users or roles the inventory wants that etcd has and the tool did not make: it never takes them over. */
function refuseForeign(wanted: WantedAccess, live: LiveAccess): void {
  const managedRoles = new Set(live.managed.roles);
  const managedUsers = new Set(live.managed.users);
  const foreign = [
    ...Object.keys(wanted.roles)
      .sort()
      .filter((role) => live.roles.has(role) && !managedRoles.has(role))
      .map((role) => `role ${role}`),
    ...Object.keys(wanted.users)
      .sort()
      .filter((user) => live.users.has(user) && !managedUsers.has(user))
      .map((user) => `user ${user}`),
  ];
  if (foreign.length === 0) return;
  const them = foreign.length > 1 ? 'them' : 'it';
  const rename = foreign.length > 1 ? 'ones other names' : 'one another name';
  throw new AccessRefusal(
    `etcd already has ${foreign.join(', ')}, which the tool did not create ` +
      `(not in ${MANAGED_KEY}); it never takes over users or roles made by hand: ` +
      `delete ${them} with etcdctl, or give the inventory's ${rename}`,
  );
}

/** One role made what the inventory says: created, each range no longer wanted revoked, each one missing granted. */
function roleChanges(role: string, wanted: WantedAccess, live: LiveAccess): AccessChange[] {
  const want = wanted.roles[role]!.permissions.map(permissionOf);
  const have = live.roles.get(role);
  const haveIds = new Set((have ?? []).map(identityOf));
  const wantRanges = new Set(want.map(rangeOf));
  return [
    ...(have ? [] : [{ summary: `create role ${role}`, action: { kind: 'add-role' as const, role } }]),
    // A range whose type changes is granted again (etcd replaces it); one no longer wanted is revoked.
    ...(have ?? [])
      .filter((permission) => !wantRanges.has(rangeOf(permission)))
      .map((permission) => ({
        summary: `revoke ${describePermission(permission)} from role ${role}`,
        action: { kind: 'revoke-permission' as const, role, permission },
      })),
    ...want
      .filter((permission) => !haveIds.has(identityOf(permission)))
      .map((permission) => ({
        summary: `grant ${describePermission(permission)} to role ${role}`,
        action: { kind: 'grant-permission' as const, role, permission },
      })),
  ];
}

/** One user made what the inventory says: created (or its password changed), its roles revoked and granted. */
function userChanges(user: string, wanted: WantedAccess, live: LiveAccess): AccessChange[] {
  const settings = wanted.users[user]!;
  const have = live.users.get(user);
  const password = wanted.certificateMode ? undefined : settings.password;
  const logsIn = password ? 'password from the inventory, sent over TLS only' : `no password: its client certificate CN=${user} logs it in`;
  const changes: AccessChange[] = [];
  if (!have)
    changes.push({ summary: `create user ${user} (${logsIn})`, action: { kind: 'add-user', user, ...(password ? { password } : {}) } });
  else if (password && live.passwordsDiffer.includes(user))
    changes.push({
      summary: `change the password of user ${user} (to the inventory's)`,
      action: { kind: 'change-password', user, password },
    });
  const haveRoles = have?.roles ?? [];
  for (const role of haveRoles.filter((role) => !settings.roles.includes(role)).sort())
    changes.push({ summary: `revoke role ${role} from user ${user}`, action: { kind: 'revoke-role', user, role } });
  for (const role of [...new Set(settings.roles)].filter((role) => !haveRoles.includes(role)).sort())
    changes.push({ summary: `grant role ${role} to user ${user}`, action: { kind: 'grant-role', user, role } });
  return changes;
}

/**
 * Users and roles no longer in the inventory, deleted where both records name them (users first: a deleted role
 * is revoked from every user, and a managed user may still hold it), then both records narrowed to what stays.
 */
function departureChanges(
  wanted: WantedAccess,
  live: LiveAccess,
  stateRecord: ManagedNames,
  widened: { etcd: ManagedNames; stateDir: ManagedNames },
): AccessChange[] {
  // Only what both records name is deleted; a disagreement is accessWarnings', and left alone.
  const departing = departuresOf(wanted, live, stateRecord);
  const changes: AccessChange[] = [
    ...departing.user.agreed.map((user) => ({
      summary: `delete user ${user} (no longer in the inventory)`,
      action: { kind: 'delete-user' as const, user },
    })),
    ...departing.role.agreed.map((role) => ({
      summary: `delete role ${role} (no longer in the inventory)`,
      action: { kind: 'delete-role' as const, role },
    })),
  ];
  // Narrowed last, once what left the inventory is gone from etcd. The state directory keeps the names
  // only it has that etcd still holds: its word that the tool made them stands until an operator settles it.
  const wantedUsers = Object.keys(wanted.users).sort();
  const wantedRoles = Object.keys(wanted.roles).sort();
  const narrowed = {
    etcd: { users: wantedUsers, roles: wantedRoles },
    stateDir: {
      users: sortedUnion(wantedUsers, departing.user.onlyInStateDir),
      roles: sortedUnion(wantedRoles, departing.role.onlyInStateDir),
    },
  };
  if (sameRecord(narrowed.etcd, widened.etcd) && sameRecord(narrowed.stateDir, widened.stateDir)) return changes;
  const forgotten = KINDS.flatMap((kind) =>
    [...departing[kind].agreed, ...departing[kind].gone, ...departing[kind].onlyInEtcd].sort().map((name) => `${kind} ${name}`),
  );
  return [
    ...changes,
    {
      summary: `forget ${forgotten.join(', ')} in ${MANAGED_KEY} and the state directory (${STATE_RECORD})`,
      action: { kind: 'record-managed', ...narrowed },
    },
  ];
}

/**
 * Pure: the operations that make etcd's application users and roles those of the inventory.
 * `stateRecord` is the state directory's record of what the tool made (empty when it has none).
 */
export function planAccess(wanted: WantedAccess, live: LiveAccess, stateRecord: ManagedNames): AccessChange[] {
  refuseForeign(wanted, live);
  const wantedRoles = Object.keys(wanted.roles).sort();
  const wantedUsers = Object.keys(wanted.users).sort();
  // Widened first: everything this run may create is recorded, in both records, before it exists.
  const widened = {
    etcd: { users: sortedUnion(live.managed.users, wantedUsers), roles: sortedUnion(live.managed.roles, wantedRoles) },
    stateDir: { users: sortedUnion(stateRecord.users, wantedUsers), roles: sortedUnion(stateRecord.roles, wantedRoles) },
  };
  const recordFirst: AccessChange[] =
    sameRecord(widened.etcd, live.managed) && sameRecord(widened.stateDir, stateRecord)
      ? []
      : [
          {
            summary: `record the users and roles the tool manages in ${MANAGED_KEY} and the state directory (${STATE_RECORD})`,
            action: { kind: 'record-managed', ...widened },
          },
        ];
  return [
    ...recordFirst,
    ...wantedRoles.flatMap((role) => roleChanges(role, wanted, live)),
    ...wantedUsers.flatMap((user) => userChanges(user, wanted, live)),
    ...departureChanges(wanted, live, stateRecord, widened),
  ];
}

/**
 * A record as stored (`where` names it: MANAGED_KEY or the state directory's file); none is an empty
 * record. Anything unreadable is an error, not an empty set (that would orphan users).
 */
export function parseManaged(value: string | null | undefined, where = MANAGED_KEY): ManagedNames {
  if (value === null || value === undefined) return { users: [], roles: [] };
  const list = (field: unknown) =>
    Array.isArray(field) && field.every((item) => typeof item === 'string') ? (field as string[]) : undefined;
  let record: unknown;
  try {
    record = JSON.parse(value);
  } catch {
    // Reported below.
  }
  const fields = (typeof record === 'object' && record !== null ? record : {}) as { users?: unknown; roles?: unknown };
  const users = list(fields.users);
  const roles = list(fields.roles);
  if (!users || !roles)
    throw new Error(
      `${where} is not {"users": [...], "roles": [...]}; restore it, or delete it ` +
        `(the users and roles the tool made are then no longer recognised as its own)`,
    );
  return { users, roles };
}

export const formatManaged = (managed: Readonly<ManagedNames>) => JSON.stringify({ users: [...managed.users], roles: [...managed.roles] });
