import { InputError } from '../core/errors.ts';
import type { Departure } from '../etcd/departures.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import { type CaRotation, ROTATION_STAGE_DOC, rotatedCas, rotationAhead, type RotationTarget } from '../pki/ca-rotation.ts';
import { nextPeerStage, type PeerTrustStage } from '../pki/peer-trust.ts';
import type { ImageChange, Pass, PlannedPhase } from '../steps/deploy-step.ts';
import { CONVERGE_STEPS, type ConvergeStep, SELECTABLE_STEPS, type StepId } from '../steps/registry.ts';

export type { ImageChange, Pass, PlannedPhase };

/**
 * The deploy as data: from the inventory, the run's options and what the gather stage learned (an
 * immutable record), the ordered phases the run takes. Pure, so `deploy --list-phases` prints it and
 * decision tables test it; deploy/execute.ts runs it.
 */

/** What the gather stage learned, before anything changes. */
export interface DeployRecord {
  /** Had the cluster formed before this run (etcd answered with a leader, or formed.json says so)? */
  formed: boolean;
  /** etcd's voting members the inventory lists: everyone, unless members are still to join. */
  voting: readonly string[];
  /** Members new to the formed cluster, in the order they join. */
  joiners: readonly string[];
  /** Members to replace or marked absent, in the order they leave (members known down first). */
  departures: readonly { departure: Departure; member: string }[];
  /** The peer port's stage the members run now (pki/peer-trust.json), or none recorded. */
  peerStage: PeerTrustStage | undefined;
  /** A CA rotation under way (pki/ca-rotation.json), or none. */
  caRotation?: CaRotation;
  /** Members whose OS disk was built from another image than base_image, in the order they are rebuilt (the leader last). */
  rebuilds: readonly ImageChange[];
}

export interface PlanOptions {
  dryRun: boolean;
  renderOnly?: string;
  limit?: readonly string[];
  /** --rotate-ca: start a CA rotation, or move the one under way on. */
  rotateCa?: RotationTarget;
  tags?: readonly string[];
  skipTags?: readonly string[];
}

const NOT_SELECTED = 'not selected by --tags / --skip-tags';

export const selectedBy = (options: Pick<PlanOptions, 'tags' | 'skipTags'>) => (step: StepId) =>
  (options.tags ? options.tags.includes(step) : true) && !(options.skipTags ?? []).includes(step);

/** `--tags` / `--skip-tags` name only selectable steps, and at least one each. */
export function validateTags(options: Pick<PlanOptions, 'tags' | 'skipTags'>): void {
  const hint = `steps are ${SELECTABLE_STEPS.join(', ')} (the others always run: deploy --help lists them)`;
  for (const [flag, names] of [
    ['--tags', options.tags],
    ['--skip-tags', options.skipTags],
  ] as const) {
    // `--tags ,` would select nothing and run none of the steps without a word.
    if (names?.length === 0) throw new InputError(`${flag} names no step; ${hint}`);
    const unknown = (names ?? []).filter((name) => !(SELECTABLE_STEPS as readonly string[]).includes(name));
    if (unknown.length > 0) throw new InputError(`${flag} names unknown steps: ${unknown.join(', ')}; ${hint}`);
  }
}

export function selectMembers(inventory: Inventory, limit: readonly string[] | undefined): Member[] {
  if (!limit) return inventory.members;
  const unknown = limit.filter((name) => !inventory.members.some((member) => member.name === name));
  if (unknown.length > 0)
    throw new InputError(
      `--limit names unknown members: ${unknown.join(', ')}; members are ${inventory.members.map((m) => m.name).join(', ')}`,
    );
  return inventory.members.filter((member) => limit.includes(member.name));
}

/**
 * Which of a pass's converge phases: all of them, those that make and start a joiner's VM before its turn,
 * or those that run in its turn once it is a learner (its guest).
 */
type ConvergePart = 'whole' | 'to-boot' | 'once-added';

/** What every part of the plan reads besides its own arguments: the inventory, the steps the run selected, and those a joiner needs. */
interface PlanScope {
  inventory: Inventory;
  selected(step: StepId): boolean;
  neededToJoin: readonly StepId[];
}

/** Whether a pass has a converge step's phase (its rule's `inPass`; absent, every pass has it). */
const convergeIn = (step: ConvergeStep, pass: Pass, inventory: Inventory): boolean | string =>
  step.converge.inPass?.(pass, inventory) ?? true;

