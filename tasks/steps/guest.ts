import type { Progress } from '../core/progress.ts';
import type { Change, Step } from '../core/step.ts';
import type { EtcdClients } from '../etcd/client.ts';
import { waitForHealth } from '../etcd/health.ts';
import { ensureQuorumWithout, rollWaves } from '../etcd/roll.ts';
import { waitForCloudInit, type GuestFacts, type GuestQuestions } from '../guest/facts.ts';
import { GuestProbe } from '../guest/probe.ts';
import { driftedContent, planGuest, rollKindOf, type GuestAction, type GuestChange } from '../guest/plan.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import { BOOTING_RETRY_MS, HypervisorUnreachable, type MemberConnections } from '../remote/members.ts';
import { BootWaitFailed, waitForBoot, type BootWait, type BootWatch } from '../guest/boot.ts';
import type { SshConnection } from '../remote/ssh.ts';
import type { DesiredGuest } from '../render/guest/desired.ts';
import { memberTargets } from './member-targets.ts';

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

export interface GuestStepOptions {
  inventory: Inventory;
  members: readonly Member[];
  desired: ReadonlyMap<string, DesiredGuest>;
  ssh: MemberConnections;
  probe: GuestProbe;
  /** Did an earlier step of this run start or restart the member's VM (then an early answer and its connection are stale)? */
  changedEarlier: (name: string) => boolean;
  clients: EtcdClients;
  clusterFormed: boolean;
  dryRun: boolean;
  /** Does the run show its changes' diffs (--diff, a dry-run)? Only then is a drifted file's current text read: one more exec per member. */
  diffs: boolean;
  /** Where the step says what a member waits on (its first boot). */
  progress?: Progress;
}

/** After systemd says etcd is ready, the health wait gets at least this long, whatever is left of health_timeout. */
const HEALTH_AFTER_START_MS = 30_000;
const CONTENT_MARK = '@@etcd-kvm-file@@';
/** Between two looks at a booting member through its agent: the end of its boot is seen within this. */
const BOOT_POLL_MS = 500;

/** A dry-run that cannot see inside a member yet: the whole guest is converged once it can. */
type GuestStepAction = GuestAction | { kind: 'after-boot' };

