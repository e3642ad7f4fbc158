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
 * The hypervisor's side: for every domain at once (a background shell each), start the script if the
 * domain carries this cluster's mark (the owner element with `owner.id`: never inside another
 * cluster's VM that has a member's name), then ask for its status until it has exited or
 * `timeoutSeconds` passed. Each writes its outcome to its own file (outputs are larger than a pipe
 * writes at once), printed in request order at the end: `MARK<i> done` and the agent's JSON reply,
 * or `MARK<i> failed` and why (not marked as ours, no agent channel, agent not running, no answer in time).
 */
export function agentScript(uri: string, requests: readonly AgentRequest[], owner: { namespace: string; id: string }, timeoutSeconds: number): string {
  const virsh = (args: string[]) => commandLine(virshArgv(uri, args));
  const lines = [
    'dir=$(mktemp -d) || exit 1',
    'trap \'rm -rf "$dir"\' EXIT',
    // Whole seconds: one more, so that no domain gets less than the full time (the clock may be about to tick).
    `end=$(( $(date +%s) + ${Math.ceil(timeoutSeconds) + 1} ))`,
    `ask() { ${virsh(['qemu-agent-command', '--timeout', String(REPLY_TIMEOUT_SECONDS)])} "$1" "$2" 2>&1; }`,
    // probe DOMAIN START-JSON OUT-FILE
    'probe() {',
    `  m=$(${virsh(['metadata', '--uri', owner.namespace, '--domain'])} "$1" 2>&1)`,
    '  case "$m" in',
    `    *${quote(`id="${owner.id}"`)}*) ;;`,
    `    *'failed to get domain'*) printf 'failed\\n%s\\n' "$m" > "$3"; return ;;`,
    `    *) printf 'failed\\n%s\\n' ${quote(`error: not marked as this cluster's domain (owner id ${owner.id})`)} > "$3"; return ;;`,
    '  esac',
    '  r=$(ask "$1" "$2"); p=$(printf \'%s\' "$r" | sed -n \'s/.*"pid": *\\([0-9][0-9]*\\).*/\\1/p\')',
    `  [ -n "$p" ] || { printf 'failed\\n%s\\n' "$r" > "$3"; return; }`,
    '  while :; do',
    // The pid is digits (sed kept nothing else): safe inside the double-quoted JSON.
    '    s=$(ask "$1" "{\\"execute\\":\\"guest-exec-status\\",\\"arguments\\":{\\"pid\\":$p}}")',
    '    case "$s" in',
    `      *'"exited": true'*|*'"exited":true'*) printf 'done\\n%s\\n' "$s" > "$3"; return ;;`,
    `      *'"return"'*) ;;`,
    `      *) printf 'failed\\n%s\\n' "$s" > "$3"; return ;;`,
    '    esac',
    `    [ "$(date +%s)" -lt "$end" ] || { printf 'failed\\n%s\\n' ${quote(`no answer within ${timeoutSeconds} s`)} > "$3"; return; }`,
    `    sleep ${POLL_SECONDS}`,
    '  done',
    '}',
    ...requests.map(({ domain, script }, i) => {
      const start = JSON.stringify({ execute: 'guest-exec', arguments: { path: '/bin/sh', arg: ['-s'], 'input-data': Buffer.from(script).toString('base64'), 'capture-output': true } });
      return `probe ${quote(domain)} ${quote(start)} "$dir/${i}" &`;
    }),
    'wait',
    ...requests.map((_, i) => `printf '%s' ${quote(`${MARK}${i} `)}; cat "$dir/${i}" 2>/dev/null || printf 'failed\\nno outcome\\n'`),
  ];
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