/** The converge steps' phases over one pass's members, in the registry's order (owner, volumes, … guest). */
function convergePhases(scope: PlanScope, pass: Pass, part: ConvergePart = 'whole'): PlannedPhase[] {
  return CONVERGE_STEPS.flatMap((step): PlannedPhase[] => {
    if (part !== 'whole' && (part === 'once-added') !== (step.converge.onceAdded === true)) return [];
    const has = convergeIn(step, pass, scope.inventory);
    if (has === false) return [];
    if (typeof has === 'string') return [{ step: step.id, pass, note: has }];
    return [{ step: step.id, pass, ...(step.selectable && !scope.selected(step.id) ? { skip: NOT_SELECTED } : {}) }];
  });
}

/** The steps a member joining needs, without any of which it cannot run: the selectable converge steps of its pass. */
function neededToJoin(inventory: Inventory): StepId[] {
  const joining = joinPass('', [], false);
  return CONVERGE_STEPS.filter((step) => step.selectable && convergeIn(step, joining, inventory) === true).map((step) => step.id);
}

const checkedPhase = (step: 'health' | 'auth' | 'users', pass: Pass, selected: (step: StepId) => boolean): PlannedPhase => ({
  step,
  pass,
  ...(selected(step) ? {} : { skip: NOT_SELECTED }),
});

/** The pass a joiner joins in: beside the members before it, its own disks and empty data expected. */
const joinPass = (joiner: string, before: readonly string[], bootedAhead: boolean): Pass => ({
  cluster: [...before, joiner],
  members: [joiner],
  joining: true,
  formed: true,
  ...(bootedAhead ? { bootedAhead: true as const } : {}),
});

/** A joiner's VM made and started: its seed, disks and domain, up to its first boot. */
const bootPhases = (pass: Pass, scope: PlanScope): PlannedPhase[] => [{ step: 'render', pass }, ...convergePhases(scope, pass, 'to-boot')];

/**
 * One joiner, strictly after those before: a learner, its VM and guest, promoted, and the cluster healthy.
 * `bootedAhead`: its VM was made and started before the joins (bootAheadPhases), so its turn adds it, then
 * converges its guest (which starts its etcd, waiting until then) and promotes it.
 */
function joinPhases(
  joiner: string,
  before: readonly string[],
  earlierJoiners: readonly string[],
  selection: readonly string[],
  scope: PlanScope,
  bootedAhead: boolean,
): PlannedPhase[] {
  const pass = joinPass(joiner, before, bootedAhead);
  const phases: PlannedPhase[] = [
    { step: 'join', member: joiner, before },
    ...(bootedAhead ? [] : bootPhases(pass, scope)),
    ...convergePhases(scope, pass, 'once-added'),
    { step: 'promote', member: joiner, before },
    checkedPhase('health', { ...pass, members: selection.filter((name) => pass.cluster.includes(name)) }, scope.selected),
  ];
  // Strictly one after another: a joiner whose join failed stops the joins after it.
  return phases.map((phase) => ({ ...phase, needsJoined: [...earlierJoiners, joiner] }));
}

/**
 * The joiners after the first, booted before any joins: a first boot is the longest part of a join under
 * emulation (1.5–2 minutes on the lab), and each one's boots while those before it join. etcd accepts one
 * learner at a time, so each is still added, started and promoted strictly after the one before it; until
 * the cluster has added it, its etcd exits at start (not a member: nothing is written but an empty database)
 * and systemd starts it again every RestartSec. Each is rendered in the pass it joins in, so its seed and
 * its turn's guest are the same.
 */
function bootAheadPhases(joiners: readonly string[], voting: readonly string[], scope: PlanScope): PlannedPhase[] {
  return joiners.slice(1).flatMap((joiner, i) =>
    bootPhases(joinPass(joiner, [...voting, ...joiners.slice(0, i + 1)], true), scope).map((phase) => ({
      ...phase,
      bootedAheadOf: joiners[i]!,
    })),
  );
}

/** The steps a rebuild needs after it: the new OS disk's guest converged, and its etcd healthy. */
const NEEDED_AFTER_REBUILD: readonly StepId[] = ['guest', 'health'];

