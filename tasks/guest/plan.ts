import { sha256 } from '../core/digest.ts';
import type { Change, RollKind } from '../core/step.ts';
import type { DesiredGuest, ManagedFile } from '../render/guest/desired.ts';
import { parseEnvironmentFile } from '../render/etcd.ts';
import type { GuestService } from '../render/guest/fragment.ts';
import { formatVersion } from '../upgrade/version.ts';
import type { GuestRelease } from '../render/etcd-release.ts';
import { enableLinkOf, overrideOf, type GuestFacts } from './facts.ts';

/**
 * The guest step's decisions, pure: the member's desired contents and its facts in, the changes out,
 * in the order they apply — files, then systemd's view of units, then services. A service is
 * restarted when a file it reads changed after it started (in this run or one that was killed
 * before its restart), or when its running environment is not its EnvironmentFile's.
 */

export type GuestAction =
  | { kind: 'write'; file: ManagedFile }
  | { kind: 'attributes'; file: Pick<ManagedFile, 'path' | 'mode' | 'owner'> }
  | { kind: 'daemon-reload' }
  | { kind: 'enable'; unit: string }
  /** A turned-off task's units stopped (a run of its service cut short), before their files go. */
  | { kind: 'stop'; units: string[] }
  | { kind: 'remove'; path: string }
  /**
   * `configChanged`: this plan writes a file the service reads. A unit systemd restarts by itself
   * (Restart=on-failure) can come up between the probe and the start, still with the old files:
   * `systemctl start` would leave it so, `systemctl restart` starts it either way with the new ones.
   */
  | { kind: 'start'; service: GuestService; configChanged: boolean }
  /** `rollback`: the files kept before this plan wrote them, put back if the service does not come back (binaries: release). */
  | { kind: 'restart'; service: GuestService; why: string; rollback?: string[] }
  /** etcd's release unpacked into its own directory, from the control node's verified archive: etcd keeps running. */
  | { kind: 'install-release'; release: GuestRelease }
  /** Copies of files about to be written, kept in the guest (PREVIOUS_DIR) for a rollback. */
  | { kind: 'keep-previous'; paths: string[] }
  /** Debian packages the member's programs need and its image lacks, installed with apt (install_dependencies). */
  | { kind: 'install-packages'; packages: string[] };

export type GuestChange = Change<GuestAction>;

export interface GuestPlanContext {
  /** A health probe found a formed cluster before this run (see pipeline: clusterFormed). */
  clusterFormed: boolean;
  /** Current content of drifted files that hold no secret, for diffs; not read (no diff for an update) when the run shows none. */
  currentContent?: ReadonlyMap<string, string>;
}

export class RefusedError extends Error {}

/** A file mode as chmod and a plan's summary write it: 0644. */
export const octal = (mode: number) => mode.toString(8).padStart(4, '0');
// Unit files and drop-ins, persistent or runtime: systemd reads either only when reloaded.
const SYSTEMD_DIR = /^\/(etc|run)\/systemd\/system\//;
/** A unit file systemd reads only when told to reload. */
export const isUnitFile = (path: string) => SYSTEMD_DIR.test(path);
const RUNNING = new Set(['active', 'activating', 'reloading']);

/** Files whose content differs from what is wanted (absent included): their current text is worth fetching for a diff. */
export function driftedContent(desired: DesiredGuest, facts: GuestFacts): ManagedFile[] {
  return desired.files.filter((file) => facts.files.get(file.path)?.digest !== sha256(file.content));
}

/** Where a guest keeps the files a roll replaced, under their own paths, until the next roll. */
export const PREVIOUS_DIR = '/var/lib/etcd-kvm/previous';

export function planGuest(desired: DesiredGuest, facts: GuestFacts, context: GuestPlanContext): GuestChange[] {
  const changes = [...planPackages(desired, facts), ...planContents(desired, facts, context)];
  if (!desired.release) return changes;
  const install: GuestChange[] =
    facts.releaseInstalled === false
      ? [
          {
            summary:
              `install etcd ${formatVersion(desired.release.version)} into ${desired.release.dir} ` +
              `(its release archive, verified on the control node and again in the guest)`,
            action: { kind: 'install-release', release: desired.release },
          },
        ]
      : [];
  const stage: GuestChange[] =
    desired.staged && facts.stagedInstalled === false
      ? [
          {
            summary:
              `stage etcd ${formatVersion(desired.staged.version)} into ${desired.staged.dir}, ` +
              `not run (etcd.stage_version: a roll to it then only restarts)`,
            action: { kind: 'install-release', release: desired.staged },
          },
        ]
      : [];
  // Staged before the roll's turn: an archive that cannot be had stops the run before this member restarts.
  return [...install, ...stage, ...withRollback(changes, facts)];
}

/**
 * The Debian packages the member's programs need (DesiredGuest.packages): none missing, nothing; missing, installed
 * first (before the files and timers that would run without them) with install_dependencies, and otherwise refused
 * by name: a member whose image lacks them would get timers that fail at every tick.
 */
