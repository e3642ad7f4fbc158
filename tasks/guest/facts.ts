import { commandLine, quote } from '../core/shell.ts';

/**
 * What the guest step knows about a member: every managed file's digest, mode, owner and time, every
 * service's state, the running environment of services whose settings live in an EnvironmentFile,
 * whether etcd's data directory holds a member, and cloud-init's result. Under emulation every process
 * spawned in the guest costs 0.05-0.35 s even when the guest is idle, so most of it is read from
 * files: through the guest agent (guest/probe.ts), in one process that reads with shell builtins and
 * then becomes `stat` for what no file says (modes, owners, times, links), and file calls, which start
 * no process, for the rest; over SSH, for a member whose agent does not answer, in one script run
 * as root (guestProbeScript) printing the same parts. Both answers are the same ProbeParts, turned
 * into facts by factsFromParts.
 *
 * A service's state is read from what systemd leaves in files (its cgroup's processes, its enable
 * link, the time its invocation began, the time of systemd's last reload) when that settles it: the
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
  /** The etcd release the unit is to run is installed (its binary is there); asked with binaries: release only. */
  releaseInstalled?: boolean;
  /** The staged release (etcd.stage_version) is installed; asked only when one is staged. */
  stagedInstalled?: boolean;
  /** Of the retired paths asked for (GuestQuestions.retired), those still there. */
  retiredFound: Set<string>;
  /** Of the packages' files asked for (GuestQuestions.packageFiles), those absent: their packages are not installed. */
  packageFilesMissing: Set<string>;
}

export interface GuestQuestions {
  paths: readonly string[];
  /** Of `paths`, the secrets (keys): read on every run, their digests never written to disk (guest/digest-memory.ts). */
  secrets?: readonly string[];
  units: readonly string[];
  environmentUnits: readonly string[];
  dataDir: string;
  /**
   * With binaries: release, the binary of the release the unit runs: is it installed?
   * (stat only: an install renames a whole, verified directory into place.)
   */
  releaseBinary?: string;
  /** The staged release's binary: is it installed? (stat only, as releaseBinary.) */
  stagedBinary?: string;
  /** Paths that must not be there (a turned-off task's files and enable links): stat only. */
  retired?: readonly string[];
  /** A file of each Debian package the member's programs need (ImagePackage.path): stat only. */
  packageFiles?: readonly string[];
}

/** Starts each section of a probe's answer: `MARK name` on a line of its own. */
export const MARK = '@@etcd-kvm@@';
const section = (name: string) => `echo ${quote(`${MARK} ${name}`)}`;
/** Prints standard input's text lines with shell builtins only: no process. */
const PRINT_LINES = `while IFS= read -r l || [ -n "$l" ]; do printf '%s\\n' "$l"; done`;
/** Prints a file with shell builtins only (no process): cloud-init's JSON results. */
const printFile = (path: string) => `if [ -r ${quote(path)} ]; then ${PRINT_LINES} < ${quote(path)}; fi`;

export const CLOUD_INIT_RESULT = '/run/cloud-init/result.json';
export const CLOUD_INIT_STATUS = '/run/cloud-init/status.json';

/** Where systemd records when it last read its unit files: it recreates its generators' directory on every reload. */
const SYSTEMD_RELOADED = '/run/systemd/generator';
/** A symlink systemd creates when a unit's invocation begins: its time is the unit's start. */
const invocationOf = (unit: string) => `/run/systemd/units/invocation:${unit}`;
/**
 * The link `systemctl enable` makes for one of the tool's units: its timers are installed for
 * timers.target (what a turned-off task's removal looks for), its services (and Debian's it manages)
 * for multi-user.target. A unit enabled elsewhere is not settled by files: systemd is asked; so is a
 * timer, which has neither processes nor an invocation link to tell its state by.
 */
export const enableLinkOf = (unit: string) =>
  `/etc/systemd/system/${unit.endsWith('.timer') ? 'timers' : 'multi-user'}.target.wants/${unit}`;
/** A symlink here (to /dev/null) masks the unit; the tool's own unit files are here too. */
export const overrideOf = (unit: string) => `/etc/systemd/system/${unit}`;
/** A unit's processes (cgroup v2): the first one listed is its main process. */
export const processesOf = (unit: string) => `/sys/fs/cgroup/system.slice/${unit}/cgroup.procs`;
/** Where a data directory that holds a member keeps it. */
const memberDirOf = (dataDir: string) => `${dataDir}/member`;

/** One path as stat tells it: file type and permission bits, owner, exact modification time (seconds). */
export interface StatEntry {
  mode: number;
  owner: string;
  mtime: number;
  /**
   * Inode, size, and both times as stat printed them (to the nanosecond): what tells a file's content unchanged (guest/digest-memory.ts).
   */
  identity: string;
  /** The change time (ctime), in nanoseconds. */
  changedAtNs: bigint;
}