/**
 * Each member built from another image, strictly one after another, only while nothing has failed
 * in the run. With a data disk: the new OS disk, its guest (the files and the etcd release the image
 * lacks), then its etcd healthy and caught up with the leader. Without one: replaced as --replace
 * does (leaves the cluster, its VM and disks go, it joins again on the new image as a learner and is
 * promoted), the cluster healthy before the next member goes.
 */
function rebuildPhases(record: DeployRecord, selection: readonly string[], scope: PlanScope): PlannedPhase[] {
  const rebuilds = record.rebuilds.filter(({ member }) => selection.includes(member));
  if (rebuilds.length === 0 || !scope.selected('rebuild')) return [];
  const needed = (change: ImageChange) => (change.how === 'replace' ? scope.neededToJoin : NEEDED_AFTER_REBUILD);
  const missing = (change: ImageChange) => needed(change).filter((step) => !scope.selected(step));
  return rebuilds.flatMap((change): PlannedPhase[] => {
    const lacking = missing(change);
    if (lacking.length > 0)
      return [
        {
          step: 'rebuild',
          ...change,
          skip: `a ${change.how === 'replace' ? 'replacement' : 'rebuild'} needs the steps ${lacking.join(', ')} after it`,
        },
      ];
    if (change.how === 'replace') {
      // A learner already in the cluster would keep the next one out (etcd takes one at a time), and a
      // departure's quorum is judged on the members it expects to stay: each waits for the other.
      if (record.joiners.length > 0 || record.departures.length > 0)
        return [{ step: 'rebuild', ...change, skip: 'waits for the members joining or leaving in this run: the next run replaces it' }];
      // The only voter cannot leave: the rebuild step refuses it, saying so.
      if (record.voting.length < 2) return [{ step: 'rebuild', ...change, onlyIfClean: true }];
      return imageReplacementPhases(record, change, selection, scope);
    }
    const pass: Pass = { cluster: record.voting, members: [change.member], joining: false, formed: true };
    return [
      { step: 'rebuild', ...change, onlyIfClean: true },
      { step: 'render', pass, onlyIfClean: true },
      { step: 'guest', pass, onlyIfClean: true },
      { step: 'health', pass, caughtUp: true, onlyIfClean: true },
    ];
  });
}

/** A member without a data disk onto its new image: it departs as a replacement, then joins again as a joiner does. */
function imageReplacementPhases(record: DeployRecord, change: ImageChange, selection: readonly string[], scope: PlanScope): PlannedPhase[] {
  const before = record.voting.filter((name) => name !== change.member);
  return [
    { step: 'depart', departure: 'replace', member: change.member, assumedRemoved: [], image: change, onlyIfClean: true },
    ...joinPhases(change.member, before, [], selection, scope, false).map((phase) => ({ ...phase, onlyIfClean: true as const })),
  ];
}

/** The peer port's stages still to go, each rolled over the main pass once every member runs the one before. */
function peerTrustPhases(record: DeployRecord, main: Pass, options: PlanOptions, selected: (step: StepId) => boolean): PlannedPhase[] {
  if (options.limit || !selected('guest') || !selected('health') || record.peerStage === undefined || !record.formed) return [];
  const ahead: PeerTrustStage[] = [];
  for (let next = nextPeerStage(record.peerStage); next; next = nextPeerStage(next)) ahead.push(next);
  if (ahead.length === 0) return [];
  // A dry-run shows the first stage's changes only (the later ones need the record the run writes): it says what follows.
  if (options.dryRun) {
    const note =
      `members run ${record.peerStage} after this pass; the run then moves them on ` +
      `to ${ahead.join(', then ')}, each rolled once every member runs the stage before`;
    return [{ step: 'peer-trust', stage: ahead[0]!, note }];
  }
  const stagePass: Pass = { ...main, formed: true };
  return ahead.flatMap((stage): PlannedPhase[] => [
    { step: 'peer-trust', stage, onlyIfClean: true },
    { step: 'render', pass: stagePass, onlyIfClean: true },
    { step: 'cloud-init', pass: stagePass, onlyIfClean: true, ...(selected('cloud-init') ? {} : { skip: NOT_SELECTED }) },
    { step: 'guest', pass: stagePass, onlyIfClean: true },
    { step: 'health', pass: stagePass, onlyIfClean: true },
  ]);
}

