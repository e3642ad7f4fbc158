import type { Runner } from '../core/runner.ts';
import type { StepResult } from '../core/step.ts';
import type { SnapshotSource } from '../backup/source.ts';
import type { EtcdClients } from '../etcd/client.ts';
import type { Departure } from '../etcd/departures.ts';
import type { ClientIdentities } from '../etcd/identities.ts';
import type { MembershipPlan } from '../etcd/membership.ts';
import type { GuestProbe } from '../guest/probe.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { RemoteContext } from '../libvirt/context.ts';
import type { Question } from '../libvirt/virsh.ts';
import type { ClusterIdentity } from '../pki/identity.ts';
import type { RotationStage, RotationTarget } from '../pki/ca-rotation.ts';
import type { PeerTrustStage } from '../pki/peer-trust.ts';
import type { PkiStore } from '../pki/store.ts';
import type { MemberConnections } from '../remote/members.ts';
import type { RenderedFile } from '../render/member.ts';
import type { DesiredGuest } from '../render/guest/desired.ts';
import type { Release } from '../upgrade/release.ts';
import type { EtcdVersion } from '../upgrade/version.ts';

/**
 * What a deploy step is: its registry entry (what `--tags`, `--help` and the docs read), the facts it
 * asks ahead, and how it runs a planned phase. Each module under steps/ exports one (steps/registry.ts
 * lists them in the order a run takes them); the deploy's plan (deploy/plan.ts) arranges the phases and
 * its executor (deploy/execute.ts) hands each one to the step that runs it.
 */

/**
 * What a step's changes can make stale, so the run asks those facts again on that member: libvirt's
 * objects, the guest's files and services, etcd's users and roles, and the VM itself (restarted: an
 * SSH connection into it is gone).
 */
export type FactKind = 'libvirt' | 'guest' | 'etcd-access' | 'vm';

export type StepKind = 'fact' | 'wait' | 'operation';

export interface StepEntry {
  id: string;
  kind: StepKind;
  /** Where it acts: the machine running the tool, each member's hypervisor, each member's guest, etcd's API. */
  on: 'control node' | 'hypervisors' | 'guests' | 'etcd';
  /** `--tags` / `--skip-tags` choose it; the others feed every later step and always run. */
  selectable: boolean;
  /** One line for `--help` and the docs. */
  doc: string;
  /** The facts its changes make stale on the member it changed. */
  changes: readonly FactKind[];
  /** The names its results carry, when not its id (a departure is a `leave` or a `replace`). */
  results?: readonly string[];
}

/** One pass of the remote steps over some members, against the cluster as it is during that pass. */
export interface Pass {
  /** The cluster during the pass: the members etcd has then (all of them, unless members join). */
  cluster: readonly string[];
  /** The members the pass acts on. */
  members: readonly string[];
  /** Members joining a formed cluster: added as learners, their fresh disks and empty data expected. */
  joining: boolean;
  /** Rendered as `existing` (the cluster has formed) or `new` (it forms in this pass). */
  formed: boolean;
  /** A joiner whose VM boots before its turn (bootAheadPhases): its first boot does not wait for etcd. */
  bootedAhead?: true;
}

/** A member built from one image, to be rebuilt on another (or refused: its phase says why). */
export interface ImageChange {
  member: string;
  from: string;
  to: string;
  /**
   * rebuild: a new OS disk, the data disk and etcd identity kept. replace: no data disk, so etcd's
   * data is on the OS disk: the member leaves the cluster and joins again empty, as --replace does.
   */
  how: 'rebuild' | 'replace';
}

/**
 * The steps that run over one pass's members, each a phase of its own: each such step's module names itself
 * here, beside its `deployStep` (`declare module './deploy-step.ts' { interface PassSteps { volumes: true } }`).
 * A declaration merged from the step's own module rather than a list kept here: a new pass step is then its
 * module and its line in the registry, and this file, which every step imports, imports none of them.
 */
// biome-ignore lint/suspicious/noEmptyInterface: the step modules' declarations fill it
export interface PassSteps {}
export type PassStepId = keyof PassSteps;

/** One phase of the deploy's plan: the step that runs it, and what it runs on. */
export type PlannedPhase = (
  | { step: 'pki' }
  | {
      step: 'depart';
      departure: Departure;
      member: string;
      assumedRemoved: readonly string[];
      /** A replacement onto a new base image (no data disk), not one of the gather stage's departures. */
      image?: ImageChange;
    }
  | {
      step: PassStepId;
      pass: Pass;
      skip?: string;
      note?: string;
      /** A health wait after a member came back: it has also caught up with the leader. */
      caughtUp?: true;
    }
  | { step: 'join' | 'promote'; member: string; before: readonly string[] }
  | ({ step: 'rebuild'; skip?: string } & ImageChange)
  | { step: 'formed'; pass: Pass; seeds: boolean; guests: boolean; formedBefore: boolean; note?: string }
  | { step: 'peer-trust'; stage: PeerTrustStage; note?: string }
  /** A CA rotation's stage (pki/ca-rotation.ts), its end (the old CA's files gone), or the recorded stage held. */
  | { step: 'ca-rotation'; target: RotationTarget; stage: RotationStage | 'finish' | 'held'; note?: string }
  | { step: 'consistency'; note?: string }
) & {
  /** Runs only if no step has failed in this run and every hypervisor answered (the peer port's stages). */
  onlyIfClean?: true;
  /**
   * Joiners that must have joined for the phase to mean anything: skipped once a step failed on any
   * of them (the cluster's health would wait for a member that is not coming).
   */
  needsJoined?: readonly string[];
  /** A joiner's VM made and started ahead of its turn, which comes after this joiner's (bootAheadPhases). */
  bootedAheadOf?: string;
};

