import { commandLine, quote } from '../core/shell.ts';

/**
 * What the guest step knows about a member, asked in one script run as root (through the guest
 * agent, or over SSH with sudo: guest/probe.ts): every managed file's digest, mode, owner and time,
 * every service's state, the running environment of services whose settings live in an
 * EnvironmentFile, whether etcd's data directory holds a member, and cloud-init's result. Under
 * emulation every process spawned in the guest costs 0.05-0.35 s even when the guest is idle, so the
 * script spawns as few as it can: one stat, one sha256sum, one systemctl, one cat per environment,
 * and reads cloud-init's result files with shell builtins. Sections are framed by marker lines.
 */

export interface FileFact {
  digest: string;
  mode: number;
  owner: string;
  /** Modification time, seconds since the epoch (the guest's clock). */
  mtime: number;
}

export interface UnitFact {
  loaded: boolean;
  /** UnitFileState: enabled, disabled, static, masked… */
  enabled: string;
  /** ActiveState: active, activating, inactive, failed… */
  active: string;
  /**
   * SubState: running, start, auto-restart… `activating` + `auto-restart` is a unit that failed and
   * waits for systemd's Restart= to try again: not running, whatever ActiveState says.
   */
  sub: string;
  /** When it last became active, seconds since the epoch (the guest's clock); absent when never. */
  startedAt?: number;
  /** The unit file changed on disk since systemd last read it. */
  needsDaemonReload: boolean;
}

export type CloudInitFact = { state: 'running' } | { state: 'done' } | { state: 'error'; modules: string[] };

export interface GuestFacts {
  files: Map<string, FileFact>;
  units: Map<string, UnitFact>;
  /** The running main process's environment, per unit asked for. */
  environments: Map<string, Map<string, string>>;
  dataDirInitialized: boolean;
  cloudInit: CloudInitFact;
}

export interface GuestQuestions {
  paths: readonly string[];
  units: readonly string[];
  environmentUnits: readonly string[];
  dataDir: string;
}

const MARK = '@@etcd-kvm@@';
const section = (name: string) => `echo ${quote(`${MARK} ${name}`)}`;
/** Prints a file with shell builtins only (no process): cloud-init's JSON results. */
const printFile = (path: string) => `if [ -r ${quote(path)} ]; then while IFS= read -r l || [ -n "$l" ]; do printf '%s\\n' "$l"; done < ${quote(path)}; fi`;

export const CLOUD_INIT_RESULT = '/run/cloud-init/result.json';
export const CLOUD_INIT_STATUS = '/run/cloud-init/status.json';

/** The probe: run as root (`sudo sh -c SCRIPT`). Missing files and units are simply absent from the answer. */
export function guestProbeScript(questions: GuestQuestions): string {
  const paths = questions.paths.map(quote).join(' ');
  const lines = [
    section('stat'),
    ...(questions.paths.length ? [`stat -c '%a %U:%G %Y %n' -- ${paths} 2>/dev/null`] : []),
    section('sha256'),
    ...(questions.paths.length ? [`sha256sum -- ${paths} 2>/dev/null`] : []),
    section('units'),
    ...(questions.units.length ? [`${commandLine(['systemctl', 'show', '--timestamp=unix', '-p', 'Id,LoadState,UnitFileState,ActiveState,SubState,ActiveEnterTimestamp,NeedDaemonReload', '--', ...questions.units])} 2>/dev/null`] : []),
    ...questions.environmentUnits.flatMap((unit) => [
      section(`environ ${unit}`),
      // The unit's main process is the first in its cgroup (cgroup v2), read with a builtin.
      `pid=; read -r pid < ${quote(`/sys/fs/cgroup/system.slice/${unit}/cgroup.procs`)} 2>/dev/null; [ -n "$pid" ] && cat "/proc/$pid/environ" 2>/dev/null; echo`,
    ]),
    section('data'),
    `[ -d ${quote(`${questions.dataDir}/member`)} ] && echo member`,
    section('cloud-init-result'),
    printFile(CLOUD_INIT_RESULT),
    section('cloud-init-status'),
    printFile(CLOUD_INIT_STATUS),
    section('end'),
  ];
  return lines.join('\n');
}

