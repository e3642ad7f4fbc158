import { commandLine, quote } from '../core/shell.ts';

/**
 * What the guest step knows about a member, asked in one script run as root (through the guest
 * agent, or over SSH with sudo: guest/probe.ts): every managed file's digest, mode, owner and time,
 * every service's state, the running environment of services whose settings live in an
 * EnvironmentFile, whether etcd's data directory holds a member, and cloud-init's result. Under
 * emulation every process spawned in the guest costs 0.05-0.35 s even when the guest is idle, so the
 * script spawns as few as it can: one stat, one sha256sum, one cat per environment, and shell
 * builtins for the rest. Sections are framed by marker lines.
 *
 * A service's state is read from what systemd leaves in files (its cgroup's processes, its enable
 * links, the time its invocation began, the time of systemd's last reload) when that settles it: the
 * service runs, is enabled, and none of its managed unit files changed since systemd last read them.
 * Anything else (stopped, failed, restarting, not enabled, masked, a unit file newer than the last
 * reload) is asked of systemd itself with `systemctl show`, in a second script (unitStateScript):
 * it costs an emulated guest ~0.2 s of CPU, more than the rest of the probe, and is seldom needed.
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
const printFile = (path: string) =>
  `if [ -r ${quote(path)} ]; then while IFS= read -r l || [ -n "$l" ]; do printf '%s\\n' "$l"; done < ${quote(path)}; fi`;

export const CLOUD_INIT_RESULT = '/run/cloud-init/result.json';
export const CLOUD_INIT_STATUS = '/run/cloud-init/status.json';

/** Where systemd records when it last read its unit files: it recreates its generators' directory on every reload. */
const SYSTEMD_RELOADED = '/run/systemd/generator';
/** A symlink systemd creates when a unit's invocation begins: its time is the unit's start. */
const invocationOf = (unit: string) => `/run/systemd/units/invocation:${unit}`;

/** Sets `pid` to the unit's first process (cgroup v2: its main process), read with a builtin; empty when none runs. */
const readFirstProcess = (unit: string) => `pid=; read -r pid < ${quote(`/sys/fs/cgroup/system.slice/${unit}/cgroup.procs`)} 2>/dev/null`;

