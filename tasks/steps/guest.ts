import type { Progress } from '../core/progress.ts';
import type { Change, Patience, Step } from '../core/step.ts';
import type { MemberClients } from '../etcd/client.ts';
import { waitForHealth } from '../etcd/health.ts';
import { ensureQuorumWithout, handLeadershipAway, handoffNote, rollWaves, waitForRelease } from '../etcd/roll.ts';
import { quote } from '../core/shell.ts';
import type { GuestRelease } from '../render/etcd-release.ts';
import { installRelease as installReleaseArchive, type ReleaseArchives } from '../guest/release-install.ts';
import { formatVersion } from '../upgrade/version.ts';
import { batchCommand, batched, fileBatch, SERVICE_FAILED_EXIT, type FileAction } from '../guest/file-batch.ts';
import { enableLinkOf, waitForCloudInit, type GuestFacts, type GuestQuestions } from '../guest/facts.ts';
import type { GuestProbe } from '../guest/probe.ts';
import { driftedContent, isUnitFile, planGuest, PREVIOUS_DIR, rollKindOf, type GuestAction, type GuestChange } from '../guest/plan.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import { BOOTING_RETRY_MS, HypervisorUnreachable } from '../remote/members.ts';
import { BootWaitFailed, waitForBoot, type BootWait, type BootWatch } from '../guest/boot.ts';
import type { SshConnection } from '../remote/ssh.ts';
import type { DesiredGuest } from '../render/guest/desired.ts';
import { memberTargets } from './member-targets.ts';
import { ReleaseStaging } from './release-staging.ts';
import { deployStep, type DeployRun, type Pass } from './deploy-step.ts';

/**
 * The inside of every member, converged on every run: the files and services the guest features
 * describe (the same description cloud-init used at first boot). One probe per member (through its
 * guest agent, over SSH without one), all members at once, after waiting for a booting member's boot
 * to end; changes go over SSH, one member at a time, etcd restarts leader last, each waiting for the
 * member's health before the next member starts.
 */

type GuestState =
  | { kind: 'unreachable'; reason: string }
  | { kind: 'booting' }
  | { kind: 'probed'; facts: GuestFacts; currentContent: Map<string, string> | undefined };

/** What the guest step does in a member over SSH: commands that must succeed (run), and those whose exit it reads (exec). */
export type GuestShell = Pick<SshConnection, 'run' | 'exec'>;

/** How the guest step reaches members over SSH (MemberConnections): waited for while one boots, or tried once. */
export interface GuestConnections {
  reach(member: Member, options: { windowMs: number }): Promise<GuestShell>;
  get(member: Member): Promise<GuestShell>;
}

/** What the guest step asks of the run's guest probe (GuestProbe). */
export type GuestFactsProbe = Pick<GuestProbe, 'takeEarly' | 'askNow' | 'lookAtBoot'>;

export interface GuestStepOptions {
  inventory: Inventory;
  members: readonly Member[];
  desired: ReadonlyMap<string, DesiredGuest>;
  ssh: GuestConnections;
  /** Its early answers are dropped by the run's fact cache when a step restarts the VM or restores etcd. */
  probe: GuestFactsProbe;
  clients: MemberClients;
  clusterFormed: boolean;
  /**
   * The members join the cluster as learners in this pass: a start waits for etcd to be ready, not for the
   * cluster's health, which counts voting members only (the promote step waits for the learner to catch up).
   */
  joining?: boolean;
  /**
   * Does the run show its changes' diffs (--diff)? Only then is a drifted file's current text read: one
   * more exec per member.
   */
  diffs: boolean;
  /** Where the step says what a member waits on (its first boot). */
  progress?: Progress;
  /** With binaries: release, the release's archive on the control node (downloaded and verified once per run, when first needed). */
  releaseArchive?: ReleaseArchives;
}