function sections(output: string): Map<string, string> {
  const found = new Map<string, string>();
  let current: string | undefined;
  let lines: string[] = [];
  for (const line of output.split('\n')) {
    if (line.startsWith(`${MARK} `)) {
      if (current !== undefined) found.set(current, lines.join('\n'));
      current = line.slice(MARK.length + 1);
      lines = [];
    } else if (current !== undefined) lines.push(line);
  }
  if (current !== undefined) found.set(current, lines.join('\n'));
  return found;
}

export class ProbeOutputError extends Error {}

export function parseGuestProbe(output: string, questions: GuestQuestions): GuestFacts {
  const parts = sections(output);
  if (!parts.has('end')) throw new ProbeOutputError(`the guest probe's answer is incomplete (${output.length} bytes, no end marker)`);
  const digests = new Map<string, string>();
  for (const line of (parts.get('sha256') ?? '').split('\n')) {
    const match = /^([0-9a-f]{64}) [ *](.*)$/.exec(line);
    if (match) digests.set(match[2]!, match[1]!);
  }
  const files = new Map<string, FileFact>();
  for (const line of (parts.get('stat') ?? '').split('\n')) {
    const match = /^([0-7]+) (\S+) (\d+) (.*)$/.exec(line);
    if (!match) continue;
    const path = match[4]!;
    // A path that stat sees but sha256sum cannot read (a directory in its place) has no digest.
    files.set(path, { mode: Number.parseInt(match[1]!, 8), owner: match[2]!, mtime: Number(match[3]), digest: digests.get(path) ?? '' });
  }
  const environments = new Map<string, Map<string, string>>();
  for (const unit of questions.environmentUnits) {
    const raw = parts.get(`environ ${unit}`) ?? '';
    const variables = new Map<string, string>();
    for (const entry of raw.split('\0')) {
      const at = entry.indexOf('=');
      if (at > 0) variables.set(entry.slice(0, at).replace(/^\n/, ''), entry.slice(at + 1).replace(/\n$/, ''));
    }
    if (variables.size > 0) environments.set(unit, variables);
  }
  return {
    files,
    units: parseSystemctlShow(parts.get('units') ?? ''),
    environments,
    dataDirInitialized: (parts.get('data') ?? '').trim() === 'member',
    cloudInit: parseCloudInit(parts.get('cloud-init-result') ?? '', parts.get('cloud-init-status') ?? ''),
  };
}

/** `systemctl show` of several units: one block of Key=Value lines per unit, separated by blank lines. */
export function parseSystemctlShow(text: string): Map<string, UnitFact> {
  const units = new Map<string, UnitFact>();
  for (const block of text.split(/\n\s*\n/)) {
    const values = new Map<string, string>();
    for (const line of block.split('\n')) {
      const at = line.indexOf('=');
      if (at > 0) values.set(line.slice(0, at), line.slice(at + 1));
    }
    const id = values.get('Id');
    if (!id) continue;
    const since = /^@(\d+)/.exec(values.get('ActiveEnterTimestamp') ?? '');
    units.set(id, {
      loaded: values.get('LoadState') === 'loaded',
      enabled: values.get('UnitFileState') ?? '',
      active: values.get('ActiveState') ?? '',
      sub: values.get('SubState') ?? '',
      ...(since ? { startedAt: Number(since[1]) } : {}),
      needsDaemonReload: values.get('NeedDaemonReload') === 'yes',
    });
  }
  return units;
}

/**
 * cloud-init writes result.json when its last stage has finished (with the errors of all stages);
 * until then only status.json exists. An error names the module: "('locale', ProcessExecutionError…)".
 */
export function parseCloudInit(resultJson: string, statusJson: string): CloudInitFact {
  if (!resultJson.trim()) return { state: 'running' };
  const errorsOf = (json: string): string[] => {
    try {
      const v1 = (JSON.parse(json) as { v1?: Record<string, unknown> }).v1 ?? {};
      const direct = Array.isArray(v1.errors) ? (v1.errors as unknown[]) : [];
      const staged = Object.values(v1).flatMap((stage) => (stage && typeof stage === 'object' && Array.isArray((stage as { errors?: unknown }).errors) ? ((stage as { errors: unknown[] }).errors) : []));
      return [...direct, ...staged].map(String);
    } catch {
      return [];
    }
  };
  const errors = [...errorsOf(resultJson), ...errorsOf(statusJson)];
  if (errors.length === 0) return { state: 'done' };
  const modules = [...new Set(errors.map((error) => /^\('([\w-]+)'/.exec(error)?.[1] ?? error.slice(0, 80)))];
  return { state: 'error', modules };
}
