import type { Etcd3 } from 'etcd3';
import { refuseMixedMinors } from '../etcd/version.ts';
import { join } from 'node:path';
import { PUBLIC_FILE_MODE, readIfExists, writeFileAtomic } from '../core/files.ts';
import type { Step } from '../core/step.ts';
import { revealSecret } from '../core/secret.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import { retryTransient } from '../etcd/transient.ts';
import { ignoreIf, unlessNotFound } from '../etcd/answers.ts';
import {
  accessWarnings,
  AccessRefusal,
  formatManaged,
  MANAGED_KEY,
  parseManaged,
  planAccess,
  STATE_RECORD,
  type AccessAction,
  type LiveAccess,
  type ManagedNames,
  type Permission,
  type WantedAccess,
} from '../etcd/access.ts';
import { accessPhase, authEnabled, notHealthy, type AccessStepOptions } from './auth.ts';
import { deployStep } from './deploy-step.ts';
import { memberTargets } from './member-targets.ts';
import { toolUsers } from '../inventory/tool-users.ts';

/**
 * Application users and roles, converged from the designated member after the auth bootstrap: the
 * planning is etcd/access.ts; this step reads etcd's users, roles and the managed set (readAccess),
 * and the state directory's own record of the managed set, and applies the operations in their
 * order. Passwords travel only inside gRPC requests.
 */

interface UsersState {
  /** Why etcd is not healthy, in a dry-run (a run fails instead): everything is planned for once it is. */
  unreachable?: string;
  live: LiveAccess;
  /** The state directory's record of the users and roles the tool made (STATE_RECORD). */
  stateRecord: ManagedNames;
}

const stateRecordPath = (stateDir: string) => join(stateDir, STATE_RECORD);

/** The state directory's record; none yet (a state directory from before it) is an empty one. */
export function readStateRecord(stateDir: string): ManagedNames {
  const path = stateRecordPath(stateDir);
  return parseManaged(readIfExists(path), path);
}

const rejectedPassword = (error: unknown) =>
  error instanceof Error && /authentication failed|invalid user ID or password/i.test(error.message);

const EMPTY: LiveAccess = { users: new Map(), roles: new Map(), managed: { users: [], roles: [] }, passwordsDiffer: [] };

/**
 * Each of the names etcd has, with what `get` says of it; a name etcd does not know is left out. All
 * asked at once: etcd puts UserGet and RoleGet through raft (etcd-io/etcd#18487), each an entry in
 * every member's log, and entries proposed together are written together.
 */
async function present<T>(names: readonly string[], get: (name: string) => Promise<T>): Promise<(readonly [string, T])[]> {
  const answers = await Promise.all(names.map(async (name) => [name, await unlessNotFound(get(name))] as const));
  return answers.flatMap(([name, value]) => (value === undefined ? [] : [[name, value] as const]));
}

/**
 * The users and roles the inventory names or the tool made: nobody else's are read. Those the
 * inventory names are asked for beside the managed set; those only the managed set names (being
 * removed), after it. Asked by name, not listed first: UserList and RoleList go through raft too, so
 * an inventory without users or roles costs the members no log entry at all.
 */
async function readAccess(client: Etcd3, inventory: Inventory): Promise<LiveAccess> {
  const roleOf = async (role: string) =>
    (await client.auth.roleGet({ role })).perm.map(
      (p): Permission => ({ permType: p.permType, key: Buffer.from(p.key), rangeEnd: Buffer.from(p.range_end) }),
    );
  const userOf = async (name: string) => ({ roles: (await client.auth.userGet({ name })).roles });
  const wantedRoles = Object.keys(inventory.roles);
  const wantedUsers = Object.keys(inventory.users);
  const [managedValue, namedRoles, namedUsers] = await Promise.all([
    client.get(MANAGED_KEY).string(),
    present(wantedRoles, roleOf),
    present(wantedUsers, userOf),
  ]);
  const managed = parseManaged(managedValue);
  const [managedRoles, managedUsers] = await Promise.all([
    present(
      managed.roles.filter((role) => !wantedRoles.includes(role)),
      roleOf,
    ),
    present(
      managed.users.filter((name) => !wantedUsers.includes(name)),
      userOf,
    ),
  ]);
  const roles = [...namedRoles, ...managedRoles];
  const users = [...namedUsers, ...managedUsers];
  const userNames = users.map(([name]) => name);
  // Password mode: whether etcd accepts each managed user's inventory password (etcd keeps only a hash).
  const checked = inventory.etcd.clientCertAuth ? [] : userNames.filter((name) => managed.users.includes(name) && name in inventory.users);
  const differ = await Promise.all(
    checked.map((name) =>
      client.auth.authenticate({ name, password: revealSecret(inventory.users[name]!.password) }).then(
        () => false,
        (error) => (rejectedPassword(error) ? true : Promise.reject(error)),
      ),
    ),
  );
  return { users: new Map(users), roles: new Map(roles), managed, passwordsDiffer: checked.filter((_, i) => differ[i]) };
}

