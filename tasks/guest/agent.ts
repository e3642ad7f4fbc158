import type { VirshAsker, VirshReply } from '../libvirt/session.ts';
import { saysDomainMissing } from '../libvirt/virsh.ts';

/**
 * A script run as root inside several domains of one hypervisor through the QEMU guest agent
 * (`guest-exec`, the script on its stdin), started and polled through the run's virsh session on that
 * hypervisor: no SSH exec and no process on the hypervisor per member or per poll. Under emulation
 * this spares each member an SSH handshake, an sshd session and sudo, which cost it more than the
 * probe itself (measured in an idle lab guest: ~1.2 s against ~0.5 s). Read-only use only: what
 * changes a guest goes over SSH.
 */

export interface AgentRequest {
  domain: string;
  script: string;
}

export type AgentAnswer = { ok: true; output: string } | { ok: false; reason: string };

/** How long libvirt waits for one agent reply (a connected agent answers at once). */
const REPLY_TIMEOUT_SECONDS = '5';
/** Between two asks whether the scripts have finished: an ask costs the guest's agent a few ms. */
const POLL_MS = 50;

interface ExecStatus {
  return?: { exited?: boolean; exitcode?: number; signal?: number; 'out-data'?: string; 'err-data'?: string; 'out-truncated'?: boolean };
}

/** virsh's own words, without its prefix: "Guest agent is not responding: QEMU guest agent is not connected". */
const failure = (reply: VirshReply): AgentAnswer => ({ ok: false, reason: reply.output.replace(/^error: /, '').split('\n')[0] || 'no reason given' });

/** What `metadata` says of a domain: ours (it carries this cluster's ID), or why nothing may run in it. */
export function ownedBy(reply: VirshReply, id: string): AgentAnswer | 'ours' {
  if (reply.ok && reply.output.includes(`id="${id}"`)) return 'ours';
  if (!reply.ok && saysDomainMissing(reply.output)) return failure(reply);
  return { ok: false, reason: `not marked as this cluster's domain (owner id ${id})` };
}

/** The process guest-exec started, or why it did not start. */
export function startedPid(reply: VirshReply): number | AgentAnswer {
  if (!reply.ok) return failure(reply);
  const pid = /"pid":\s*(\d+)/.exec(reply.output)?.[1];
  return pid === undefined ? { ok: false, reason: `the agent did not say which process it started: ${reply.output.slice(0, 80)}` } : Number(pid);
}

/** A guest-exec-status reply: still running, or the script's answer (its output, or why there is none). */
export function finished(reply: VirshReply): AgentAnswer | 'running' {
  if (!reply.ok) return failure(reply);
  let status: ExecStatus;
  try {
    status = JSON.parse(reply.output) as ExecStatus;
  } catch {
    return { ok: false, reason: `the agent's reply is not JSON: ${reply.output.slice(0, 80)}` };
  }
  const result = status.return ?? {};
  if (!result.exited) return 'running';
  if (result['out-truncated']) return { ok: false, reason: "the agent cut the script's output short" };
  if (result.exitcode !== 0) {
    const stderr = Buffer.from(result['err-data'] ?? '', 'base64').toString('utf8').trim().split('\n')[0];
    return { ok: false, reason: `the script exited with ${result.exitcode ?? `signal ${result.signal}`}${stderr ? `: ${stderr}` : ''}` };
  }
  return { ok: true, output: Buffer.from(result['out-data'] ?? '', 'base64').toString('utf8') };
}

const agentCommand = (domain: string, execute: string, args: Record<string, unknown>): string[] => ['qemu-agent-command', '--timeout', REPLY_TIMEOUT_SECONDS, domain, JSON.stringify({ execute, arguments: args })];

/**
 * Runs each request's script in its domain, all at once, and collects the answers in request order:
 * first every domain's mark is read (nothing runs inside a domain without this cluster's ID: another
 * cluster's VM that has a member's name), then the scripts start, then their status is asked every
 * POLL_MS until each has exited or `timeoutMs` has passed.
 */
export async function askThroughAgents(virsh: VirshAsker, requests: readonly AgentRequest[], owner: { namespace: string; id: string }, timeoutMs: number): Promise<AgentAnswer[]> {
  const deadline = Date.now() + timeoutMs;
  const answers: (AgentAnswer | undefined)[] = requests.map(() => undefined);
  const marks = await virsh.ask(requests.map(({ domain }) => ['metadata', '--uri', owner.namespace, '--domain', domain]), { urgent: true });
  const ours = requests.flatMap((request, i) => {
    const verdict = ownedBy(marks[i]!, owner.id);
    if (verdict !== 'ours') answers[i] = verdict;
    return verdict === 'ours' ? [i] : [];
  });
  const starts = await virsh.ask(ours.map((i) => agentCommand(requests[i]!.domain, 'guest-exec', { path: '/bin/sh', arg: ['-s'], 'input-data': Buffer.from(requests[i]!.script).toString('base64'), 'capture-output': true })), { urgent: true });
  let running = ours.flatMap((i, n) => {
    const pid = startedPid(starts[n]!);
    if (typeof pid !== 'number') answers[i] = pid;
    return typeof pid === 'number' ? [{ i, pid }] : [];
  });
  while (running.length > 0) {
    if (Date.now() >= deadline) {
      for (const { i } of running) answers[i] = { ok: false, reason: `no answer within ${timeoutMs / 1000} s` };
      break;
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    const statuses = await virsh.ask(running.map(({ i, pid }) => agentCommand(requests[i]!.domain, 'guest-exec-status', { pid })), { urgent: true });
    running = running.filter(({ i }, n) => {
      const outcome = finished(statuses[n]!);
      if (outcome !== 'running') answers[i] = outcome;
      return outcome === 'running';
    });
  }
  return answers.map((answer) => answer ?? { ok: false, reason: 'the hypervisor gave no answer' });
}