export type PhaseStep = PlannedPhase['step'];
/** The phases of these kinds (a pass step's phase is one shape for twelve kinds, so not Extract's). */
export type PhaseOf<S extends PhaseStep> = PhaseNarrowed<PlannedPhase, S>;
type PhaseNarrowed<P, S> = P extends { step: infer T } ? ([S & T] extends [never] ? never : P & { step: S & T }) : never;

/** What one render made: each member's files (domain XML, cloud-init) and its guest's contents. */
export interface Rendered {
  files: Map<string, RenderedFile[]>;
  guests: Map<string, DesiredGuest>;
}

/** The connections and stores one deploy works through (deploy/context.ts opens them once). */
export interface DeployResources {
  readonly inventory: Inventory;
  readonly store: PkiStore;
  readonly remote: RemoteContext;
  readonly clients: EtcdClients;
  readonly identities: ClientIdentities;
  readonly memberSsh: MemberConnections;
  readonly guestProbe: GuestProbe;
  readonly snapshots: SnapshotSource | undefined;
  /** Whose domains this run may touch, read when asked. */
  owner(): { identity: ClusterIdentity; adopt: ReadonlySet<string> };
  releaseArchive(version: EtcdVersion): Promise<Release>;
  /** The inventory's members of these names, in the inventory's order; a bound function, so it may be taken apart. */
  readonly membersNamed: (names: readonly string[]) => Member[];
}

/** The run's options a step reads. */
export interface DeployRunOptions {
  dryRun: boolean;
  /** --render-only DIR: the render writes its files there for review, and nothing else runs. */
  renderOnly?: string;
  /** --diff: the run shows its changes' diffs (a dry-run always does). */
  diff?: boolean;
  /** --accept-mismatch: an operator looked at the members' recorded mismatch; the run compares them again whatever it changes. */
  acceptMismatch?: boolean;
  /** --renew-certs: every leaf certificate issued again in this run. */
  renewCerts?: boolean;
  tags?: readonly string[];
  skipTags?: readonly string[];
}

/** One deploy's execution, as a step running a phase sees it: what the run holds, and what earlier phases made. */
export interface DeployRun {
  readonly resources: DeployResources;
  readonly runner: Runner;
  readonly options: DeployRunOptions;
  /** When the run started, in whole seconds (--renew-certs renews what was issued before). */
  readonly started: Date;
  readonly plan: readonly PlannedPhase[];
  /** Who the gather stage found voting, joining, leaving and replaced. */
  readonly membership: MembershipPlan;
  /** Files --render-only wrote. */
  readonly written: string[];
  /** The inventory narrowed to these members: the cluster as it is during a pass. */
  clusterOf(names: readonly string[]): Inventory;
  /** What the pass deploys, rendered with the cluster as it is during the pass, and kept for its later phases. */
  renderPass(pass: Pass): Rendered;
  /** The pass's last render (its render phase comes first). */
  renderedFor(pass: Pass): Rendered;
  /** The guests' facts asked ahead, in one batch per hypervisor, for a pass about to converge them. */
  prefetchGuests(pass: Pass): void;
  /** Libvirt's facts (and with the guest step, the guests') asked ahead for these members. */
  prefetchFacts(members: readonly Member[], guests: Map<string, DesiredGuest>): void;
}

/** A phase's outcome: its steps' results, or one line when it ran no step. */
export type Shown = Promise<StepResult[] | string>;

/**
 * A deploy step: its entry, what it asks ahead, and how it runs its phases. (Methods, not function
 * properties: the registry holds steps of different phases in one list.)
 */
export interface DeployStep<S extends PhaseStep = PhaseStep> extends StepEntry {
  /** The planned phases it runs: its own id unless it says (`join` runs `promote` too). Gather-stage facts run none. */
  phases?: readonly S[];
  /** Libvirt's questions about a member, asked ahead of the run in one batch per hypervisor. */
  asksHypervisor?(member: Member): readonly Question[];
  /** Before the first phase: work it may start early (auth asks etcd's users while other phases run). */
  prepare?(run: DeployRun): void;
  run?(phase: PhaseOf<S>, run: DeployRun): Shown;
  /** A converge step's place in every pass: only a step over a pass's members can have one. */
  converge?: S extends PassStepId ? ConvergeRule : never;
}

/**
 * What makes a step a converge step: one phase over each pass's members, in the registry's order among the
 * others (deploy/plan.ts `convergePhases`), so a new one needs no line in the plan.
 */
export interface ConvergeRule {
  /** Whether a pass has its phase (absent: every pass has it): false for none, a note for a phase shown but not run. */
  inPass?(pass: Pass, inventory: Inventory): boolean | string;
  /** In a joiner's turn it runs once the joiner is a learner, not before its VM's first boot (the guest step starts etcd). */
  onceAdded?: true;
}

/** A module's step, its id kept literal for the registry's `StepId`; it runs the phases of its own id unless `phases` says. */
export const deployStep = <const Id extends string, S extends PhaseStep = Extract<Id, PhaseStep>>(
  step: NoInfer<DeployStep<S>> & { id: Id },
): DeployStep<S> & { id: Id } => step;