/** After systemd says etcd is ready, the health wait gets at least this long, whatever is left of health_timeout. */
const HEALTH_AFTER_START_MS = 30_000;
const CONTENT_MARK = '@@etcd-kvm-file@@';
/** Between two looks at a booting member through its agent: the end of its boot is seen within this. */
const BOOT_POLL_MS = 500;

/** A service made to run what its files say. */
type StartAction = Extract<GuestAction, { kind: 'restart' | 'start' }>;

/** A dry-run that cannot see inside a member yet: the whole guest is converged once it can. */
type GuestStepAction = GuestAction | { kind: 'after-boot' };

/** What the guest step's parts share: its options, and what is derived from them once per run. */
interface GuestContext extends GuestStepOptions {
  memberNamed(name: string): Member;
  /** cluster.health_timeout: how long a booting member, a restart and etcd's health are waited for. */
  timeoutMs: number;
}

export function guestStep(options: GuestStepOptions): Step<GuestState, GuestStepAction> {
  const { targets, memberNamed } = memberTargets(options.members);
  const guest: GuestContext = { ...options, memberNamed, timeoutMs: options.inventory.cluster.healthTimeout * 1000 };
  const { inventory, clients, clusterFormed } = options;
  const staging = new ReleaseStaging(async (name, release) =>
    installRelease(guest, await guest.ssh.reach(memberNamed(name), { windowMs: guest.timeoutMs }), release),
  );
  return {
    name: 'guest',
    targets,
    check: (name, patience) => checkGuest(guest, name, patience),
    plan(state, name) {
      const afterBoot = (summary: string) => [{ summary, action: { kind: 'after-boot' as const } }];
      if (state.kind === 'unreachable') return afterBoot(`converge the guest once it can be reached (now: ${state.reason})`);
      if (state.kind === 'booting') return afterBoot('converge the guest once its first boot has finished (cloud-init is still running)');
      return planGuest(desiredOf(guest, name), state.facts, { clusterFormed, currentContent: state.currentContent });
    },
    warnings(state) {
      if (state.kind !== 'probed' || state.facts.cloudInit.state !== 'error') return [];
      return [
        `cloud-init's first boot ended in error in module(s) ${state.facts.cloudInit.modules.join(', ')}: ` +
          'see /var/log/cloud-init.log in the guest; the guest step converges the files and services all the same',
      ];
    },
    async rollingOrder(pending) {
      const guestChanges = (changes: readonly Change<GuestStepAction>[]) =>
        changes.filter((change): change is GuestChange => change.action.kind !== 'after-boot');
      const waves = await rollWaves(
        inventory,
        clients,
        pending.map(({ target, changes }) => ({ target, kind: rollKindOf(guestChanges(changes)) })),
      );
      staging.learn(pending, waves.flat());
      return waves;
    },
    async apply(changes, name) {
      const member = memberNamed(name);
      const stagedAhead = await staging.staged();
      const ssh = await guest.ssh.reach(member, { windowMs: guest.timeoutMs });
      const actions = changes
        .map(({ action }) => action)
        .filter((action) => !(action.kind === 'install-release' && stagedAhead(name, action.release)));
      const steps = batched(actions);
      for (let i = 0; i < steps.length; i++) {
        const next = steps[i]!;
        const after = steps[i + 1];
        // A roll's turn: its files and etcd's restart in one command (one sudo and one SSH exec fewer per member).
        if (Array.isArray(next) && after && !Array.isArray(after) && isRollingStart(after)) {
          await restartRolling(guest, member, ssh, after, next);
          i++;
        } else if (Array.isArray(next)) await applyFileBatch(ssh, next);
        else await applyGuestAction(guest, member, ssh, next);
      }
    },
  };
}

function desiredOf(guest: GuestContext, name: string): DesiredGuest {
  const found = guest.desired.get(name);
  if (!found) throw new Error(`nothing rendered for ${name}`);
  return found;
}

const questionsOf = (guest: GuestContext, name: string): GuestQuestions => guestQuestions(desiredOf(guest, name));

