import { X509Certificate } from 'node:crypto';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { InputError } from '../core/errors.ts';
import { PUBLIC_FILE_MODE, readIfExists, writeFileAtomic } from '../core/files.ts';
import type { StoredPair } from './store.ts';

/**
 * Replacing a CA while the cluster serves (`deploy --rotate-ca cluster|peer|both`): a new CA made beside the
 * old one (pki/ca-next, pki/peer-ca-next), then stages, each rolled over every member with the health gate
 * (etcd reads a CA bundle only when it starts; certificates anew for every connection):
 *   trust-both   – members and the tool's clients trust the old CA and the new (restart, one member at a time);
 *   clients-new  – client certificates (root, application users, the backup agent) issued by the new CA: every
 *                  member accepts them now. The cluster CA's rotation pauses here, so applications get the
 *                  bundles `etcd-kvm client` writes now (both CAs, a new certificate) before any member
 *                  presents a certificate their old bundle cannot verify;
 *   present-new  – members present certificates of the new CA on the client and peer ports (no restart);
 *   new-only     – members trust the new CA alone (restart, one at a time): a certificate of the old CA is
 *                  refused from here on. The old CA's files are then deleted, the new one takes their place.
 * A stage starts only once every member runs the one before; the run that finished a stage records the next.
 * The record names the new CA by its fingerprint, so a CA file lost or swapped is a refusal, not a guess.
 */

export const ROTATION_TARGETS = ['cluster', 'peer', 'both'] as const;
export type RotationTarget = (typeof ROTATION_TARGETS)[number];
export const ROTATION_STAGES = ['trust-both', 'clients-new', 'present-new', 'new-only'] as const;
export type RotationStage = (typeof ROTATION_STAGES)[number];
/** The two CAs a rotation can replace. */
export type RotatedCa = 'cluster' | 'peer';

export interface CaRotation {
  target: RotationTarget;
  stage: RotationStage;
  /** The new CAs' SHA-256 fingerprints, once made (trust-both makes them). */
  next: Partial<Record<RotatedCa, string>>;
}

/** The CAs a target names, for people: "the cluster CA", "the peer CA", "the cluster CA and the peer CA". */
export const rotatedCas = (target: RotationTarget): string => (target === 'both' ? 'the cluster CA and the peer CA' : `the ${target} CA`);

export const rotates = (rotation: CaRotation | undefined, ca: RotatedCa): boolean =>
  rotation !== undefined && (rotation.target === ca || rotation.target === 'both');

/** The stages a rotation takes: a peer CA's has no client certificates to issue. */
export const stagesOf = (target: RotationTarget): readonly RotationStage[] =>
  target === 'peer' ? ROTATION_STAGES.filter((stage) => stage !== 'clients-new') : ROTATION_STAGES;

export const nextRotationStage = (rotation: Pick<CaRotation, 'target' | 'stage'>): RotationStage | undefined => {
  const stages = stagesOf(rotation.target);
  return stages[stages.indexOf(rotation.stage) + 1];
};

/** Where a rotation of the cluster CA waits for the operator: applications must have their new bundles first. */
export const PAUSE_STAGE: RotationStage = 'clients-new';
export const pausesAt = (rotation: Pick<CaRotation, 'target' | 'stage'>): boolean =>
  rotation.stage === PAUSE_STAGE && rotation.target !== 'peer';

export const ROTATION_STAGE_DOC: Record<RotationStage, string> = {
  'trust-both': 'members and the tool trust the old CA and the new; etcd restarts one member at a time',
  'clients-new': 'client certificates (root, users, the backup agent) issued by the new CA; no restart',
  'present-new': 'members present certificates of the new CA; no restart',
  'new-only': 'members trust the new CA alone, a certificate of the old one is refused; etcd restarts one member at a time',
};

/** Which of the two CAs a role takes: 'old' is the CA in place before the rotation, 'new' the one replacing it. */
export type Generation = 'old' | 'new';
export interface CaRoles {
  /** What members and clients trust, in this order. */
  trust: readonly Generation[];
  /** What signs the client certificates (the cluster CA) — or nothing, for the peer CA. */
  clients: Generation;
  /** What signs the certificates members present (server certificates, or peer certificates). */
  presented: Generation;
}

const STEADY: CaRoles = { trust: ['old'], clients: 'old', presented: 'old' };

/** Pure: who trusts and who signs what, for one CA, at the rotation's stage (or outside one). */
export function rolesOf(rotation: CaRotation | undefined, ca: RotatedCa): CaRoles {
  if (!rotation || !rotates(rotation, ca)) return STEADY;
  switch (rotation.stage) {
    case 'trust-both':
      return { trust: ['old', 'new'], clients: 'old', presented: 'old' };
    case 'clients-new':
      return { trust: ['old', 'new'], clients: 'new', presented: 'old' };
    case 'present-new':
      return { trust: ['old', 'new'], clients: 'new', presented: 'new' };
    case 'new-only':
      return { trust: ['new'], clients: 'new', presented: 'new' };
  }
}

export const fingerprintOf = (pem: string): string => new X509Certificate(pem).fingerprint256;

