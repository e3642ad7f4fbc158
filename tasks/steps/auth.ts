import type { AnyStep, Patience, Step } from '../core/step.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { MemberClients } from '../etcd/client.ts';
import type { ClientIdentities } from '../etcd/identities.ts';
import { memberHealth } from '../etcd/health.ts';
import { revealSecret } from '../core/secret.ts';
import { memberTargets } from './member-targets.ts';
import { retryTransient } from '../etcd/transient.ts';
import { ignoreIf, unlessNotFound } from '../etcd/answers.ts';
import { refuseMixedMinors } from '../etcd/version.ts';
import { deployStep, type DeployRun, type DeployStep } from './deploy-step.ts';

/**
 * Authentication bootstrap, from the one designated member: the root role, the root user holding it,
 * then auth enable. In certificate mode root has no password (the client certificate's CN=root maps
 * to it); in password mode the password travels only inside the gRPC request, never in argv or a file.
 * Probed first, so a second run is `ok`: auth on is the whole bootstrap done (AUTH_ON); the runner's
 * re-check afterwards sees auth on, and the users step then reads etcd as root.
 */

interface AuthState {
  /** Why etcd is not healthy, in a dry-run (a run fails instead): everything is planned for once it is. */
  unreachable?: string;
  rootRole: boolean;
  rootUser: boolean;
  rootUserHasRole: boolean;
  authEnabled: boolean;
}

type AuthAction = 'role' | 'user' | 'grant' | 'enable';

/**
 * Auth on: the whole bootstrap is done, by etcd's own rules. It enables auth only while user root
 * holds role root, and while auth is on it refuses to delete that user or that role, or to revoke the
 * one from the other ("invalid auth management"; etcd 3.4 on the lab, 3.5 and 3.6 in their auth
 * store). So nothing more is asked: etcd puts UserGet and RoleGet through raft, each a write to every
 * member's log (etcd-io/etcd#18487), which a no-op should not cost.
 */
const AUTH_ON: AuthState = { rootRole: true, rootUser: true, rootUserHasRole: true, authEnabled: true };

/** Nothing of the bootstrap done yet: what a dry-run plans for while etcd cannot be asked. */
const NOTHING_YET = { rootRole: false, rootUser: false, rootUserHasRole: false, authEnabled: false };

/**
 * Whether etcd has authentication on: a read as no user (the member's own certificate, CN=<member>,
 * or anonymous in password mode) works without auth and is rejected with it, on every version.
 * Never AuthStatus: etcd 3.5 puts it through raft, and a 3.4 member of the same cluster (a roll half
 * done) panics applying it ("not implemented"), again at every restart — seen on the lab.
 */
export async function authEnabled(clients: MemberClients, member: Member, identities: ClientIdentities): Promise<boolean> {
  const nonUser = await clients.for(member, identities.nonUser(member));
  try {
    await nonUser.get('etcd-kvm/auth-probe').string();
    return false;
  } catch (error) {
    if (error instanceof Error && /(user name not found|permission denied|invalid auth token|user name is empty)/i.test(error.message))
      return true;
    throw error;
  }
}

/**
 * Why the member's etcd cannot be asked yet, as the runner's patience has it: a run has waited for
 * health before this step and fails here (thrown); a dry-run, before the cluster exists, plans for later.
 * Undefined when it is healthy.
 */
export async function notHealthy(
  inventory: Inventory,
  clients: MemberClients,
  member: Member,
  patience: Patience,
): Promise<string | undefined> {
  const health = await memberHealth(inventory, clients, member);
  return health.healthy ? undefined : patience.notReady(new Error(health.reason));
}

/** What the auth and users steps are built from: the cluster, the members they may ask, and how. */
export interface AccessStepOptions {
  inventory: Inventory;
  members: readonly Member[];
  clients: MemberClients;
  identities: ClientIdentities;
}