/**
 * The member's facts, after waiting for its boot to end (a dry-run's patience looks once: a member
 * still booting is converged once it has booted). The early answer, through the guest agent, is
 * enough unless the boot still runs.
 */
async function checkGuest(guest: GuestContext, name: string, patience: Patience): Promise<GuestState> {
  const member = guest.memberNamed(name);
  const windowMs = patience.windowMs(guest.timeoutMs);
  const reach = () => guest.ssh.reach(member, { windowMs });
  const early = await guest.probe.takeEarly(member, questionsOf(guest, name));
  // No SSH into the member for a run that changes nothing, unless a drifted file's text is wanted for the diff.
  if (early && early.cloudInit.state !== 'running') {
    // The early answer may predate the look at the cluster's run lock (it is asked while the lock is
    // looked at): a change is only ever decided from an answer asked after the look (a run that took
    // the lock since is then caught by the lock's epoch), so drift it shows is asked again.
    const facts = showsDrift(guest, name, early) ? await guest.probe.askNow(member, questionsOf(guest, name), reach) : early;
    return { kind: 'probed', facts, currentContent: await readDriftedContent(guest, reach, name, facts) };
  }
  const boot = await waitForBootEnd(guest, member, patience);
  if ('kind' in boot) return boot;
  const facts = await factsAfterBoot(guest, member, boot, windowMs);
  if (facts === 'booting') return { kind: 'booting' };
  guest.progress?.done(name);
  return { kind: 'probed', facts, currentContent: await readDriftedContent(guest, reach, name, facts) };
}

/** Would these facts change anything (a refusal counts: it is asked again before it is said)? */
function showsDrift(guest: GuestContext, name: string, facts: GuestFacts): boolean {
  try {
    return planGuest(desiredOf(guest, name), facts, { clusterFormed: guest.clusterFormed, currentContent: undefined }).length > 0;
  } catch {
    return true;
  }
}

/** The member's boot waited for within the patience's window; a boot not over by then is the patience's to judge. */
async function waitForBootEnd(guest: GuestContext, member: Member, patience: Patience): Promise<BootWait | GuestState> {
  const onWaiting = () => guest.progress?.update(member.name, 'booting: waiting for its boot to end (guest agent, SSH)');
  try {
    const timing = { windowMs: patience.windowMs(guest.timeoutMs), pollMs: BOOT_POLL_MS, retryMs: BOOTING_RETRY_MS, onWaiting };
    return await waitForBoot(bootWatch(guest, member), timing);
  } catch (error) {
    if (!(error instanceof BootWaitFailed)) throw error;
    return { kind: 'unreachable', reason: patience.notReady(error) };
  }
}

/** The member's boot, watched through its agent and, until the agent answers, SSH (guest/boot.ts). */
function bootWatch(guest: GuestContext, member: Member): BootWatch {
  return {
    look: () => guest.probe.lookAtBoot(member),
    connect: () =>
      guest.ssh.get(member).then(
        () => ({ connected: true as const }),
        (error: Error) => ({ connected: false as const, reason: error.message, fatal: error instanceof HypervisorUnreachable }),
      ),
  };
}

/**
 * The facts of a member whose boot wait ended: through its agent once the boot is over; over SSH for
 * an image without the agent, waiting there for cloud-init within `windowMs`. 'booting' when the
 * boot is still running and there is no window to wait in (a dry-run).
 */