const S_IFMT = 0o170000;
const S_IFLNK = 0o120000;
const S_IFDIR = 0o040000;
const S_IFREG = 0o100000;
const isLink = (entry: StatEntry | undefined) => entry !== undefined && (entry.mode & S_IFMT) === S_IFLNK;

/** The one program a probe runs: Debian's coreutils stat. */
export const STAT_PROGRAM = '/usr/bin/stat';

/** Every path whose mode, owner, time or type a probe asks of stat: the managed files, systemd's clocks and links, the data. */
export function statPaths(questions: GuestQuestions): string[] {
  const units = questions.units.flatMap((unit) => [invocationOf(unit), enableLinkOf(unit), overrideOf(unit)]);
  return [
    ...new Set([
      ...questions.paths,
      SYSTEMD_RELOADED,
      ...units,
      memberDirOf(questions.dataDir),
      CLOUD_INIT_RESULT,
      CLOUD_INIT_STATUS,
      ...(questions.releaseBinary ? [questions.releaseBinary] : []),
      ...(questions.stagedBinary ? [questions.stagedBinary] : []),
      ...(questions.retired ?? []),
      ...(questions.packageFiles ?? []),
    ]),
  ];
}

/**
 * stat's arguments: raw mode in hex (type and permissions), owner, modification and change times to
 * the nanosecond (a unit file written in the same second as a reload is told apart), inode, size, path.
 */
export const statArguments = (questions: GuestQuestions): string[] => ['-c', '%f %U:%G %.9Y %.9Z %i %s %n', '--', ...statPaths(questions)];

/** "1795431331.123456789" as nanoseconds. */
const nanoseconds = (time: string): bigint => {
  const [whole, fraction = ''] = time.split('.');
  return BigInt(whole!) * 1_000_000_000n + BigInt(fraction.padEnd(9, '0').slice(0, 9));
};

/** stat's answer (missing paths are simply absent from it). */
export function parseStat(text: string): Map<string, StatEntry> {
  const entries = new Map<string, StatEntry>();
  for (const line of text.split('\n')) {
    const match = /^([0-9a-f]+) (\S+) (\d+(?:\.\d+)?) (\d+(?:\.\d+)?) (\d+) (\d+) (.*)$/.exec(line);
    if (!match) continue;
    const [mode = '', owner = '', mtime = '', ctime = '', inode = '', size = '', path = ''] = match.slice(1);
    entries.set(path, {
      mode: Number.parseInt(mode, 16),
      owner,
      mtime: Number(mtime),
      identity: `${inode} ${size} ${mtime} ${ctime}`,
      changedAtNs: nanoseconds(ctime),
    });
  }
  return entries;
}

/** What a probe gathers, by either way (agent or SSH), before it is read as facts. */
export interface ProbeParts {
  stats: ReadonlyMap<string, StatEntry>;
  /** sha256 of each managed file that could be read. */
  digests: ReadonlyMap<string, string>;
  /** Each unit's main process, where one runs. */
  processes: ReadonlyMap<string, string>;
  /** The environment (NUL-separated) of each environment unit's main process, where one runs. */
  environs: ReadonlyMap<string, string>;
  cloudInitResult: string;
  cloudInitStatus: string;
}

/** After the last line of a secret that had no newline (AGENT_PROBE_SCRIPT): not a section's start. */
const NO_NEWLINE = `${MARK}-no-newline`;
/** In place of a file the probe's shell could not open. */
const UNREADABLE = `${MARK}-unreadable`;

/**
 * The probe through a guest agent: one process. `sh -c AGENT_PROBE_SCRIPT sh ARGS` (agentProbeCommand)
 * prints cloud-init's result and each unit's first process with shell builtins, then becomes stat
 * (`exec`): one fork and two execs in the guest, where the agent's file calls for the same files
 * cost a round trip each (libvirt sends a guest-sync before every agent command). What it leaves to
 * read (managed files whose identity changed, a unit's environment: NULs a shell cannot hold) is
 * read through the agent's file calls after it. The secrets (keys and credentials, all text, read on
 * every run: no digest of them is remembered) are printed whole, byte for byte: each line, and NO_NEWLINE after a last
 * line that had none. A file there that cannot be opened prints UNREADABLE: the probe then goes over
 * SSH, as it did when a file call failed, rather than report the file empty. ARGS: cloud-init's
 * result, each unit and its cgroup's processes file, `--`, the secrets, `--`, then stat's arguments.
 */