function planPackages(desired: DesiredGuest, facts: GuestFacts): GuestChange[] {
  const missing = desired.packages.needed.filter((need) => facts.packageFilesMissing.has(need.path));
  if (missing.length === 0) return [];
  const names = missing.map((need) => need.name);
  if (!desired.packages.install)
    throw new RefusedError(
      `the image lacks ${missing.map((need) => `${need.name} (${need.path} is not there; ${need.why})`).join(' and ')}. ` +
        `Install ${names.join(' ')} in the member's image (apt-get install ${names.join(' ')}), ` +
        `or set the member's install_dependencies: true to have the tool install them.`,
    );
  return [
    {
      summary: `install ${names.join(', ')} from Debian (${missing.map((need) => need.why).join('; ')})`,
      action: { kind: 'install-packages', packages: names },
    },
  ];
}

/**
 * With release binaries, a restart of a rolling service (etcd) after its unit or environment changed
 * can be undone: the files it replaces are kept first, and put back if it does not come back healthy
 * on what was written (a new version that will not start, a setting it refuses).
 */
function withRollback(changes: GuestChange[], facts: GuestFacts): GuestChange[] {
  const restart = changes.find((change) => change.action.kind === 'restart' && change.action.service.rolling);
  if (restart?.action.kind !== 'restart') return changes;
  const { service } = restart.action;
  const reads = (change: GuestChange) =>
    change.action.kind === 'write' &&
    facts.files.has(change.action.file.path) &&
    (change.action.file.notify === service.unit || change.action.file.path === service.environment?.path);
  const kept = changes.filter(reads).map((change) => (change.action as Extract<GuestAction, { kind: 'write' }>).file.path);
  if (kept.length === 0) return changes;
  const first = changes.findIndex(reads);
  const keep: GuestChange = {
    summary: `keep the current ${kept.join(', ')} for a rollback`,
    action: { kind: 'keep-previous', paths: kept },
  };
  const withPaths = changes.map((change) =>
    change === restart ? { ...change, action: { ...restart.action, rollback: kept } as GuestAction } : change,
  );
  return [...withPaths.slice(0, first), keep, ...withPaths.slice(first)];
}

function planContents(desired: DesiredGuest, facts: GuestFacts, context: GuestPlanContext): GuestChange[] {
  if (context.clusterFormed && !facts.dataDirInitialized) {
    throw new RefusedError(
      `etcd's data directory ${desired.dataDir} holds no member data, ` +
        `but the cluster has formed: starting etcd here would found a second, empty cluster ` +
        '(or fail to join). Replace it: deploy --replace <this member> removes it from ' +
        'the cluster and joins it again as a learner, with its data from the cluster.',
    );
  }
  const changes: GuestChange[] = [];
  const changedPaths = new Set<string>();
  for (const file of desired.files) {
    const fact = facts.files.get(file.path);
    const label = file.path;
    // A secret's content is never shown, before or after: the summary says what changes.
    const diff = (before: string) => (file.secret ? {} : { diff: { label, before, after: file.display } });
    if (!fact) {
      changes.push({
        summary: `create ${file.path} (${octal(file.mode)} ${file.owner}${file.secret ? ', secret: content not shown' : ''})`,
        ...diff(''),
        action: { kind: 'write', file },
      });
      changedPaths.add(file.path);
      continue;
    }
    const wrong: string[] = [];
    if (fact.mode !== file.mode) wrong.push(`mode ${octal(fact.mode)} → ${octal(file.mode)}`);
    if (fact.owner !== file.owner) wrong.push(`owner ${fact.owner} → ${file.owner}`);
    if (fact.digest !== sha256(file.content)) {
      const notes = [...wrong, ...(file.secret ? ['secret: content not shown'] : [])];
      changes.push({
        summary: `update ${file.path}${notes.length ? ` (${notes.join(', ')})` : ''}`,
        ...(context.currentContent ? diff(context.currentContent.get(file.path) ?? '') : {}),
        action: { kind: 'write', file },
      });
      changedPaths.add(file.path);
    } else if (wrong.length > 0) {
      changes.push({ summary: `fix ${file.path}: ${wrong.join(', ')}`, action: { kind: 'attributes', file } });
    }
  }

  changes.push(...directoryFixes(desired, facts));
  changes.push(...retirements(desired, facts));
  for (const change of changes) if (change.action.kind === 'remove') changedPaths.add(change.action.path);

  const units = desired.services.map((service) => ({ service, fact: facts.units.get(service.unit) }));
  const unitFilesChanged = [...changedPaths].some(isUnitFile);
  if (unitFilesChanged || units.some(({ fact }) => fact?.needsDaemonReload)) {
    changes.push({ summary: 'reload systemd (unit files changed)', action: { kind: 'daemon-reload' } });
  }
  for (const { service, fact } of units) {
    if (!fact?.enabled.startsWith('enabled'))
      changes.push({
        summary: `enable ${service.unit}${fact?.enabled ? ` (was ${fact.enabled})` : ''}`,
        action: { kind: 'enable', unit: service.unit },
      });
    if (!fact || !RUNNING.has(fact.active) || fact.sub === 'auto-restart') {
      const configChanged = desired.files.some(
        (file) => changedPaths.has(file.path) && (file.notify === service.unit || file.path === service.environment?.path),
      );
      changes.push({
        summary: `start ${service.unit} (was ${fact ? [fact.active, fact.sub].filter(Boolean).join('/') : 'unknown'})`,
        action: { kind: 'start', service, configChanged },
      });
      continue;
    }
    const why = staleness(service, desired, facts, changedPaths);
    if (why)
      changes.push({
        summary: `${service.onChange} ${service.unit}${service.rolling ? ' (one member at a time)' : ''}: ${why}`,
        action: { kind: 'restart', service, why },
      });
  }
  return changes;
}

