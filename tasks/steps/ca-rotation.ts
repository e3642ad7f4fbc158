import {
  type CaRotation,
  pausesAt,
  type Presented,
  presentedMismatches,
  readCaRotation,
  removeCaRotation,
  ROTATION_STAGE_DOC,
  type RotatedCa,
  rotatedCas,
  rotates,
  type RotationStage,
  type RotationTarget,
  writeCaRotation,
} from '../pki/ca-rotation.ts';
import { servedCertificate } from '../etcd/served-certificate.ts';
import { readFacts } from '../pki/materials.ts';
import { clusterSignerOf } from '../pki/plan.ts';
import type { PkiStore } from '../pki/store.ts';
import { isSignedBy } from '../pki/x509.ts';
import { deployStep, type DeployRun, type Shown } from './deploy-step.ts';
import { pkiStep } from './pki.ts';

/** What --rotate-ca takes, for the command line (cli/ reads pki/ through the steps). */
export { ROTATION_TARGETS, type RotationTarget } from '../pki/ca-rotation.ts';

/**
 * A CA rotation's stages (pki/ca-rotation.ts): each recorded once every member runs the one before, its
 * certificates made or issued by the pki step at once, then rendered and rolled by the phases the plan puts
 * after it; at the end the new CAs take the old ones' files and the record goes.
 */
export const caRotation = deployStep({
  id: 'ca-rotation',
  kind: 'operation',
  on: 'control node',
  selectable: false,
  changes: ['guest'],
  doc: "a CA rotation's stages (--rotate-ca), each rolled over every member with the health gate",
  // A change of the run's (the stage the next phases render), under the cluster's lock as any other.
  run: ({ target, stage }, run) => run.runner.passGate().then(() => (stage === 'finish' ? finish(run) : enter(target, stage, run))),
});

async function enter(target: RotationTarget, stage: RotationStage | 'held', run: DeployRun): Shown {
  const { inventory, store } = run.resources;
  if (stage === 'held') return 'held';
  const recorded = readCaRotation(inventory.stateDir);
  if (recorded && rotates(recorded, 'cluster')) await membersRunRecorded(run, recorded);
  const rotation: CaRotation = { target, stage, next: recorded?.next ?? {} };
  writeCaRotation(inventory.stateDir, rotation);
  const said = `every member runs the stage before; now ${stage} (${ROTATION_STAGE_DOC[stage]})`;
  const results = await run.runner.runStep(pkiStep({ inventory, store }));
  if (!pausesAt(rotation)) return results.length > 0 ? results : said;
  console.log(
    `\nthe rotation of ${rotatedCas(target)} pauses here: every member and the tool trust both CAs and accept the new ` +
      "CA's client certificates. Write each application's bundle again now (etcd-kvm client -i INVENTORY --user USER " +
      '--out DIR: both CAs, a new certificate) and deliver it; bundles from before stop working once members present the ' +
      `new CA. Then run deploy --rotate-ca ${target} to go on.`,
  );
  return results.length > 0 ? results : said;
}

/** Every member presents what the recorded stage has it present (presentedMismatches), asked of each client port at once. */
async function membersRunRecorded(run: DeployRun, recorded: CaRotation): Promise<void> {
  const { inventory, store, clients, identities } = run.resources;
  const facts = readFacts(inventory, store);
  const generationOf = (pem: string): Presented =>
    (['new', 'old'] as const).find((generation) => {
      const ca = clusterSignerOf(inventory, facts, generation).public;
      return ca !== undefined && isSignedBy(pem, ca);
    }) ?? 'neither';
  const seen = await Promise.all(
    inventory.members.map(async (member): Promise<[string, Presented]> => {
      try {
        return [member.name, generationOf((await servedCertificate(clients, member, identities.health())).pem)];
      } catch (error) {
        return [member.name, { error: (error as Error).message }];
      }
    }),
  );
  const mismatches = presentedMismatches(recorded, new Map(seen));
  if (mismatches.length > 0)
    throw new Error(`the rotation does not move on from ${recorded.stage}: ${mismatches.join('; ')}; run the deploy again once mended`);
}

/** The end: each new CA takes its old one's files (the old key is gone with them), then the record goes. */
async function finish(run: DeployRun): Shown {
  return endRotation(run.resources.store);
}

/** The rotation recorded in the store's state directory ended: its new CAs in place, the record gone. */
export function endRotation(store: PkiStore): string {
  const rotation = readCaRotation(store.stateDir);
  if (!rotation) return 'no rotation is recorded: nothing to end';
  const moved = (['cluster', 'peer'] as const).filter((ca) => rotates(rotation, ca)).map((ca) => moveIntoPlace(store, ca));
  removeCaRotation(store.stateDir);
  return `the rotation of ${rotatedCas(rotation.target)} ended: ${moved.join('; ')}`;
}

/**
 * The new CA written over the old one's files, then its own removed: a run killed between the two finds it in both.
 * The root before its intermediate: a run killed between them still finds the new intermediate beside the new root.
 */
function moveIntoPlace(store: PkiStore, ca: RotatedCa): string {
  const moves =
    ca === 'cluster'
      ? ([
          ['ca', 'ca-next'],
          ['intermediate', 'intermediate-next'],
        ] as const)
      : ([['peer-ca', 'peer-ca-next']] as const);
  for (const [current, next] of moves) {
    const pair = store.read(next);
    if (pair.public && pair.privateKey) store.write(current, { public: pair.public, privateKey: pair.privateKey });
    store.remove(next);
  }
  return `pki/${moves[0][0]}.crt is the new ${ca === 'cluster' ? 'CA' : 'peer CA'}, the old one's key deleted`;
}