/**
 * A CA rotation's stages this run takes (pki/ca-rotation.ts `rotationAhead`), each rolled over the main pass as the
 * peer port's are, then its end. A run without --rotate-ca holds the recorded stage (its main pass renders it) and says so.
 */
function caRotationPhases(record: DeployRecord, main: Pass, options: PlanOptions, selected: (step: StepId) => boolean): PlannedPhase[] {
  const ahead = rotationAhead(record.caRotation, options.rotateCa);
  if (!ahead) return [];
  const { target, from } = ahead;
  if (ahead.stages.length === 0 && !ahead.finishes)
    return [
      {
        step: 'ca-rotation',
        target,
        stage: 'held',
        note: `the rotation of ${rotatedCas(target)} waits at ${from}: deploy --rotate-ca ${target} goes on`,
      },
    ];
  if (!record.formed)
    throw new InputError(`--rotate-ca ${target}: the cluster has not formed yet, so there is no CA in use to rotate; deploy it first`);
  const ending = ahead.finishes
    ? 'the old CA deleted'
    : `the run pauses for applications to take their new bundles; deploy --rotate-ca ${target} goes on`;
  const steps = [...ahead.stages.map((stage) => `${stage} (${ROTATION_STAGE_DOC[stage]})`), ending];
  const what = `${from ? 'go on rotating' : 'rotate'} ${rotatedCas(target)}${from ? ` from ${from}` : ''}`;
  // A dry-run shows no stage's changes (each needs the record the one before writes): it says what follows.
  if (options.dryRun)
    return [{ step: 'ca-rotation', target, stage: ahead.stages[0] ?? 'finish', note: `${what}: ${steps.join(', then ')}` }];
  const stagePass: Pass = { ...main, formed: true };
  return [
    ...ahead.stages.flatMap((stage): PlannedPhase[] => [
      { step: 'ca-rotation', target, stage, onlyIfClean: true },
      { step: 'render', pass: stagePass, onlyIfClean: true },
      { step: 'cloud-init', pass: stagePass, onlyIfClean: true, ...(selected('cloud-init') ? {} : { skip: NOT_SELECTED }) },
      { step: 'guest', pass: stagePass, onlyIfClean: true },
      { step: 'health', pass: stagePass, onlyIfClean: true },
    ]),
    ...(ahead.finishes ? [{ step: 'ca-rotation' as const, target, stage: 'finish' as const, onlyIfClean: true as const }] : []),
  ];
}

/**
 * First of all: the CA, the certificates and the cluster's ID. It runs before the gather stage (the
 * clients etcd is asked through need its certificates), so a listed plan shows it done.
 */
export const PKI_PHASE: PlannedPhase = { step: 'pki' };

/** The gather stage's departures this run takes, in order: members marked absent only in a run over the whole inventory. */
function departurePhases(record: DeployRecord, selection: readonly string[], options: PlanOptions): PlannedPhase[] {
  const departures = record.departures.filter(({ departure, member }) =>
    departure === 'replace' ? selection.includes(member) : !options.limit,
  );
  // A dry-run applies no departure: each one after the first is judged as if those before it were done.
  return departures.map(({ departure, member }, i) => ({
    step: 'depart',
    departure,
    member,
    assumedRemoved: options.dryRun ? departures.slice(0, i).map((d) => d.member) : [],
  }));
}

/** The joiners after the first booted ahead, then each joiner strictly after those before it. */
function joinsOf(record: DeployRecord, joiners: readonly string[], selection: readonly string[], scope: PlanScope) {
  return [
    ...bootAheadPhases(joiners, record.voting, scope),
    ...joiners.flatMap((joiner, i) =>
      joinPhases(joiner, [...record.voting, ...joiners.slice(0, i)], joiners.slice(0, i), selection, scope, i > 0),
    ),
  ];
}

/**
 * `formed`, when the cluster forms in this run, members join, or a member is replaced on a new image (a new VM
 * too: formed.json and the rendered record learn of it once every replacement went through).
 */