async function factsAfterBoot(guest: GuestContext, member: Member, boot: BootWait, windowMs: number): Promise<GuestFacts | 'booting'> {
  const { name } = member;
  const reach = () => guest.ssh.reach(member, { windowMs });
  if (boot.ended === 'agent') {
    // A cluster forming in this run gets its final etcd.env over SSH once it has formed: the handshake
    // (seconds of a freshly booted guest's CPU) is made now, while the steps before that wait on etcd.
    // Only with a window to wait in: a dry-run looks once and applies nothing, so it would not use it.
    if (!guest.clusterFormed && windowMs > 0) void guest.ssh.get(member).catch(() => undefined);
    return guest.probe.askNow(member, questionsOf(guest, name), reach);
  }
  if (boot.via === 'agent') return 'booting';
  // An image without the guest agent: the rest of the wait is over SSH.
  const ssh = await reach();
  // Through the guest agent when it answers, over this SSH connection otherwise.
  const probe = () => guest.probe.askNow(member, questionsOf(guest, name), async () => ssh);
  const facts = await probe();
  if (facts.cloudInit.state !== 'running') return facts;
  if (windowMs === 0) return 'booting';
  guest.progress?.update(name, 'SSH up, first boot running (cloud-init)');
  await ssh.exec(['sudo', 'sh', '-c', waitForCloudInit()], { timeoutMs: guest.timeoutMs });
  return probe();
}

/** Current text of drifted files that hold no secret, for the diff: one more exec, only when something drifted and diffs are shown. */
async function readDriftedContent(
  guest: GuestContext,
  connect: () => Promise<GuestShell>,
  name: string,
  facts: GuestFacts,
): Promise<Map<string, string> | undefined> {
  if (!guest.diffs) return undefined;
  const drifted = driftedContent(desiredOf(guest, name), facts);
  const paths = drifted.filter((file) => !file.secret && facts.files.has(file.path)).map((file) => file.path);
  if (paths.length === 0) return new Map();
  const print = `for f; do echo "${CONTENT_MARK} $f"; cat -- "$f"; done`;
  const output = await (await connect()).run(['sudo', 'sh', '-c', print, 'sh', ...paths], { describe: 'read drifted files' });
  const contents = new Map<string, string>();
  for (const chunk of output.split(`${CONTENT_MARK} `).slice(1)) {
    const newline = chunk.indexOf('\n');
    contents.set(chunk.slice(0, newline), chunk.slice(newline + 1));
  }
  return contents;
}

/** One change over the member's SSH that is no file change (those go in batches: applyFileBatch). */
async function applyGuestAction(
  guest: GuestContext,
  member: Member,
  ssh: GuestShell,
  action: Exclude<GuestStepAction, FileAction>,
): Promise<void> {
  if (action.kind === 'after-boot') throw new Error('the guest could not be probed: nothing to apply');
  if (action.kind === 'install-release') await installRelease(guest, ssh, action.release);
  if (action.kind === 'install-packages') await installPackages(ssh, action.packages);
  if (action.kind === 'start' || action.kind === 'restart') {
    if (action.service.rolling) await restartRolling(guest, member, ssh, action);
    else await ssh.run(['sudo', 'systemctl', startVerb(action), action.service.unit]);
  }
}

/** apt's answer for a few packages and their dependencies, from the member's mirror, under emulation. */
const APT_INSTALL_TIMEOUT_MS = 15 * 60_000;

/** Debian packages into a member (install_dependencies): the package lists refreshed first, as cloud-init's packages module does. */
async function installPackages(ssh: GuestShell, packages: readonly string[]): Promise<void> {
  const script = 'apt-get update -q && exec apt-get install -y -q --no-install-recommends "$@"';
  await ssh.run(['sudo', 'env', 'DEBIAN_FRONTEND=noninteractive', 'sh', '-c', script, 'apt-get', ...packages], {
    timeoutMs: APT_INSTALL_TIMEOUT_MS,
    describe: `apt-get install ${packages.join(' ')}`,
  });
}

/** File changes in a row, in one command: the files' contents over stdin, never in argv (guest/file-batch.ts). */
async function applyFileBatch(ssh: GuestShell, actions: readonly FileAction[]): Promise<void> {
  const batch = fileBatch(actions);
  await ssh.run(batchCommand(batch), { stdin: batch.stdin, describe: batch.describe });
}

/** The run's release archive into a member (guest/release-install.ts). */
const installRelease = (guest: GuestContext, ssh: GuestShell, release: GuestRelease) =>
  installReleaseArchive(ssh, guest.releaseArchive, release, guest.timeoutMs);

