import { commandLine, quote } from '../core/shell.ts';
import { virshArgv } from '../libvirt/virsh.ts';

/**
 * A script run as root inside several domains of one hypervisor through the QEMU guest agent
 * (`guest-exec`, the script on its stdin), asked and collected by one shell on the hypervisor: one
 * SSH exec per hypervisor, whatever the number of members. Under emulation this spares each member
 * an SSH handshake, an sshd session and sudo, which cost it more than the probe itself (measured in
 * an idle lab guest: ~1.2 s against ~0.5 s). Read-only use only: what changes a guest goes over SSH.
 */

export interface AgentRequest {
  domain: string;
  script: string;
}

export type AgentAnswer = { ok: true; output: string } | { ok: false; reason: string };

const MARK = '@@etcd-kvm-agent@@';
/** How long libvirt waits for one agent reply (a connected agent answers at once). */
const REPLY_TIMEOUT_SECONDS = 5;
/** Between two asks whether the scripts have finished. */
const POLL_SECONDS = '0.1';

/**
 * The hypervisor's side: start the script in every domain that carries this cluster's mark (the owner
 * element with `ownerId`: never inside another cluster's VM that has a member's name), then ask each
 * for its status until all have exited or `timeoutSeconds` passed. Prints, per request i, `MARK<i>
 * done` and the agent's JSON reply, or `MARK<i> failed` and why (not marked as ours, no agent channel,
 * agent not running, no answer in time).
 */
export function agentScript(uri: string, requests: readonly AgentRequest[], owner: { namespace: string; id: string }, timeoutSeconds: number): string {
  const agent = (domain: string, json: string) => `${commandLine(virshArgv(uri, ['qemu-agent-command', '--timeout', String(REPLY_TIMEOUT_SECONDS), domain]))} ${json} 2>&1`;
  const report = (i: number, outcome: 'done' | 'failed', text: string) => `printf '%s\\n%s\\n' ${quote(`${MARK}${i} ${outcome}`)} ${text}`;
  const lines = [`end=$(( $(date +%s) + ${Math.ceil(timeoutSeconds)} ))`];
  requests.forEach(({ domain, script }, i) => {
    const start = JSON.stringify({ execute: 'guest-exec', arguments: { path: '/bin/sh', arg: ['-s'], 'input-data': Buffer.from(script).toString('base64'), 'capture-output': true } });
    lines.push(
      `p${i}=; m=$(${commandLine(virshArgv(uri, ['metadata', '--domain', domain, '--uri', owner.namespace]))} 2>&1)`,
      `case "$m" in`,
      `  *${quote(`id="${owner.id}"`)}*) r=$(${agent(domain, quote(start))}); p${i}=$(printf '%s' "$r" | sed -n 's/.*"pid": *\\([0-9][0-9]*\\).*/\\1/p') ;;`,
      `  *'failed to get domain'*) r="$m" ;;`,
      `  *) r=${quote(`error: not marked as this cluster's domain (owner id ${owner.id})`)} ;;`,
      'esac',
      `[ -n "$p${i}" ] || ${report(i, 'failed', '"$r"')}`,
    );
  });
  lines.push('while :; do', '  pending=');
  requests.forEach(({ domain }, i) => {
    // The pid is digits (sed kept nothing else): safe inside the double-quoted JSON.
    const status = `"{\\"execute\\":\\"guest-exec-status\\",\\"arguments\\":{\\"pid\\":$p${i}}}"`;
    lines.push(
      `  if [ -n "$p${i}" ]; then s=$(${agent(domain, status)})`,
      `    case "$s" in *'"exited": true'*|*'"exited":true'*) ${report(i, 'done', '"$s"')}; p${i}= ;; *'"return"'*) pending=1 ;; *) ${report(i, 'failed', '"$s"')}; p${i}= ;; esac`,
      '  fi',
    );
  });
  lines.push('  [ -n "$pending" ] || break', '  if [ "$(date +%s)" -ge "$end" ]; then');
  requests.forEach((_, i) => lines.push(`    [ -z "$p${i}" ] || ${report(i, 'failed', quote(`no answer within ${timeoutSeconds} s`))}`));
  lines.push('    break', '  fi', `  sleep ${POLL_SECONDS}`, 'done');
  return lines.join('\n');
}

interface ExecStatus {
  return?: { exited?: boolean; exitcode?: number; signal?: number; 'out-data'?: string; 'err-data'?: string; 'out-truncated'?: boolean };
}

/** Each request's answer from agentScript's output, in request order. */
export function parseAgentAnswers(output: string, count: number): AgentAnswer[] {
  const sections = new Map<number, { outcome: string; text: string }>();
  const found = new RegExp(`^${MARK}(\\d+) (done|failed)\\n([\\s\\S]*?)(?=^${MARK}|(?![\\s\\S]))`, 'gm');
  for (const match of output.matchAll(found)) sections.set(Number(match[1]), { outcome: match[2]!, text: match[3]!.trim() });
  return Array.from({ length: count }, (_, i): AgentAnswer => {
    const section = sections.get(i);
    if (!section) return { ok: false, reason: 'the hypervisor gave no answer' };
    // virsh's own words: "error: Guest agent is not responding: QEMU guest agent is not connected".
    if (section.outcome === 'failed') return { ok: false, reason: section.text.replace(/^error: /, '').split('\n')[0] || 'no reason given' };
    let status: ExecStatus;
    try {
      status = JSON.parse(section.text) as ExecStatus;
    } catch {
      return { ok: false, reason: `the agent's reply is not JSON: ${section.text.slice(0, 80)}` };
    }
    const result = status.return ?? {};
    if (result['out-truncated']) return { ok: false, reason: "the agent cut the script's output short" };
    if (result.exitcode !== 0) {
      const stderr = Buffer.from(result['err-data'] ?? '', 'base64').toString('utf8').trim().split('\n')[0];
      return { ok: false, reason: `the script exited with ${result.exitcode ?? `signal ${result.signal}`}${stderr ? `: ${stderr}` : ''}` };
    }
    return { ok: true, output: Buffer.from(result['out-data'] ?? '', 'base64').toString('utf8') };
  });
}