export function authStep({ inventory, members, clients, identities }: AccessStepOptions): Step<AuthState, AuthAction> {
  const bootstrap = members.filter((member) => member.bootstrapsAuth);
  const { targets, memberNamed } = memberTargets(bootstrap);
  return {
    name: 'auth',
    targets,
    async check(name, patience) {
      const member = memberNamed(name);
      const unhealthy = await notHealthy(inventory, clients, member, patience);
      if (unhealthy !== undefined) return { unreachable: unhealthy, ...NOTHING_YET };
      const enabled = await retryTransient(() => authEnabled(clients, member, identities));
      if (enabled) return AUTH_ON;
      const root = await clients.for(member, identities.beforeAuth());
      const [role, user] = await retryTransient(() =>
        Promise.all([unlessNotFound(root.auth.roleGet({ role: 'root' })), unlessNotFound(root.auth.userGet({ name: 'root' }))]),
      );
      return {
        rootRole: role !== undefined,
        rootUser: user !== undefined,
        rootUserHasRole: user?.roles.includes('root') ?? false,
        authEnabled: false,
      };
    },
    plan(state, name) {
      const passwordMode = !memberNamed(name).rootPassword.isEmpty;
      const changes: { summary: string; action: AuthAction }[] = [];
      const pending = state.unreachable ? ' (once etcd is healthy)' : '';
      if (!state.rootRole) changes.push({ summary: `create role root${pending}`, action: 'role' });
      if (!state.rootUser) {
        const login = passwordMode
          ? 'password from the inventory, sent over TLS only'
          : 'no password: the client certificate CN=root authenticates';
        changes.push({ summary: `create user root (${login})${pending}`, action: 'user' });
      }
      if (!state.rootUserHasRole) changes.push({ summary: `grant role root to user root${pending}`, action: 'grant' });
      if (!state.authEnabled) changes.push({ summary: `enable authentication${pending}`, action: 'enable' });
      return changes;
    },
    async apply(changes, name) {
      const member = memberNamed(name);
      await refuseMixedMinors(inventory, clients);
      // Everything up to `enable` happens while auth is off; with auth already on there is no `enable`.
      const authIsOff = changes.some((change) => change.action === 'enable');
      const root = await clients.for(member, authIsOff ? identities.beforeAuth() : identities.root());
      // Each call is idempotent towards the wanted state, so a transient failure is simply retried.
      for (const { action } of changes) {
        await retryTransient(async () => {
          if (action === 'role') await root.auth.roleAdd({ name: 'root' }).catch(ignoreIf(/role name already exists/i));
          if (action === 'user') {
            const user = member.rootPassword.isEmpty
              ? { name: 'root', password: '', options: { no_password: true } }
              : { name: 'root', password: revealSecret(member.rootPassword) };
            await root.auth.userAdd(user).catch(ignoreIf(/user name already exists/i));
          }
          if (action === 'grant') await root.auth.userGrantRole({ user: 'root', role: 'root' });
          if (action === 'enable') await root.auth.authEnable();
        });
      }
    },
  };
}

/**
 * The auth and users phases: each one step per run over the members that bootstrap auth, built once so
 * that its check can start before its turn (while the other phases run), in a formed cluster only: in
 * one forming, etcd cannot answer before the domains start.
 */
export function accessPhase(
  id: 'auth' | 'users',
  make: (options: AccessStepOptions) => AnyStep,
): Pick<DeployStep<'auth' | 'users'>, 'prepare' | 'run'> {
  const built = new WeakMap<DeployRun, AnyStep>();
  const stepOf = (run: DeployRun): AnyStep => {
    let step = built.get(run);
    if (!step) {
      const main = run.clusterOf(run.membership.voting.map((member) => member.name));
      const bootstrapping = run.resources.membersNamed(run.plan.flatMap((phase) => (phase.step === 'auth' ? phase.pass.members : [])));
      step = make({ inventory: main, members: bootstrapping, clients: run.resources.clients, identities: run.resources.identities });
      built.set(run, step);
    }
    return step;
  };
  return {
    prepare(run) {
      const asked = run.plan.some(
        (phase) => (phase.step === 'auth' || phase.step === 'users') && phase.step === id && !phase.skip && phase.pass.formed,
      );
      if (asked) run.runner.checkEarly(stepOf(run), 'etcd-access');
    },
    run: (_phase, run) => run.runner.runStep(stepOf(run)),
  };
}

declare module './deploy-step.ts' {
  interface PassSteps {
    auth: true;
  }
}

export const auth = deployStep({
  id: 'auth',
  kind: 'operation',
  on: 'etcd',
  selectable: true,
  changes: ['etcd-access'],
  doc: 'root role and user, then auth enable, from the designated member',
  ...accessPhase('auth', authStep),
});