export function guestStep(options: GuestStepOptions): Step<GuestState, GuestStepAction> {
  const { inventory, members, desired, ssh: connections, probe: prober, changedEarlier, clients, clusterFormed, dryRun, diffs, progress } = options;
  const { targets, memberNamed } = memberTargets(members);
  const timeoutMs = inventory.cluster.health_timeout * 1000;
  const reconnected = new Set<string>();
  const desiredOf = (name: string): DesiredGuest => {
    const found = desired.get(name);
    if (!found) throw new Error(`nothing rendered for ${name}`);
    return found;
  };
  const questionsOf = (name: string): GuestQuestions => guestQuestions(desiredOf(name));

  /** The member's SSH, waiting while it boots (up to cluster.health_timeout); a dry-run asks once. */
  const reach = (member: Member): Promise<SshConnection> => connections.reach(member, { windowMs: timeoutMs, once: dryRun });

  // Through the guest agent when it answers, over this SSH connection otherwise.
  const probe = (ssh: SshConnection, name: string): Promise<GuestFacts> => prober.askNow(memberNamed(name), questionsOf(name), async () => ssh);

  /** The member's boot, watched through its agent and, until the agent answers, SSH (guest/boot.ts). */
  const bootWatch = (member: Member): BootWatch => ({
    look: () => prober.lookAtBoot(member),
    connect: () =>
      connections.get(member).then(
        () => ({ connected: true as const }),
        (error: Error) => ({ connected: false as const, reason: error.message, fatal: error instanceof HypervisorUnreachable }),
      ),
  });

  /** Current text of drifted files that hold no secret, for the diff: one more exec, only when something drifted and diffs are shown. */
  async function currentContent(connect: () => Promise<SshConnection>, name: string, facts: GuestFacts): Promise<Map<string, string> | undefined> {
    if (!diffs) return undefined;
    const paths = driftedContent(desiredOf(name), facts).filter((file) => !file.secret && facts.files.has(file.path)).map((file) => file.path);
    if (paths.length === 0) return new Map();
    const output = await (await connect()).run(['sudo', 'sh', '-c', `for f; do echo "${CONTENT_MARK} $f"; cat -- "$f"; done`, 'sh', ...paths], { describe: 'read drifted files' });
    const contents = new Map<string, string>();
    for (const chunk of output.split(`${CONTENT_MARK} `).slice(1)) {
      const newline = chunk.indexOf('\n');
      contents.set(chunk.slice(0, newline), chunk.slice(newline + 1));
    }
    return contents;
  }

  async function restartRolling(member: Member, ssh: SshConnection, action: Extract<GuestAction, { kind: 'restart' | 'start' }>): Promise<void> {
    if (action.kind === 'restart') await ensureQuorumWithout(inventory, clients, member);
    const verb = startVerb(action);
    const unit = action.service.unit;
    const deadline = Date.now() + timeoutMs;
    try {
      // Blocks until the old process has stopped and the new one is ready (Type=notify: etcd has joined
      // its cluster) or failed; only then can a health answer be the new process's.
      await ssh.run(['sudo', 'systemctl', verb, unit], { timeoutMs, describe: `systemctl ${verb} ${unit}` });
      await waitForHealth(inventory, clients, member, Math.max(deadline - Date.now(), HEALTH_AFTER_START_MS));
    } catch (error) {
      const journal = await ssh.exec(['sudo', 'journalctl', '-u', unit, '-n', '5', '--no-pager', '-o', 'cat']).catch(() => undefined);
      const tail = journal?.stdout.trim().split('\n').slice(-3).join(' | ');
      throw new Error(
        `etcd on ${member.name} did not come back after its ${verb}: ${(error as Error).message}${tail ? ` Last lines of ${unit}: ${tail}.` : ''} ` +
          `The roll stops here: the members after ${member.name} keep running their current configuration. Look at journalctl -u ${unit} on ${member.name}, fix it, and run again.`,
      );
    }
  }

  return {
    name: 'guest',
    targets,
    async check(name) {
      const member = memberNamed(name);
      const restarted = changedEarlier(name);
      const early = await prober.takeEarly(member, questionsOf(name), !restarted);
      // Connected before an earlier step restarted the VM: that connection is gone (once; the re-check keeps the new one).
      if (restarted && !reconnected.has(name)) {
        connections.forget(member);
        reconnected.add(name);
      }
      // The early answer (through the guest agent) is enough unless the boot still runs or a drifted
      // file's text is wanted for the diff: no SSH into the member for a run that changes nothing.
      if (early && early.cloudInit.state !== 'running') return { kind: 'probed', facts: early, currentContent: await currentContent(() => reach(member), name, early) };
      let boot: BootWait;
      try {
        const onWaiting = () => progress?.update(name, 'booting: waiting for its boot to end (guest agent, SSH)');
        boot = await waitForBoot(bootWatch(member), { windowMs: dryRun ? 0 : timeoutMs, pollMs: BOOT_POLL_MS, retryMs: BOOTING_RETRY_MS, onWaiting });
      } catch (error) {
        if (!dryRun || !(error instanceof BootWaitFailed)) throw error;
        return { kind: 'unreachable', reason: error.message };
      }
      let facts: GuestFacts;
      if (boot.ended === 'agent') {
        // A cluster forming in this run gets its final etcd.env over SSH once it has formed: the
        // handshake (seconds of a freshly booted guest's CPU) is made now, while the steps before that wait on etcd.
        if (!clusterFormed && !dryRun) void connections.get(member).catch(() => undefined);
        facts = await prober.askNow(member, questionsOf(name), () => reach(member));
      } else if (boot.via === 'agent') {
        return { kind: 'booting' };
      } else {
        // An image without the guest agent: the rest of the wait is over SSH.
        const ssh = await reach(member);
        facts = await probe(ssh, name);
        if (facts.cloudInit.state === 'running') {
          if (dryRun) return { kind: 'booting' };
          progress?.update(name, 'SSH up, first boot running (cloud-init)');
          await ssh.exec(['sudo', 'sh', '-c', waitForCloudInit()], { timeoutMs });
          facts = await probe(ssh, name);
        }
      }
      progress?.done(name);
      return { kind: 'probed', facts, currentContent: await currentContent(() => reach(member), name, facts) };
    },
    plan(state, name) {
      if (state.kind === 'unreachable') return [{ summary: `converge the guest once it can be reached (now: ${state.reason})`, action: { kind: 'after-boot' } }];
      if (state.kind === 'booting') return [{ summary: 'converge the guest once its first boot has finished (cloud-init is still running)', action: { kind: 'after-boot' } }];
      return planGuest(desiredOf(name), state.facts, { clusterFormed, currentContent: state.currentContent });
    },
    warnings(state) {
      if (state.kind !== 'probed' || state.facts.cloudInit.state !== 'error') return [];
      return [`cloud-init's first boot ended in error in module(s) ${state.facts.cloudInit.modules.join(', ')}: see /var/log/cloud-init.log in the guest; the guest step converges the files and services all the same`];
    },
    rollingOrder(pending) {
      const guestChanges = (changes: readonly Change<GuestStepAction>[]) => changes.filter((change): change is GuestChange => change.action.kind !== 'after-boot');
      return rollWaves(inventory, clients, pending.map(({ target, changes }) => ({ target, kind: rollKindOf(guestChanges(changes)) })));
    },
    async apply(changes, name) {
      const member = memberNamed(name);
      const ssh = await reach(member);
      for (const { action } of changes) {
        if (action.kind === 'after-boot') throw new Error('the guest could not be probed: nothing to apply');
        if (action.kind === 'write' || action.kind === 'attributes') {
          const { file } = action;
          const mode = file.mode.toString(8).padStart(4, '0');
          if (action.kind === 'write') {
            // Over stdin into a private temporary file, then renamed: never a half-written file, never a secret in argv.
            const script = 'set -e; umask 077; mkdir -p -- "${1%/*}"; t="$1.etcd-kvm-new"; cat > "$t"; chown -- "$2" "$t"; chmod -- "$3" "$t"; mv -f -- "$t" "$1"';
            await ssh.run(['sudo', 'sh', '-c', script, 'sh', file.path, file.owner, mode], { stdin: file.content, describe: `write ${file.path}` });
          } else {
            await ssh.run(['sudo', 'sh', '-c', 'chown -- "$2" "$1" && chmod -- "$3" "$1"', 'sh', file.path, file.owner, mode]);
          }
        }
        if (action.kind === 'daemon-reload') await ssh.run(['sudo', 'systemctl', 'daemon-reload']);
        if (action.kind === 'enable') await ssh.run(['sudo', 'systemctl', 'enable', action.unit]);
        if (action.kind === 'start' || action.kind === 'restart') {
          if (action.service.rolling) await restartRolling(member, ssh, action);
          else await ssh.run(['sudo', 'systemctl', startVerb(action), action.service.unit]);
        }
      }
    },
  };
}

/** The systemctl verb that makes a service run what its files say (see GuestAction 'start'). */
function startVerb(action: Extract<GuestAction, { kind: 'restart' | 'start' }>): string {
  if (action.kind === 'restart') return action.service.onChange;
  return action.configChanged ? 'restart' : 'start';
}

/** What the guest probe asks a member, from what it should contain. */
export function guestQuestions(wanted: DesiredGuest): GuestQuestions {
  return {
    paths: wanted.files.map((file) => file.path),
    units: wanted.services.map((service) => service.unit),
    environmentUnits: wanted.services.filter((service) => service.environment).map((service) => service.unit),
    dataDir: wanted.dataDir,
  };
}