function settlePhases(
  inventory: Inventory,
  record: DeployRecord,
  after: { joins: readonly PlannedPhase[]; rebuilding: readonly PlannedPhase[] },
  selection: readonly string[],
  options: PlanOptions,
): PlannedPhase[] {
  const selected = selectedBy(options);
  const replacedOnImage = after.rebuilding.some((phase) => phase.step === 'depart');
  if (record.formed && after.joins.length === 0 && !replacedOnImage) return [];
  const everyone: Pass = { cluster: inventory.members.map((member) => member.name), members: selection, joining: false, formed: true };
  // A dry-run neither forms the cluster nor adds a member: there is nothing yet to render as existing.
  const dryNote = options.dryRun ? { note: record.formed ? 'a dry-run adds no member' : 'a dry-run forms nothing' } : {};
  // After replacements onto a new image: only if each went through (a failed one is a replacement or a joiner to the next run).
  const onlyAfterReplacements = record.formed && after.joins.length === 0 ? { onlyIfClean: true as const } : {};
  return [
    {
      step: 'formed',
      pass: everyone,
      seeds: selected('cloud-init'),
      guests: selected('guest'),
      formedBefore: record.formed,
      ...dryNote,
      ...onlyAfterReplacements,
    },
  ];
}

/**
 * With release binaries on a formed cluster, a roll of etcd's version: its pre-flight first of all, so that a
 * refusal leaves everything as it was (the seeds and the rendered record name the version too), and its end,
 * the cluster version moved, after the health wait (it moves only once every member runs the new minor).
 */
function rollPhases(inventory: Inventory, record: DeployRecord, main: Pass, options: PlanOptions) {
  if (inventory.etcd.binaries !== 'release' || !record.formed) return { upgrade: [], clusterVersion: [] };
  const noRoll = selectedBy(options)('guest') ? {} : { skip: 'the guest step, which rolls the version, is not selected' };
  const partial = options.limit ? { skip: 'a run limited to some members may leave others on the previous minor' } : {};
  return {
    upgrade: [{ step: 'upgrade', pass: main, ...noRoll }] satisfies PlannedPhase[],
    clusterVersion: [{ step: 'cluster-version', pass: main, ...noRoll, ...partial }] satisfies PlannedPhase[],
  };
}

/** auth and users, from the member that bootstraps auth when the run includes it. */
function accessPhases(inventory: Inventory, record: DeployRecord, main: Pass, selected: (step: StepId) => boolean): PlannedPhase[] {
  const bootstrap = inventory.members.filter((member) => member.bootstrapsAuth).map((member) => member.name);
  const pass = { ...main, members: main.members.filter((name) => bootstrap.includes(name)) };
  // No auth change while a roll of etcd's version may be left half done: members of two versions
  // (3.4 and 3.5 write auth's WAL entries differently, etcd's 3.5 upgrade guide) after a failed step.
  const authFreeze = inventory.etcd.binaries === 'release' && record.formed ? { onlyIfClean: true as const } : {};
  return [
    { ...checkedPhase('auth', pass, selected), ...authFreeze },
    { ...checkedPhase('users', pass, selected), ...authFreeze },
  ];
}

/**
 * The phases in order: pki (run before the gather stage), the upgrade's pre-flight, departures, then render and
 * converge the members etcd has, health, auth and users, rebuilds, the joiners after the first booted, each
 * joiner one after another, `formed` when the cluster formed in this run or members joined, then the peer port's
 * stages still to go, and the members' comparison.
 */
export function buildPlan(inventory: Inventory, options: PlanOptions, record: DeployRecord): PlannedPhase[] {
  const selected = selectedBy(options);
  const selection = selectMembers(inventory, options.limit).map((member) => member.name);
  const main: Pass = {
    cluster: record.voting,
    members: selection.filter((name) => record.voting.includes(name)),
    joining: false,
    formed: record.formed,
  };
  if (options.renderOnly !== undefined) return [PKI_PHASE, { step: 'render', pass: main }];
  const joiners = record.joiners.filter((name) => selection.includes(name));
  const scope: PlanScope = { inventory, selected, neededToJoin: neededToJoin(inventory) };
  if (joiners.length > 0 && !scope.neededToJoin.every(selected)) {
    throw new InputError(
      `${joiners.join(', ')} must join the cluster, which needs the steps ` +
        `${scope.neededToJoin.join(', ')}: run without --tags / --skip-tags leaving them out`,
    );
  }
  const joins = joinsOf(record, joiners, selection, scope);
  const rebuilding = rebuildPhases(record, main.members, scope);
  const { upgrade, clusterVersion } = rollPhases(inventory, record, main, options);
  return [
    PKI_PHASE,
    ...upgrade,
    ...departurePhases(record, selection, options),
    { step: 'render', pass: main },
    ...convergePhases(scope, main),
    checkedPhase('health', main, selected),
    ...clusterVersion,
    ...accessPhases(inventory, record, main, selected),
    ...rebuilding,
    ...joins,
    ...settlePhases(inventory, record, { joins, rebuilding }, selection, options),
    ...peerTrustPhases(record, main, options, selected),
    ...caRotationPhases(record, main, options, selected),
    consistencyPhase(options),
  ];
}