/** The probe: run as root (`sudo sh -s`). Missing files and units are simply absent from the answer. */
export function guestProbeScript(questions: GuestQuestions): string {
  const paths = questions.paths.map(quote).join(' ');
  const clocks = [SYSTEMD_RELOADED, ...questions.units.map(invocationOf)].map(quote).join(' ');
  const lines = [
    section('stat'),
    // Times to the nanosecond: a unit file written in the same second as a reload is told apart.
    `stat -c '%a %U:%G %.9Y %n' -- ${paths} ${clocks} 2>/dev/null`,
    section('sha256'),
    ...(questions.paths.length ? [`sha256sum -- ${paths} 2>/dev/null`] : []),
    section('units'),
    // Per unit: its first process, and `enabled` when a .wants link of /etc names it and no symlink (a mask) replaces it.
    ...questions.units.map((unit) =>
      [
        readFirstProcess(unit),
        `e=; for l in /etc/systemd/system/*.wants/${quote(unit)}; do [ -L "$l" ] && e=enabled; done; [ -L ${quote(`/etc/systemd/system/${unit}`)} ] && e=`,
        `echo ${quote(unit)} "\${pid:--}" "\${e:--}"`,
      ].join('; '),
    ),
    ...questions.environmentUnits.flatMap((unit) => [
      section(`environ ${unit}`),
      `${readFirstProcess(unit)}; [ -n "$pid" ] && cat "/proc/$pid/environ" 2>/dev/null; echo`,
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

/**
 * Waits while cloud-init runs (its status file written, its result not yet): the same files the
 * probe reads, polled with one `sleep` every 2 s. `cloud-init status --wait` costs an emulated
 * guest 5-6 s of CPU to start Python and import cloud-init, in the middle of its first boot.
 */
export function waitForCloudInit(): string {
  return `while [ -e ${quote(CLOUD_INIT_STATUS)} ] && [ ! -e ${quote(CLOUD_INIT_RESULT)} ]; do sleep 2; done`;
}

/** The units' state as systemd itself tells it, for when the files do not settle it. */
export function unitStateScript(units: readonly string[]): string {
  return [
    section('systemd'),
    `${commandLine(['systemctl', 'show', '--timestamp=unix', '-p', 'Id,LoadState,UnitFileState,ActiveState,SubState,ActiveEnterTimestamp,NeedDaemonReload', '--', ...units])} 2>/dev/null`,
    section('end'),
  ].join('\n');
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

function framed(output: string): Map<string, string> {
  const parts = sections(output);
  if (!parts.has('end')) throw new ProbeOutputError(`the guest probe's answer is incomplete (${output.length} bytes, no end marker)`);
  return parts;
}

/**
 * The probe's answer. `units` is undefined when what the files say does not settle every unit's
 * state: then unitStateScript asks systemd, and parseUnitState reads its answer (guest/probe.ts).
 */
export function parseGuestProbe(
  output: string,
  questions: GuestQuestions,
): { facts: Omit<GuestFacts, 'units'>; units: Map<string, UnitFact> | undefined } {
  const parts = framed(output);
  const digests = new Map<string, string>();
  for (const line of (parts.get('sha256') ?? '').split('\n')) {
    const match = /^([0-9a-f]{64}) [ *](.*)$/.exec(line);
    if (match) digests.set(match[2]!, match[1]!);
  }
  const asked = new Set(questions.paths);
  const files = new Map<string, FileFact>();
  /** Exact modification times (seconds, with fractions): of the managed files, and of systemd's clocks. */
  const times = new Map<string, number>();
  for (const line of (parts.get('stat') ?? '').split('\n')) {
    const match = /^([0-7]+) (\S+) (\d+(?:\.\d+)?) (.*)$/.exec(line);
    if (!match) continue;
    const path = match[4]!;
    times.set(path, Number(match[3]));
    if (!asked.has(path)) continue;
    // A path that stat sees but sha256sum cannot read (a directory in its place) has no digest.
    files.set(path, {
      mode: Number.parseInt(match[1]!, 8),
      owner: match[2]!,
      mtime: Math.floor(Number(match[3])),
      digest: digests.get(path) ?? '',
    });
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
    facts: {
      files,
      environments,
      dataDirInitialized: (parts.get('data') ?? '').trim() === 'member',
      cloudInit: parseCloudInit(parts.get('cloud-init-result') ?? '', parts.get('cloud-init-status') ?? ''),
    },
    units: unitsFromFiles(parts.get('units') ?? '', times, questions),
  };
}

/**
 * Every unit's state from files, or undefined unless each one runs, is enabled, has an invocation
 * time, and no managed unit file is newer than systemd's last reload (then NeedDaemonReload is no).
 */
export function unitsFromFiles(
  text: string,
  times: ReadonlyMap<string, number>,
  questions: GuestQuestions,
): Map<string, UnitFact> | undefined {
  const reloaded = times.get(SYSTEMD_RELOADED);
  if (reloaded === undefined) return undefined;
  if (questions.paths.some((path) => path.startsWith('/etc/systemd/system/') && (times.get(path) ?? 0) >= reloaded)) return undefined;
  const seen = new Map(
    text
      .split('\n')
      .map((line) => line.split(' '))
      .filter((words) => words.length === 3)
      .map(([unit, pid, enabled]) => [unit!, { running: /^\d+$/.test(pid!), enabled: enabled === 'enabled' }]),
  );
  const units = new Map<string, UnitFact>();
  for (const unit of questions.units) {
    const started = times.get(invocationOf(unit));
    const state = seen.get(unit);
    if (!state?.running || !state.enabled || started === undefined) return undefined;
    units.set(unit, {
      loaded: true,
      enabled: 'enabled',
      active: 'active',
      sub: 'running',
      startedAt: Math.floor(started),
      needsDaemonReload: false,
    });
  }
  return units;
}

/** The units' state from unitStateScript's answer. */
export function parseUnitState(output: string): Map<string, UnitFact> {
  return parseSystemctlShow(framed(output).get('systemd') ?? '');
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
      const staged = Object.values(v1).flatMap((stage) =>
        stage && typeof stage === 'object' && Array.isArray((stage as { errors?: unknown }).errors)
          ? (stage as { errors: unknown[] }).errors
          : [],
      );
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