/** The kept files back in place, and the service restarted on them; true when it is healthy again. */
async function rollBack(guest: GuestContext, member: Member, ssh: GuestShell, unit: string, paths: readonly string[]): Promise<boolean> {
  // systemd rereads its units only when a unit file is put back (a release's roll changes the environment file alone).
  const reload = paths.some(isUnitFile) ? 'systemctl daemon-reload; ' : '';
  const script = `set -e; for f; do cp -p -- "$0$f" "$f"; done; ${reload}systemctl restart ${quote(unit)}`;
  try {
    await ssh.run(['sudo', 'sh', '-c', script, PREVIOUS_DIR, ...paths], { timeoutMs: guest.timeoutMs, describe: 'roll back' });
    await waitForHealth(guest.inventory, guest.clients, member, HEALTH_AFTER_START_MS);
    return true;
  } catch {
    return false;
  }
}

/** A start or restart of a rolling service (etcd): one member at a time, waited for until healthy. */
const isRollingStart = (action: { kind: string }): action is StartAction =>
  (action.kind === 'start' || action.kind === 'restart') && (action as StartAction).service.rolling === true;

/**
 * A rolling service (etcd) made to run what its files say, the quorum checked first; `files`, the
 * file changes just before it, go in the same command. Not healthy on the new files in time: the
 * files kept for a rollback are put back, and the error stops the roll, saying where to look.
 */
async function restartRolling(
  guest: GuestContext,
  member: Member,
  ssh: GuestShell,
  action: StartAction,
  files: readonly FileAction[] = [],
): Promise<void> {
  const { inventory, clients, timeoutMs } = guest;
  if (action.kind === 'restart') {
    await ensureQuorumWithout(inventory, clients, member);
    const handedOff = await handLeadershipAway(inventory, clients, member);
    if (handedOff) guest.progress?.update(member.name, `etcd restarting (${handoffNote(handedOff)})`);
  }
  const verb = startVerb(action);
  const unit = action.service.unit;
  const deadline = Date.now() + timeoutMs;
  try {
    // Blocks until the old process has stopped and the new one is ready (Type=notify: etcd has joined
    // its cluster) or failed; only then can a health answer be the new process's.
    await filesThenService(ssh, files, verb, unit, timeoutMs);
    if (!guest.joining) await waitForHealth(inventory, clients, member, Math.max(deadline - Date.now(), HEALTH_AFTER_START_MS));
    const release = desiredOf(guest, member.name).release;
    if (release)
      await waitForRelease(
        inventory,
        clients,
        member,
        formatVersion(release.version),
        Math.max(deadline - Date.now(), HEALTH_AFTER_START_MS),
      );
  } catch (error) {
    if (error instanceof FilesNotWrittenError) throw error;
    const journal = await ssh.exec(['sudo', 'journalctl', '-u', unit, '-n', '5', '--no-pager', '-o', 'cat']).catch(() => undefined);
    const tail = journal?.stdout.trim().split('\n').slice(-3).join(' | ');
    const rollback = action.kind === 'restart' && action.rollback ? action.rollback : undefined;
    const back = rollback ? await rollBack(guest, member, ssh, unit, rollback) : undefined;
    throw new Error(
      `etcd on ${member.name} did not come back after its ${verb}: ${(error as Error).message}` +
        `${tail ? ` Last lines of ${unit}: ${tail}.` : ''} ` +
        (back === undefined
          ? ''
          : back
            ? `It is back on its previous ${rollback!.join(', ')} and healthy. `
            : `Its previous ${rollback!.join(', ')} were put back, but it is not healthy on them either. `) +
        `The roll stops here: the members after ${member.name} keep running their current configuration. ` +
        `Look at journalctl -u ${unit} on ${member.name}, fix it, and run again.`,
    );
  }
}

/** A roll's turn failed in its file changes, before its service was touched: nothing to roll back. */
class FilesNotWrittenError extends Error {}

