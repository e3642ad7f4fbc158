import {
  compareVersions,
  formatVersion,
  minorOf,
  parseVersion,
  sameVersion,
  stepBetween,
  type EtcdVersion,
  type VersionStep,
} from './version.ts';
import type { V2StoreVerdict } from './v2store.ts';

/**
 * Whether etcd's version may move, decided from live facts only, before anything changes: every
 * member answers with the one leader, no alarm, no learner, at most one version besides the target
 * (a roll a killed run left half done resumes from there), a step etcd supports, and for 3.5 → 3.6
 * what etcd's 3.6 upgrade guide asks first. Each check is a verdict a dry-run shows; any failed
 * check refuses the roll, and the refusal says which and what to do.
 */

/** One member as its own etcd answers Status (hex IDs), or why it did not answer. */
export type MemberVersionAnswer =
  | { name: string; id: string; leader: string; isLearner: boolean; version: string }
  | { name: string; error: string };

export type { V2StoreVerdict } from './v2store.ts';

export interface UpgradeFacts {
  members: readonly MemberVersionAnswer[];
  /** Active alarms, as `NOSPACE on <member>`. */
  alarms: readonly string[];
  /** `/version`'s `etcdcluster` (`3.5.0`): moves only once every member runs the new minor. */
  clusterVersion: string | undefined;
  /** Asked only for a step into 3.6 (a process in every member still on 3.5): absent until asked. */
  v2store?: ReadonlyMap<string, V2StoreVerdict>;
  /**
   * The voting members' HashKV at one revision, compared (verify/consistency.ts), asked whenever a member runs
   * another version than the target: a cluster whose members hold different data is never rolled. Absent until asked.
   */
  agreement?: { agree: boolean; detail: string };
}

export interface PreflightCheck {
  name: string;
  ok: boolean;
  detail: string;
}

export type Preflight =
  | { kind: 'converged'; version: EtcdVersion; checks: PreflightCheck[] }
  | { kind: 'roll'; from: EtcdVersion; to: EtcdVersion; step: VersionStep; pending: string[]; checks: PreflightCheck[] }
  | { kind: 'refused'; reason: string; checks: PreflightCheck[] };

/**
 * The oldest 3.5 patch etcd's 3.6 upgrade guide allows to step to 3.6. The guide raised it as fixes
 * for 3.6 upgrades landed in 3.5 (3.5.20: learners promoted in v2 only; 3.5.24–3.5.26: membership in
 * snapshots, zombie members; 3.5.32: v2 WAL entries `etcdutl check v2store` now reads).
 */
export const MIN_3_5_FOR_3_6: EtcdVersion = { major: 3, minor: 5, patch: 32 };

/**
 * The oldest 3.6 patch etcd's 3.7 upgrade guide allows to step to 3.7 ("earlier 3.6 patch releases may not be
 * compatible with a rolling upgrade to 3.7"). 3.7 also drops every `--experimental-*` flag; from 3.6 on the tool
 * renders none (render/etcd-release.ts: feature gates instead), which test/unit/etcd-release-render.test.ts holds.
 */
export const MIN_3_6_FOR_3_7: EtcdVersion = { major: 3, minor: 6, patch: 11 };

type Answered = Extract<MemberVersionAnswer, { id: string }>;
const answered = (member: MemberVersionAnswer): member is Answered => !('error' in member);

/** A check that passed, as the plan's summary and a refusal list it: its name and what it saw. */
export const describePassed = (check: PreflightCheck) => `${check.name} (${check.detail})`;

const check = (name: string, failures: readonly string[], okDetail: string, whatToDo: string): PreflightCheck =>
  failures.length === 0 ? { name, ok: true, detail: okDetail } : { name, ok: false, detail: `${failures.join('; ')}: ${whatToDo}` };