/**
 * Last: once a run changed a member (or --accept-mismatch asks it), every voting member's HashKV at one revision,
 * equal (verify/consistency.ts). Not after a failure: the run has failed already, and `verify` compares once mended.
 */
function consistencyPhase(options: PlanOptions): PlannedPhase {
  if (options.dryRun) return { step: 'consistency', note: 'a dry-run changes nothing, so it compares nothing' };
  return { step: 'consistency', onlyIfClean: true };
}

/** A phase's title in the run's output. */
export function phaseTitle(phase: PlannedPhase): string {
  switch (phase.step) {
    case 'depart':
      return `${phase.departure} ${phase.member}`;
    case 'join':
    case 'promote':
    case 'rebuild':
      return `${phase.step} ${phase.member}`;
    case 'peer-trust':
      return 'peer trust';
    case 'ca-rotation':
      return `ca rotation ${phase.stage}`;
    default:
      return phase.step;
  }
}

/** One line per phase, as `deploy --list-phases` prints them: title, then on whom and how. */
export function describePlan(plan: readonly PlannedPhase[]): string[] {
  return plan.map((phase) => {
    const title = `${phaseTitle(phase).padEnd(17)} `;
    switch (phase.step) {
      case 'depart':
        if (phase.image)
          return (
            `${title}${phase.member} from image ${phase.image.from} onto ${phase.image.to}: ` +
            `no data disk, so it leaves and joins again empty; never below a healthy quorum`
          );
        return (
          `${title}${phase.member}, one at a time, never below a healthy quorum` +
          `${phase.assumedRemoved.length ? ` (judged as if ${phase.assumedRemoved.join(', ')} had left)` : ''}`
        );
      case 'join':
        return `${title}${phase.member} as a learner beside ${phase.before.join(', ')}`;
      case 'promote':
        return `${title}${phase.member} to a voting member once in sync`;
      case 'rebuild':
        if (phase.skip) return `${title}skipped: ${phase.skip}`;
        return `${title}${phase.member} from image ${phase.from} onto ${phase.to}, data disk kept; its guest and health next`;
      case 'formed':
        if (phase.note) return `${title}${phase.note}`;
        return (
          `${title}${phase.pass.members.join(', ')} again as existing (seeds: ${phase.seeds ? 'yes' : 'no'}, guests: ` +
          `${phase.guests ? 'yes' : 'no'})${phase.formedBefore ? ', the joiners in' : ', once the cluster has formed'}`
        );
      case 'peer-trust':
        return `${title}${phase.note ?? `move every member to ${phase.stage}`}`;
      case 'ca-rotation':
        if (phase.note) return `${title}${phase.note}`;
        if (phase.stage === 'finish') return `${title}${rotatedCas(phase.target)}: the new takes the old one's files; the record goes`;
        return `${title}record ${phase.stage} and issue what it needs; every member then rolled to it`;
      case 'pki': {
        const when = 'run first, before the gather stage (etcd is asked with its certificates)';
        return `${title}the CA, certificates and the cluster's ID: ${when}`;
      }
      case 'consistency': {
        const otherwise =
          "once a member changed in this run (or with --accept-mismatch): every voting member's HashKV at one revision, equal";
        return `${title}${phase.note ?? otherwise}`;
      }
      default: {
        const joining = phase.bootedAheadOf ? ` (joining after ${phase.bootedAheadOf}; booted ahead)` : ' (joining)';
        const on = `${phase.pass.members.join(', ') || '(no member)'}${phase.pass.joining ? joining : ''}`;
        const how = phase.skip
          ? `skipped: ${phase.skip}`
          : (phase.note ?? `${on} · cluster ${phase.pass.cluster.join(', ')} · ${phase.pass.formed ? 'existing' : 'new'}`);
        return `${title}${how}`;
      }
    }
  });
}