async function applyAction(client: Etcd3, stateDir: string, action: AccessAction): Promise<void> {
  switch (action.kind) {
    case 'record-managed':
      await client.put(MANAGED_KEY).value(formatManaged(action.etcd));
      writeFileAtomic(stateRecordPath(stateDir), `${formatManaged(action.stateDir)}\n`, PUBLIC_FILE_MODE);
      return;
    case 'add-role':
      await client.auth.roleAdd({ name: action.role }).catch(ignoreIf(/role name already exists/i));
      return;
    case 'grant-permission':
      await client.auth.roleGrantPermission({
        name: action.role,
        perm: { permType: action.permission.permType, key: action.permission.key, range_end: action.permission.rangeEnd },
      });
      return;
    case 'revoke-permission':
      await client.auth
        .roleRevokePermission({ role: action.role, key: action.permission.key, range_end: action.permission.rangeEnd })
        .catch(ignoreIf(/permission is not granted/i));
      return;
    case 'add-user': {
      const user = action.password
        ? { name: action.user, password: revealSecret(action.password) }
        : { name: action.user, password: '', options: { no_password: true } };
      await client.auth.userAdd(user).catch(ignoreIf(/user name already exists/i));
      return;
    }
    case 'change-password':
      await client.auth.userChangePassword({ name: action.user, password: revealSecret(action.password) });
      return;
    case 'grant-role':
      await client.auth.userGrantRole({ user: action.user, role: action.role });
      return;
    case 'revoke-role':
      await client.auth.userRevokeRole({ name: action.user, role: action.role }).catch(ignoreIf(/role is not granted/i));
      return;
    case 'delete-user':
      await client.auth.userDelete({ name: action.user }).catch(ignoreIf(/not found/i));
      return;
    case 'delete-role':
      await client.auth.roleDelete({ role: action.role }).catch(ignoreIf(/not found/i));
      return;
  }
}

export function usersStep({ inventory, members, clients, identities }: AccessStepOptions): Step<UsersState, AccessAction> {
  const { targets, memberNamed } = memberTargets(members.filter((member) => member.bootstrapsAuth));
  // Before the auth step has run (a dry-run of a new cluster), root does not exist yet.
  const asRoot = async (member: Member) =>
    clients.for(
      member,
      (await retryTransient(() => authEnabled(clients, member, identities))) ? identities.root() : identities.beforeAuth(),
    );
  const wanted: WantedAccess = {
    roles: inventory.roles,
    users: { ...inventory.users, ...toolUsers(inventory) },
    certificateMode: inventory.etcd.clientCertAuth,
  };
  return {
    name: 'users',
    targets,
    async check(name, patience) {
      const member = memberNamed(name);
      const stateRecord = readStateRecord(inventory.stateDir);
      const unhealthy = await notHealthy(inventory, clients, member, patience);
      if (unhealthy !== undefined) return { unreachable: unhealthy, live: EMPTY, stateRecord };
      const client = await asRoot(member);
      return { live: await retryTransient(() => readAccess(client, inventory)), stateRecord };
    },
    plan(state) {
      try {
        const changes = planAccess(wanted, state.live, state.stateRecord);
        return state.unreachable ? changes.map((change) => ({ ...change, summary: `${change.summary} (once etcd is healthy)` })) : changes;
      } catch (error) {
        if (error instanceof AccessRefusal) throw new Error(`refusing to continue: ${error.message}`);
        throw error;
      }
    },
    warnings(state) {
      return accessWarnings(wanted, state.live, state.stateRecord);
    },
    async apply(changes, name) {
      await refuseMixedMinors(inventory, clients);
      const client = await asRoot(memberNamed(name));
      // In order: the managed set widened first, roles before the users that hold them, deletions, then the set narrowed.
      for (const { action } of changes) await retryTransient(() => applyAction(client, inventory.stateDir, action));
    },
  };
}

declare module './deploy-step.ts' {
  interface PassSteps {
    users: true;
  }
}

export const users = deployStep({
  id: 'users',
  kind: 'operation',
  on: 'etcd',
  selectable: true,
  changes: ['etcd-access'],
  doc: "the inventory's roles and users: created, changed, removed when they leave it (only the tool's own)",
  ...accessPhase('users', usersStep),
});