export const AGENT_PROBE_SCRIPT = [
  section('cloud-init-result'),
  `[ ! -e "$1" ] || { ${PRINT_LINES}; } 2>/dev/null < "$1" || printf '%s\\n' '${UNREADABLE}'; shift`,
  section('units'),
  `while [ $# -gt 0 ] && [ "$1" != -- ]; do pid=; read -r pid 2>/dev/null < "$2"; ` +
    `[ -n "$pid" ] && printf '%s %s\\n' "$1" "$pid"; shift 2; done; shift`,
  `while [ $# -gt 0 ] && [ "$1" != -- ]; do printf '${MARK} text %s\\n' "$1"; [ ! -f "$1" ] ||`,
  `  { l=; while IFS= read -r l; do printf '%s\\n' "$l"; l=; done; ` +
    `[ -z "$l" ] || printf '%s\\n${NO_NEWLINE}\\n' "$l"; } 2>/dev/null < "$1" ||`,
  `  printf '%s\\n' '${UNREADABLE}'; shift; done; shift`,
  section('stat'),
  `exec ${STAT_PROGRAM} "$@" 2>/dev/null`,
].join('\n');

/** The agent's probe (AGENT_PROBE_SCRIPT) as guest-exec's path and arguments. */
export function agentProbeCommand(questions: GuestQuestions): { path: string; args: string[] } {
  const units = questions.units.flatMap((unit) => [unit, processesOf(unit)]);
  const printed = questions.secrets ?? [];
  return {
    path: '/bin/sh',
    args: ['-c', AGENT_PROBE_SCRIPT, 'sh', CLOUD_INIT_RESULT, ...units, '--', ...printed, '--', ...statArguments(questions)],
  };
}

/**
 * What the agent's probe says: stat's entries, each unit's first process,
 * cloud-init's result, the secrets' bytes; a throw when its stat never started.
 */
export function parseAgentProbe(
  output: string,
): Pick<ProbeParts, 'stats' | 'processes' | 'cloudInitResult'> & { texts: Map<string, string> } {
  const parts = sections(output);
  const stat = parts.get('stat');
  if (stat === undefined) throw new ProbeOutputError(`the guest probe's answer is incomplete (${output.length} bytes, no stat)`);
  for (const [name, text] of parts)
    if ((name === 'cloud-init-result' || name.startsWith('text ')) && text.split('\n').at(-1) === UNREADABLE)
      throw new ProbeOutputError(
        `the guest probe could not read ${name === 'cloud-init-result' ? CLOUD_INIT_RESULT : name.slice('text '.length)}`,
      );
  const texts = new Map(
    [...parts].flatMap(([name, text]) => {
      if (!name.startsWith('text ')) return [];
      const lines = text === '' ? [] : text.split('\n');
      const whole = lines.at(-1) === NO_NEWLINE ? lines.slice(0, -1).join('\n') : lines.map((line) => `${line}\n`).join('');
      return [[name.slice('text '.length), whole] as const];
    }),
  );
  return {
    stats: parseStat(stat),
    processes: processesFrom(parts.get('units') ?? ''),
    cloudInitResult: parts.get('cloud-init-result') ?? '',
    texts,
  };
}

/** "unit pid" lines. */
const processesFrom = (text: string): Map<string, string> =>
  new Map(
    text
      .split('\n')
      .map((line) => line.split(' '))
      .filter((words): words is [string, string] => words.length === 2 && /^\d+$/.test(words[1]!)),
  );

/** Sets `pid` to the unit's first process, read with a builtin; empty when none runs. */
const readFirstProcess = (unit: string) => `pid=; read -r pid < ${quote(processesOf(unit))} 2>/dev/null`;

/**
 * The probe over SSH: run as root (`sudo sh -s`), printing the parts in
 * sections. Missing files and units are simply absent from the answer.
 */