/** The two CAs of one kind as the state directory holds them: in place (pki/ca) and next (pki/ca-next). */
export interface CaFiles {
  current: StoredPair;
  next: StoredPair;
}

/**
 * The pair a generation names, or undefined when it is not there: the new CA is whichever file carries the
 * recorded fingerprint (pki/ca once the rotation moved it into place); the old is pki/ca until then.
 */
export function generationPair(files: CaFiles, fingerprint: string | undefined, generation: Generation): StoredPair | undefined {
  const isNew = (pair: StoredPair) => pair.public !== undefined && fingerprint !== undefined && fingerprintOf(pair.public) === fingerprint;
  if (generation === 'new') return isNew(files.next) ? files.next : isNew(files.current) ? files.current : undefined;
  return files.current.public !== undefined && !isNew(files.current) ? files.current : undefined;
}

const RECORD = join('pki', 'ca-rotation.json');

export function readCaRotation(stateDir: string): CaRotation | undefined {
  const text = readIfExists(join(stateDir, RECORD));
  if (text === undefined) return undefined;
  let parsed: Partial<CaRotation> = {};
  try {
    parsed = JSON.parse(text) as Partial<CaRotation>;
  } catch {
    parsed = {};
  }
  const { target, stage, next } = parsed;
  const valid =
    (ROTATION_TARGETS as readonly unknown[]).includes(target) &&
    (ROTATION_STAGES as readonly unknown[]).includes(stage) &&
    typeof next === 'object' &&
    next !== null &&
    Object.values(next).every((value) => typeof value === 'string');
  if (!valid)
    throw new InputError(`${join(stateDir, RECORD)} is damaged: it must name a target, a stage and the new CAs' fingerprints`, [
      'restore it from where the state directory came from; a rotation is never guessed',
    ]);
  return { target: target!, stage: stage!, next: next! };
}

export function writeCaRotation(stateDir: string, rotation: CaRotation): void {
  writeFileAtomic(join(stateDir, RECORD), `${JSON.stringify(rotation)}\n`, PUBLIC_FILE_MODE);
}

export function removeCaRotation(stateDir: string): void {
  rmSync(join(stateDir, RECORD), { force: true });
}

/** What a run does of a rotation: the stages it takes in order, and whether it then ends the rotation. */
export interface RotationAhead {
  target: RotationTarget;
  /** The stage members run when the run starts (none before a rotation starts). */
  from: RotationStage | undefined;
  stages: readonly RotationStage[];
  finishes: boolean;
}

/**
 * Pure: from the record and --rotate-ca, what this run takes. --rotate-ca starts a rotation, or moves the one
 * under way on from its recorded stage (the run's main pass has members run that one already) to the pause
 * or to the end; a run without it holds the recorded stage (no stages). Undefined: no rotation at all.
 * The flag naming another target than the one under way is refused (checkRotationFlag, before any change).
 */
export function rotationAhead(recorded: CaRotation | undefined, asked: RotationTarget | undefined): RotationAhead | undefined {
  if (!recorded) {
    if (!asked) return undefined;
    const all = stagesOf(asked);
    const pause = all.findIndex((stage) => pausesAt({ target: asked, stage }));
    const stages = pause < 0 ? all : all.slice(0, pause + 1);
    return { target: asked, from: undefined, stages, finishes: pause < 0 };
  }
  const base = { target: recorded.target, from: recorded.stage };
  if (!asked) return { ...base, stages: [], finishes: false };
  const all = stagesOf(recorded.target);
  const after = all.slice(all.indexOf(recorded.stage) + 1);
  const pause = after.findIndex((stage) => pausesAt({ target: recorded.target, stage }));
  const stages = pause < 0 ? after : after.slice(0, pause + 1);
  return { ...base, stages, finishes: pause < 0 };
}

/** --rotate-ca naming another CA than the rotation under way: refused before anything changes. */
export function checkRotationFlag(recorded: CaRotation | undefined, asked: RotationTarget | undefined): void {
  if (!recorded || !asked || recorded.target === asked) return;
  throw new InputError(
    `--rotate-ca ${asked}: a rotation of ${rotatedCas(recorded.target)} is under way (at ${recorded.stage}); one rotation at a time`,
    [`finish it first: deploy --rotate-ca ${recorded.target}`],
  );
}

/** What a member's client port was seen presenting: a certificate of one of the two CAs, of neither, or no answer. */
export type Presented = Generation | 'neither' | { error: string };

/**
 * Pure: why the members do not run what the record says, or nothing. Before a stage moves on, every member must
 * present a certificate of the CA the recorded stage has them present: the record is checked against the members,
 * not trusted alone (a member restored from an old disk, or one whose guest step did not run, stops the rotation).
 */
export function presentedMismatches(rotation: CaRotation, presented: ReadonlyMap<string, Presented>): string[] {
  const expected = rolesOf(rotation, 'cluster').presented;
  return [...presented].flatMap(([member, seen]) => {
    if (typeof seen === 'object') return [`${member}: its client port did not answer (${seen.error})`];
    if (seen === expected) return [];
    const what = seen === 'neither' ? 'a certificate of neither CA' : `a certificate of the ${seen} CA`;
    return [`${member} presents ${what}, though the record says every member runs ${rotation.stage} (the ${expected} CA's)`];
  });
}