/**
 * The turn's files written and the service started or restarted, in one command. A failure in the
 * files is told apart from one of the service (SERVICE_FAILED_EXIT): the files kept for a rollback
 * may be an older roll's, and putting them back would move a healthy member that was never restarted.
 */
async function filesThenService(
  ssh: GuestShell,
  files: readonly FileAction[],
  verb: string,
  unit: string,
  timeoutMs: number,
): Promise<void> {
  if (files.length === 0) {
    await ssh.run(['sudo', 'systemctl', verb, unit], { timeoutMs, describe: `systemctl ${verb} ${unit}` });
    return;
  }
  const batch = fileBatch(files, PREVIOUS_DIR, { verb, unit });
  const done = await ssh.exec(batchCommand(batch), {
    stdin: batch.stdin,
    timeoutMs,
    describe: batch.describe,
  });
  if (done.code === 0) return;
  const reason = done.stderr.trim().split('\n').slice(-3).join(' ') || '(no stderr)';
  // A file operation's own exit (set -e) says the service was never touched; a signal (-1) says nothing, and counts as the service's.
  if (done.code === SERVICE_FAILED_EXIT || done.code < 0)
    throw new Error(`systemctl ${verb} ${unit} failed (exit ${done.code}): ${reason}`);
  throw new FilesNotWrittenError(
    `${batch.describe} failed (exit ${done.code}) before systemctl ${verb} ${unit}, which did not run: ${reason}`,
  );
}

/** The systemctl verb that makes a service run what its files say (see GuestAction 'start'). */
function startVerb(action: StartAction): string {
  if (action.kind === 'restart') return action.service.onChange;
  return action.configChanged ? 'restart' : 'start';
}

/** What the guest probe asks a member, from what it should contain. */
export function guestQuestions(wanted: DesiredGuest): GuestQuestions {
  return {
    paths: [...wanted.files, ...wanted.directories].map(({ path }) => path),
    secrets: wanted.files.filter((file) => file.secret).map((file) => file.path),
    units: wanted.services.map((service) => service.unit),
    environmentUnits: wanted.services.filter((service) => service.environment).map((service) => service.unit),
    dataDir: wanted.dataDir,
    ...(wanted.release ? { releaseBinary: wanted.release.binary } : {}),
    ...(wanted.staged ? { stagedBinary: wanted.staged.binary } : {}),
    retired: [...wanted.retired.paths, ...wanted.retired.units.map(enableLinkOf)],
    packageFiles: wanted.packages.needed.map((need) => need.path),
  };
}

/** The guest step over a pass's members, with what that pass rendered for them. */
export function guestStepOf(pass: Pass, run: DeployRun): Step<GuestState, GuestStepAction> {
  const { clients, memberSsh, guestProbe, membersNamed } = run.resources;
  return guestStep({
    inventory: run.clusterOf(pass.cluster),
    members: membersNamed(pass.members),
    desired: run.renderedFor(pass).guests,
    ssh: memberSsh,
    probe: guestProbe,
    clients,
    clusterFormed: pass.formed && !pass.joining,
    joining: pass.joining,
    diffs: run.options.diff === true,
    progress: run.runner.progress,
    releaseArchive: (version) => run.resources.releaseArchive(version),
  });
}

declare module './deploy-step.ts' {
  interface PassSteps {
    guest: true;
  }
}

export const guest = deployStep({
  id: 'guest',
  kind: 'operation',
  on: 'guests',
  selectable: true,
  changes: ['guest'],
  doc: "every member's files and services as rendered; etcd restarts rolled, leader last, never below quorum",
  // Its etcd needs the member added: a joiner's guest waits for its turn.
  converge: { onceAdded: true },
  run: ({ pass }, run) => {
    // Asked in one batch per hypervisor, for the members whose answers the run does not hold already.
    run.prefetchGuests(pass);
    return run.runner.runStep(guestStepOf(pass, run));
  },
});