export function guestProbeScript(questions: GuestQuestions): string {
  const paths = questions.paths.map(quote).join(' ');
  const lines = [
    section('stat'),
    `${commandLine([STAT_PROGRAM, ...statArguments(questions)])} 2>/dev/null`,
    section('sha256'),
    ...(questions.paths.length ? [`sha256sum -- ${paths} 2>/dev/null`] : []),
    section('units'),
    ...questions.units.map((unit) => `${readFirstProcess(unit)}; [ -n "$pid" ] && echo ${quote(unit)} "$pid"`),
    ...questions.environmentUnits.flatMap((unit) => [
      section(`environ ${unit}`),
      `${readFirstProcess(unit)}; [ -n "$pid" ] && cat "/proc/$pid/environ" 2>/dev/null; echo`,
    ]),
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
  const properties = 'Id,LoadState,UnitFileState,ActiveState,SubState,ActiveEnterTimestamp,NeedDaemonReload';
  return [
    section('systemd'),
    `${commandLine(['systemctl', 'show', '--timestamp=unix', '-p', properties, '--', ...units])} 2>/dev/null`,
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

/** The SSH probe's answer, as parts. */
export function partsFromScript(output: string): ProbeParts {
  const parts = framed(output);
  const digests = new Map<string, string>();
  for (const line of (parts.get('sha256') ?? '').split('\n')) {
    const match = /^([0-9a-f]{64}) [ *](.*)$/.exec(line);
    if (match) digests.set(match[2]!, match[1]!);
  }
  const processes = processesFrom(parts.get('units') ?? '');
  const environs = new Map(
    [...parts].flatMap(([name, text]) => (name.startsWith('environ ') ? [[name.slice('environ '.length), text] as const] : [])),
  );
  return {
    stats: parseStat(parts.get('stat') ?? ''),
    digests,
    processes,
    environs,
    cloudInitResult: parts.get('cloud-init-result') ?? '',
    cloudInitStatus: parts.get('cloud-init-status') ?? '',
  };
}

/** The SSH probe's answer as facts (factsFromParts). */
export const parseGuestProbe = (output: string, questions: GuestQuestions) => factsFromParts(partsFromScript(output), questions);

/** A process's environment, NUL-separated (the SSH probe's echo may add a newline at either end). */
function parseEnviron(raw: string): Map<string, string> {
  const variables = new Map<string, string>();
  for (const entry of raw.split('\0')) {
    const at = entry.indexOf('=');
    if (at > 0) variables.set(entry.slice(0, at).replace(/^\n/, ''), entry.slice(at + 1).replace(/\n$/, ''));
  }
  return variables;
}

/**
 * A probe's parts as facts. `units` is undefined when what the files say does not settle every
 * unit's state: then unitStateScript asks systemd, and parseUnitState reads its answer (guest/probe.ts).
 */
export function factsFromParts(
  parts: ProbeParts,
  questions: GuestQuestions,
): { facts: Omit<GuestFacts, 'units'>; units: Map<string, UnitFact> | undefined } {
  const files = new Map<string, FileFact>();
  for (const path of questions.paths) {
    const entry = parts.stats.get(path);
    // A path that stat sees but that cannot be read (a directory in its place) has no digest.
    if (entry)
      files.set(path, {
        mode: entry.mode & 0o7777,
        owner: entry.owner,
        mtime: Math.floor(entry.mtime),
        digest: parts.digests.get(path) ?? '',
      });
  }
  const environments = new Map<string, Map<string, string>>();
  for (const unit of questions.environmentUnits) {
    const variables = parseEnviron(parts.environs.get(unit) ?? '');
    if (variables.size > 0) environments.set(unit, variables);
  }
  const memberDir = parts.stats.get(memberDirOf(questions.dataDir));
  const isFile = (path: string | undefined) => {
    const entry = path === undefined ? undefined : parts.stats.get(path);
    return entry !== undefined && (entry.mode & S_IFMT) === S_IFREG;
  };
  return {
    facts: {
      files,
      environments,
      dataDirInitialized: memberDir !== undefined && (memberDir.mode & S_IFMT) === S_IFDIR,
      cloudInit: parseCloudInit(parts.cloudInitResult, parts.cloudInitStatus),
      ...(questions.releaseBinary ? { releaseInstalled: isFile(questions.releaseBinary) } : {}),
      ...(questions.stagedBinary ? { stagedInstalled: isFile(questions.stagedBinary) } : {}),
      retiredFound: new Set((questions.retired ?? []).filter((path) => parts.stats.has(path))),
      packageFilesMissing: new Set((questions.packageFiles ?? []).filter((path) => !isFile(path))),
    },
    units: unitsFromFiles(parts.processes, parts.stats, questions),
  };
}

/**
 * Every unit's state from files, or undefined unless each one runs, is enabled (its link in
 * enableLinkOf, not masked), has an invocation time, and no managed unit file is newer than
 * systemd's last reload (then NeedDaemonReload is no).
 */
export function unitsFromFiles(
  processes: ReadonlyMap<string, string>,
  stats: ReadonlyMap<string, StatEntry>,
  questions: GuestQuestions,
): Map<string, UnitFact> | undefined {
  const reloaded = stats.get(SYSTEMD_RELOADED)?.mtime;
  if (reloaded === undefined) return undefined;
  if (questions.paths.some((path) => path.startsWith('/etc/systemd/system/') && (stats.get(path)?.mtime ?? 0) >= reloaded))
    return undefined;
  const units = new Map<string, UnitFact>();
  for (const unit of questions.units) {
    const started = stats.get(invocationOf(unit))?.mtime;
    const enabled = isLink(stats.get(enableLinkOf(unit))) && !isLink(stats.get(overrideOf(unit)));
    if (!processes.has(unit) || !enabled || started === undefined) return undefined;
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