/** Health, leader, alarms and learners: what any roll needs, whatever the versions. */
function clusterChecks(facts: UpgradeFacts): PreflightCheck[] {
  const members = facts.members.filter(answered);
  const leaders = new Set(members.map((member) => member.leader).filter((id) => id !== '0'));
  const leaderName = leaders.size === 1 ? members.find((member) => member.id === [...leaders][0])?.name : undefined;
  const silent = facts.members.filter((member) => !answered(member) || member.leader === '0');
  return [
    check(
      'every member healthy',
      silent.map((member) => `${member.name}: ${answered(member) ? 'no leader' : member.error}`),
      `${members.length} of ${facts.members.length} answer`,
      'bring it back first (a run without a version change starts a stopped etcd), then run again',
    ),
    check(
      'one leader',
      leaderName ? [] : [leaders.size > 1 ? `members name ${leaders.size} leaders` : 'no member of the inventory leads'],
      `${leaderName} leads`,
      'wait for an election to settle, then run again',
    ),
    check(
      'no alarm',
      facts.alarms.map((alarm) => `alarm ${alarm}`),
      'none raised',
      'clear it first (maintain --defrag, then etcdctl alarm disarm)',
    ),
    check(
      'no learner',
      members.filter((member) => member.isLearner).map((member) => `${member.name} is a learner`),
      'every member votes',
      'let the run that added it promote it (deploy), or remove it, then run again',
    ),
  ];
}

/** The one version the members run besides the target, or why there is none. */
function versionFrom(members: readonly Answered[], to: EtcdVersion): { from?: EtcdVersion; failures: string[] } {
  const others = new Map<string, EtcdVersion>();
  const failures: string[] = [];
  for (const member of members) {
    const version = parseVersion(member.version);
    if (!version) failures.push(`${member.name} reports version "${member.version}"`);
    else if (!sameVersion(version, to)) others.set(formatVersion(version), version);
  }
  if (others.size > 1) {
    const list = members.map((member) => `${member.name} ${member.version}`).join(', ');
    failures.push(`members run ${others.size} versions besides ${formatVersion(to)} (${list})`);
  }
  return { ...(others.size === 1 ? { from: [...others.values()][0]! } : {}), failures };
}

function stepCheck(from: EtcdVersion, to: EtcdVersion, step: VersionStep, clusterVersion: string | undefined): PreflightCheck {
  const name = 'a step etcd supports';
  const move = `${formatVersion(from)} → ${formatVersion(to)}`;
  if (step.kind === 'patch' || step.kind === 'minor') return { name, ok: true, detail: `${move}: a ${step.kind} step` };
  if (step.kind === 'too-far') {
    return {
      name,
      ok: false,
      detail:
        `${move} moves ${Math.abs(step.minors)} minors: etcd supports one at a time; ` +
        `set etcd.version to the latest patch of the next minor first`,
    };
  }
  // Backwards: a binary swap while the cluster version is still the target's minor (a roll undone half way).
  const cluster = clusterVersion ? parseVersion(clusterVersion) : undefined;
  if (!cluster)
    return {
      name,
      ok: false,
      detail: `${move} goes back, and the cluster version is unknown (/version did not answer): run again once it does`,
    };
  if (compareVersions({ ...cluster, patch: 0 }, { ...to, patch: 0 }) > 0) {
    return {
      name,
      ok: false,
      detail:
        `${move} goes back below the cluster version ${minorOf(cluster)}: once every member ran ${minorOf(cluster)}, ` +
        `only etcd's downgrade procedure (etcdctl downgrade, from 3.6) goes back; this tool does not run it`,
    };
  }
  return { name, ok: true, detail: `${move}: back to the cluster version ${minorOf(cluster)} (a roll undone)` };
}

/** The members not yet on the target. */
const notOn = (members: readonly Answered[], to: EtcdVersion) =>
  members.filter((member) => !sameVersion(parseVersion(member.version)!, to));

/** Every member still on the old minor at its floor patch or later, as etcd's guide for the next minor asks. */
function floorCheck(onOld: readonly Answered[], floor: EtcdVersion): PreflightCheck {
  const line = `${floor.major}.${floor.minor}`;
  const next = `${floor.major}.${floor.minor + 1}`;
  return check(
    `every member at ${formatVersion(floor)} or later`,
    onOld
      .filter((member) => compareVersions(parseVersion(member.version)!, floor) < 0)
      .map((member) => `${member.name} runs ${member.version}`),
    `${onOld.length} member(s) on ${line} at ${formatVersion(floor)}+`,
    `set etcd.version to the latest ${line} patch (at least ${formatVersion(floor)}) and run, then step to ${next}`,
  );
}

