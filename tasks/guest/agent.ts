import { forDisplay } from '../core/display.ts';
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

/**
 * virsh's own words, without its prefix: "Guest agent is not responding: QEMU guest agent is not connected".
 * Reasons carry what the guest said and are printed: made safe for a terminal here (forDisplay).
 */
const reasonOf = (reply: VirshReply): string => forDisplay(reply.output.replace(/^error: /, '').split('\n')[0] ?? '') || 'no reason given';
const failure = (reply: VirshReply): AgentAnswer => ({ ok: false, reason: reasonOf(reply) });

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
  return pid === undefined
    ? { ok: false, reason: `the agent did not say which process it started: ${forDisplay(reply.output.slice(0, 80))}` }
    : Number(pid);
}

/** A guest-exec-status reply: still running, or the script's answer (its output, or why there is none). */
export function finished(reply: VirshReply, answersWith: readonly number[] = [0]): AgentAnswer | 'running' {
  if (!reply.ok) return failure(reply);
  let status: ExecStatus;
  try {
    status = JSON.parse(reply.output) as ExecStatus;
  } catch {
    return { ok: false, reason: `the agent's reply is not JSON: ${forDisplay(reply.output.slice(0, 80))}` };
  }
  const result = status.return ?? {};
  if (!result.exited) return 'running';
  if (result['out-truncated']) return { ok: false, reason: "the agent cut the script's output short" };
  if (result.exitcode === undefined || !answersWith.includes(result.exitcode)) {
    const stderr = forDisplay(
      Buffer.from(result['err-data'] ?? '', 'base64')
        .toString('utf8')
        .trim()
        .split('\n')[0] ?? '',
    );
    return { ok: false, reason: `the script exited with ${result.exitcode ?? `signal ${result.signal}`}${stderr ? `: ${stderr}` : ''}` };
  }
  return { ok: true, output: Buffer.from(result['out-data'] ?? '', 'base64').toString('utf8') };
}

/** Does the agent's reply to guest-file-open say the file is not there (rather than that the agent did not answer)? */
const saysNoSuchFile = (reply: VirshReply): boolean => !reply.ok && /No such file or directory/.test(reply.output);

const agentCommand = (domain: string, execute: string, args: Record<string, unknown>): string[] => [
  'qemu-agent-command',
  '--timeout',
  REPLY_TIMEOUT_SECONDS,
  domain,
  JSON.stringify({ execute, arguments: args }),
];

/**
 * Which domains carry this cluster's mark, read first: nothing runs or is read inside a domain
 * without this cluster's ID (another cluster's VM that has a member's name). 'ours', or why not.
 */
export async function markedOurs(
  virsh: VirshAsker,
  domains: readonly string[],
  owner: { namespace: string; id: string },
): Promise<(AgentAnswer | 'ours')[]> {
  const marks = await virsh.ask(
    domains.map((domain) => ['metadata', '--uri', owner.namespace, '--domain', domain]),
    { urgent: true },
  );
  return domains.map((_domain, i) => ownedBy(marks[i]!, owner.id));
}

/** A program run inside a domain through its agent: its path, arguments, and stdin if any. */
export interface AgentRun {
  domain: string;
  path: string;
  args: readonly string[];
  stdin?: string;
  /** Exit codes that still carry an answer (stat exits 1 when a path it was given is missing); 0 by default. */
  answersWith?: readonly number[];
}

/**
 * Starts each run in its domain, all at once, then asks every POLL_MS whether they have exited, until
 * each has or `timeoutMs` has passed; the answers in request order. The domains' marks are the
 * caller's to have read (markedOurs).
 */