/** A managed directory whose owner or mode is not the wanted one, fixed; one that is not there yet a write makes as wanted. */
function directoryFixes(desired: DesiredGuest, facts: GuestFacts): GuestChange[] {
  return desired.directories.flatMap((directory) => {
    const fact = facts.files.get(directory.path);
    if (!fact) return [];
    const wrong = [
      ...(fact.mode !== directory.mode ? [`mode ${octal(fact.mode)} → ${octal(directory.mode)}`] : []),
      ...(fact.owner !== directory.owner ? [`owner ${fact.owner} → ${directory.owner}`] : []),
    ];
    return wrong.length === 0
      ? []
      : [{ summary: `fix directory ${directory.path}: ${wrong.join(', ')}`, action: { kind: 'attributes' as const, file: directory } }];
  });
}

/**
 * What a task turned off left behind: its units stopped while their files are there (a killed run that
 * removed them has stopped them already), then every file and enable link of it removed.
 */
function retirements(desired: DesiredGuest, facts: GuestFacts): GuestChange[] {
  const found = (path: string) => facts.retiredFound.has(path);
  const running = desired.retired.units.filter((unit) => found(overrideOf(unit)));
  const leftovers = [...desired.retired.paths, ...desired.retired.units.map(enableLinkOf)].filter(found);
  return [
    ...(running.length > 0
      ? [{ summary: `stop ${running.join(', ')} (turned off in the inventory)`, action: { kind: 'stop' as const, units: running } }]
      : []),
    ...leftovers.map((path) => ({
      summary: `remove ${path} (${desired.retired.why?.[path] ?? 'turned off in the inventory'})`,
      action: { kind: 'remove' as const, path },
    })),
  ];
}

/** Why a running service does not run what is wanted, or undefined when it does. */
function staleness(service: GuestService, desired: DesiredGuest, facts: GuestFacts, changedPaths: ReadonlySet<string>): string | undefined {
  const reasons: string[] = [];
  const started = facts.units.get(service.unit)?.startedAt;
  for (const file of desired.files.filter((f) => f.notify === service.unit)) {
    if (changedPaths.has(file.path)) reasons.push(`${file.path} changes`);
    else if (started !== undefined && (facts.files.get(file.path)?.mtime ?? 0) > started)
      reasons.push(`${file.path} changed after it started`);
  }
  if (service.environment) {
    const running = facts.environments.get(service.unit);
    const file = desired.files.find((f) => f.path === service.environment!.path);
    // No process to read yet (systemd's own Restart= starting it this moment, from the file as it was):
    // what it will run with is unknown, so a changed file restarts it rather than leaving it to chance.
    if (!running && changedPaths.has(service.environment.path))
      reasons.push(`${service.environment.path} changes and what it runs with could not be read`);
    if (running && file) {
      const ignored = new Set(service.environment.ignore);
      const wanted = parseEnvironmentFile(file.content);
      // A variable dropped from the file (ETCD_TRUSTED_CA_FILE in password mode) still runs until a restart.
      const families = new Set([...wanted.keys()].map((key) => key.split('_')[0]));
      const keys = new Set([
        ...wanted.keys(),
        ...[...running.keys()].filter((key) => families.has(key.split('_')[0]) && key.includes('_')),
      ]);
      const differing = [...keys].filter((key) => !ignored.has(key) && running.get(key) !== wanted.get(key));
      if (differing.length > 0) reasons.push(`running with other ${differing.join(', ')}`);
    }
  }
  return reasons.length > 0 ? reasons.join('; ') : undefined;
}

/** Where a member's plan stands in a roll: only what it does to a rolling service (etcd) counts. */
export function rollKindOf(changes: readonly GuestChange[]): RollKind {
  const rolling = changes.flatMap(({ action }) =>
    (action.kind === 'restart' || action.kind === 'start') && action.service.rolling ? [action.kind] : [],
  );
  if (rolling.includes('restart')) return 'restarts';
  return rolling.includes('start') ? 'starts' : 'keeps-running';
}