/** What etcd's 3.7 upgrade guide asks of a 3.6 cluster before its first 3.7 member. */
function into37Checks(members: readonly Answered[], to: EtcdVersion): PreflightCheck[] {
  return [floorCheck(notOn(members, to), MIN_3_6_FOR_3_7)];
}

/** What etcd's 3.6 upgrade guide asks of a 3.5 cluster before its first 3.6 member. */
function into36Checks(members: readonly Answered[], to: EtcdVersion, facts: UpgradeFacts): PreflightCheck[] {
  const onOld = notOn(members, to);
  const v2 = onOld.map((member) => ({ member, verdict: facts.v2store?.get(member.name) }));
  return [
    floorCheck(onOld, MIN_3_5_FOR_3_6),
    check(
      'etcdutl check v2store clean',
      v2.flatMap(({ member, verdict }) =>
        verdict === undefined
          ? [`${member.name}: not checked`]
          : 'unchecked' in verdict
            ? [`${member.name}: not checked (${verdict.unchecked})`]
            : verdict.clean
              ? []
              : [`${member.name}: ${verdict.detail}`],
      ),
      `no custom data in the v2 store of ${onOld.map((member) => member.name).join(', ')}`,
      v2.some(({ verdict }) => verdict !== undefined && 'clean' in verdict && !verdict.clean)
        ? "remove it as etcd's 3.6 upgrade guide says (a restart with --snapshot-count=1), then run again"
        : 'the check runs the etcdutl of the release each member runs (binaries: release); run again once it can',
    ),
  ];
}

/** The pre-flight verdict: converged, a roll (with the members still to roll, in inventory order), or refused. */
export function preflight(facts: UpgradeFacts, to: EtcdVersion): Preflight {
  const checks = clusterChecks(facts);
  const members = facts.members.filter(answered);
  const { from, failures } = versionFrom(members, to);
  // No running member is on another version: nothing moves. A member that does not answer is not
  // running; starting it (on the target, as rendered) is the guest step's, as after a power cut.
  if (failures.length === 0 && !from) {
    return {
      kind: 'converged',
      version: to,
      checks: [...checks, { name: 'one version', ok: true, detail: `every member that answers runs ${formatVersion(to)}` }],
    };
  }
  const rolled = members.filter((member) => member.version === formatVersion(to)).length;
  checks.push(
    check(
      'one version',
      failures,
      from ? `${formatVersion(from)}${rolled > 0 ? ` (${rolled} already on ${formatVersion(to)})` : ''}` : 'none besides the target',
      'bring every member to one of them first',
    ),
  );
  if (from) {
    const step = stepBetween(from, to);
    checks.push(stepCheck(from, to, step, facts.clusterVersion));
    checks.push(
      check(
        'the members agree',
        facts.agreement === undefined ? ['not compared'] : facts.agreement.agree ? [] : [facts.agreement.detail],
        facts.agreement?.detail ?? '',
        'find the member whose data differs (etcd-kvm verify) and mend it (deploy --replace NAME), then run again',
      ),
    );
    if (step.kind === 'minor' && minorOf(to) === '3.6') checks.push(...into36Checks(members, to, facts));
    if (step.kind === 'minor' && minorOf(to) === '3.7') checks.push(...into37Checks(members, to));
    const failed = checks.filter((verdict) => !verdict.ok);
    if (failed.length === 0) {
      const pending = members.filter((member) => !sameVersion(parseVersion(member.version)!, to)).map((member) => member.name);
      return { kind: 'roll', from, to, step, pending, checks };
    }
  }
  const failed = checks.filter((verdict) => !verdict.ok);
  const passed = checks.filter((verdict) => verdict.ok).map(describePassed);
  const reason = [
    ...failed.map((verdict) => `${verdict.name}: ${verdict.detail}`),
    ...(passed.length ? [`passed: ${passed.join('; ')}`] : []),
  ];
  return { kind: 'refused', reason: reason.join('\n'), checks };
}