export async function runThroughAgents(virsh: VirshAsker, runs: readonly AgentRun[], timeoutMs: number): Promise<AgentAnswer[]> {
  if (runs.length === 0) return [];
  const deadline = Date.now() + timeoutMs;
  const answers: (AgentAnswer | undefined)[] = runs.map(() => undefined);
  const starts = await virsh.ask(
    runs.map(({ domain, path, args, stdin }) =>
      agentCommand(domain, 'guest-exec', {
        path,
        arg: args,
        ...(stdin === undefined ? {} : { 'input-data': Buffer.from(stdin).toString('base64') }),
        'capture-output': true,
      }),
    ),
    { urgent: true },
  );
  let running = runs.flatMap((_run, i) => {
    const pid = startedPid(starts[i]!);
    if (typeof pid !== 'number') answers[i] = pid;
    return typeof pid === 'number' ? [{ i, pid }] : [];
  });
  while (running.length > 0) {
    if (Date.now() >= deadline) {
      for (const { i } of running) answers[i] = { ok: false, reason: `no answer within ${timeoutMs / 1000} s` };
      break;
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    const statuses = await virsh.ask(
      running.map(({ i, pid }) => agentCommand(runs[i]!.domain, 'guest-exec-status', { pid })),
      { urgent: true },
    );
    running = running.filter(({ i }, n) => {
      const outcome = finished(statuses[n]!, runs[i]!.answersWith);
      if (outcome !== 'running') answers[i] = outcome;
      return outcome === 'running';
    });
  }
  return answers.map((answer) => answer ?? { ok: false, reason: 'the hypervisor gave no answer' });
}

/**
 * Runs each request's script (`sh -s`, the script on its stdin) in its domain, all at once, and
 * collects the answers in request order: marks first (markedOurs), then runThroughAgents.
 */
export async function askThroughAgents(
  virsh: VirshAsker,
  requests: readonly AgentRequest[],
  owner: { namespace: string; id: string },
  timeoutMs: number,
): Promise<AgentAnswer[]> {
  const verdicts = await markedOurs(
    virsh,
    requests.map(({ domain }) => domain),
    owner,
  );
  const answers: AgentAnswer[] = verdicts.map((verdict) => (verdict === 'ours' ? { ok: false, reason: 'not asked' } : verdict));
  const ours = verdicts.flatMap((verdict, i) => (verdict === 'ours' ? [i] : []));
  const ran = await runThroughAgents(
    virsh,
    ours.map((i) => ({ domain: requests[i]!.domain, path: '/bin/sh', args: ['-s'], stdin: requests[i]!.script })),
    timeoutMs,
  );
  ours.forEach((i, n) => {
    answers[i] = ran[n]!;
  });
  return answers;
}

/** Each domain's clock as its agent reads it (guest-get-time), in nanoseconds; undefined where it did not answer. */
export async function guestClocks(virsh: VirshAsker, domains: readonly string[]): Promise<(bigint | undefined)[]> {
  if (domains.length === 0) return [];
  const replies = await virsh.ask(
    domains.map((domain) => agentCommand(domain, 'guest-get-time', {})),
    { urgent: true },
  );
  // Read as text: nanoseconds since the epoch are past what a JSON number holds exactly.
  return replies.map((reply) => {
    const ns = reply.ok ? /"return":\s*(\d+)/.exec(reply.output)?.[1] : undefined;
    return ns === undefined ? undefined : BigInt(ns);
  });
}

/** A file as an agent read it: its bytes, absent, or why it could not be read (never any of its bytes). */
export type FileRead = { content: Buffer } | { absent: true } | { unreadable: string };

/** What one guest-file-read asks for: the managed files are small; a larger file is read in more calls. */
const READ_CHUNK_BYTES = 1 << 20;
/** More than any file the tool reads (certificates, settings, cloud-init's results, a process's environment). */
const MAX_FILE_BYTES = 16 << 20;

/**
 * A guest-file-read reply: a chunk and whether it was the last, or why there is none (the reply's text is never shown: it may be a key's).
 */
function chunkOf(reply: VirshReply): { bytes: Buffer; eof: boolean } | { unreadable: string } {
  if (!reply.ok) return { unreadable: reasonOf(reply) };
  try {
    const answer = (JSON.parse(reply.output) as { return?: { 'buf-b64'?: string; eof?: boolean } }).return;
    if (typeof answer?.['buf-b64'] !== 'string') return { unreadable: "the agent's reply to guest-file-read has no data" };
    return { bytes: Buffer.from(answer['buf-b64'], 'base64'), eof: answer.eof === true };
  } catch {
    return { unreadable: "the agent's reply to guest-file-read is not JSON" };
  }
}

/**
 * Reads whole files inside domains through their agents' file calls (guest-file-open, -read until
 * the end, -close), all domains and files at once, one virsh batch per round: no process starts in
 * the guest, where one costs it ~0.1 s of CPU under emulation. Read-only; the marks are the caller's
 * to have read (markedOurs). The answers per request, by path.
 */
export async function readThroughAgents(
  virsh: VirshAsker,
  requests: readonly { domain: string; paths: readonly string[] }[],
): Promise<Map<string, FileRead>[]> {
  const reads = requests.map(() => new Map<string, FileRead>());
  const files = requests.flatMap(({ domain, paths }, r) => paths.map((path) => ({ r, domain, path })));
  if (files.length === 0) return reads;
  const opened = await virsh.ask(
    files.map(({ domain, path }) => agentCommand(domain, 'guest-file-open', { path, mode: 'r' })),
    { urgent: true },
  );
  let reading = files.flatMap((file, i) => {
    const reply = opened[i]!;
    const handle = handleOf(reply);
    if (handle !== undefined) return [{ ...file, handle, chunks: [] as Buffer[], size: 0 }];
    reads[file.r]!.set(file.path, saysNoSuchFile(reply) ? { absent: true } : { unreadable: reasonOf(reply) });
    return [];
  });
  const handles = reading.map(({ domain, handle }) => agentCommand(domain, 'guest-file-close', { handle }));
  try {
    while (reading.length > 0) {
      const replies = await virsh.ask(
        reading.map(({ domain, handle }) => agentCommand(domain, 'guest-file-read', { handle, count: READ_CHUNK_BYTES })),
        { urgent: true },
      );
      reading = reading.filter((file, i) => {
        const chunk = chunkOf(replies[i]!);
        if ('unreadable' in chunk) {
          reads[file.r]!.set(file.path, chunk);
          return false;
        }
        file.chunks.push(chunk.bytes);
        file.size += chunk.bytes.length;
        if (file.size > MAX_FILE_BYTES) {
          reads[file.r]!.set(file.path, { unreadable: `larger than ${MAX_FILE_BYTES >> 20} MiB` });
          return false;
        }
        if (chunk.eof || chunk.bytes.length === 0) reads[file.r]!.set(file.path, { content: Buffer.concat(file.chunks) });
        return !(chunk.eof || chunk.bytes.length === 0);
      });
    }
  } finally {
    // Handles are the agent's until closed; one left open (a close that failed) costs it a file descriptor, nothing more.
    if (handles.length > 0) await virsh.ask(handles, { urgent: true }).catch(() => undefined);
  }
  return reads;
}

/** The handle a guest-file-open answered with, if it opened the file. */
function handleOf(reply: VirshReply): number | undefined {
  const handle = reply.ok ? /"return":\s*(\d+)/.exec(reply.output)?.[1] : undefined;
  return handle === undefined ? undefined : Number(handle);
}

/**
 * Whether each file is there inside its domain, through the agents: opened and closed again, never read, in two
 * virsh batches for them all. True, false (the agent says there is no such file), or why the agent did not say.
 * The domains' marks are the caller's to have read (markedOurs).
 */
export async function presentThroughAgents(
  virsh: VirshAsker,
  files: readonly { domain: string; path: string }[],
): Promise<(boolean | { unanswered: string })[]> {
  if (files.length === 0) return [];
  const opened = await virsh.ask(
    files.map(({ domain, path }) => agentCommand(domain, 'guest-file-open', { path, mode: 'r' })),
    { urgent: true },
  );
  const closes = files.flatMap(({ domain }, i) => {
    const handle = handleOf(opened[i]!);
    return handle === undefined ? [] : [agentCommand(domain, 'guest-file-close', { handle })];
  });
  // As in readThroughAgents: a close that failed costs the agent a file descriptor, nothing more.
  if (closes.length > 0) await virsh.ask(closes, { urgent: true }).catch(() => undefined);
  return opened.map((reply) => (handleOf(reply) !== undefined ? true : saysNoSuchFile(reply) ? false : { unanswered: reasonOf(reply) }));
}

/** A domain's boot as its agent tells it: cloud-init's work is over (or it never runs), it still runs, or the agent does not say (why). */
export type BootLook = 'ended' | 'running' | { unanswered: string };

/**
 * Whether each domain's boot has ended, asked of its agent with file calls only (guest-file-open of
 * cloud-init's result, then of its status): no process starts in a guest that is busy booting, where
 * one costs it ~0.1 s of CPU under emulation. As in guest/facts.ts, a boot has ended once cloud-init
 * wrote its result, or when cloud-init does not run at all (no status). The agent starts after
 * sysinit.target (systemd's default dependencies), cloud-init's first stages before it, so an agent
 * that answers never sees a boot before cloud-init has written its status. Only domains carrying
 * this cluster's mark are asked.
 */
export async function lookAtBoots(
  virsh: VirshAsker,
  domains: readonly string[],
  owner: { namespace: string; id: string },
  resultPath: string,
  statusPath: string,
): Promise<BootLook[]> {
  const verdicts = await markedOurs(virsh, domains, owner);
  const looks: (BootLook | undefined)[] = verdicts.map((verdict) =>
    verdict === 'ours' ? undefined : { unanswered: verdict.ok ? 'no answer' : verdict.reason },
  );
  const open = (indices: number[], path: string) =>
    virsh.ask(
      indices.map((i) => agentCommand(domains[i]!, 'guest-file-open', { path, mode: 'r' })),
      { urgent: true },
    );
  const closes: string[][] = [];
  const opened = (domain: string, reply: VirshReply): boolean => {
    const handle = /"return":\s*(\d+)/.exec(reply.output)?.[1];
    if (reply.ok && handle !== undefined) closes.push(agentCommand(domain, 'guest-file-close', { handle: Number(handle) }));
    return reply.ok;
  };
  const asked = looks.flatMap((look, i) => (look === undefined ? [i] : []));
  const results = await open(asked, resultPath);
  const withoutResult: number[] = [];
  asked.forEach((i, n) => {
    const reply = results[n]!;
    if (opened(domains[i]!, reply)) looks[i] = 'ended';
    else if (saysNoSuchFile(reply)) withoutResult.push(i);
    else looks[i] = { unanswered: reasonOf(reply) };
  });
  const statuses = await open(withoutResult, statusPath);
  withoutResult.forEach((i, n) => {
    const reply = statuses[n]!;
    if (opened(domains[i]!, reply)) looks[i] = 'running';
    else looks[i] = saysNoSuchFile(reply) ? 'ended' : { unanswered: reasonOf(reply) };
  });
  // Handles are the agent's until closed; one left open (a close that failed) costs it a file descriptor, nothing more.
  if (closes.length > 0) await virsh.ask(closes, { urgent: true }).catch(() => undefined);
  return looks.map((look) => look ?? { unanswered: 'the hypervisor gave no answer' });
}
