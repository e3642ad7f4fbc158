import type { BootLook } from './agent.ts';

/**
 * Waiting for a member's boot to end, before its guest is converged. A booting emulated guest has no
 * CPU to spare (three of them share two cores on the lab, each saturated until cloud-init is done),
 * so the wait asks where it costs the guest nothing: its guest agent's file calls, which start no
 * process. SSH is tried as well, only until the agent first answers, for an image without the agent;
 * a refused or unrouted attempt costs the booting guest nothing either. Once SSH is up first, the
 * wait goes on over SSH (the caller's business).
 */

export interface BootWatch {
  /** One look through the guest agent. */
  look(): Promise<BootLook>;
  /** One SSH attempt: the connection, or why there is none (`fatal`: waiting would not help). */
  connect(): Promise<{ connected: true } | { connected: false; reason: string; fatal: boolean }>;
}

export type BootWait = { ended: 'agent' } | { ended: false; via: 'ssh' } | { ended: false; via: 'agent' };

export interface BootWaitTiming {
  /** Told once, when the first look finds the boot not over: the wait begins. */
  onWaiting?: () => void;
  windowMs: number;
  /** Between two looks through the agent (one look: a few ms of the agent's time, no process). */
  pollMs: number;
  /** Between two SSH attempts. */
  retryMs: number;
  now?: () => number;
  sleep?: (ms: number) => Promise<void>;
}

export class BootWaitFailed extends Error {}

/**
 * Looks through the agent every `pollMs` and tries SSH every `retryMs` until: the agent says the
 * boot ended (`{ ended: 'agent' }`); SSH connects before the agent ever answered (`via: 'ssh'`); or
 * the window is over — then, for a dry-run's window of 0, what answered (`via`), else an error with
 * both reasons. An SSH attempt still under way when the agent answers is left to finish: its
 * connection is the pool's, for what comes after the boot.
 */
export async function waitForBoot(watch: BootWatch, timing: BootWaitTiming): Promise<BootWait> {
  const now = timing.now ?? Date.now;
  const sleep = timing.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
  const deadline = now() + timing.windowMs;
  let agentAnswered = false;
  let agentSays = 'not asked';
  let sshSays = 'not tried';
  let attempt: Promise<void> | undefined;
  let connected = false;
  let fatal: string | undefined;
  let nextAttempt = now();
  for (let first = true; ; first = false) {
    const look = await watch.look();
    if (look === 'ended') return { ended: 'agent' };
    if (first) timing.onWaiting?.();
    if (look === 'running') {
      agentAnswered = true;
      agentSays = 'the boot is still running';
    } else agentSays = look.unanswered;
    if (!agentAnswered && attempt === undefined && !connected && now() >= nextAttempt) {
      attempt = watch.connect().then((outcome) => {
        if (outcome.connected) connected = true;
        else {
          sshSays = outcome.reason;
          if (outcome.fatal) fatal = outcome.reason;
          nextAttempt = now() + timing.retryMs;
        }
        attempt = undefined;
      });
    }
    if (now() >= deadline && attempt) await attempt;
    if (fatal !== undefined) throw new BootWaitFailed(fatal);
    if (connected && !agentAnswered) return { ended: false, via: 'ssh' };
    if (now() >= deadline) {
      if (timing.windowMs > 0)
        throw new BootWaitFailed(
          `its boot did not end within ${Math.round(timing.windowMs / 1000)} s (guest agent: ${agentSays}; SSH: ${sshSays})`,
        );
      if (agentAnswered) return { ended: false, via: 'agent' };
      throw new BootWaitFailed(`neither its guest agent nor SSH answers (guest agent: ${agentSays}; SSH: ${sshSays})`);
    }
    await sleep(timing.pollMs);
  }
}
