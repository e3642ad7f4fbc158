import { PEER_STAGE_DOC, writePeerTrust } from '../pki/peer-trust.ts';
import { deployStep } from './deploy-step.ts';

/**
 * The peer port's move to the peer CA (pki/peer-trust.ts): each stage recorded once every member runs
 * the one before, then rendered and rolled by the phases the plan puts after it.
 */
export const peerTrust = deployStep({
  id: 'peer-trust',
  kind: 'operation',
  on: 'guests',
  selectable: false,
  changes: ['guest'],
  doc: "the peer port's move to the peer CA, one rolled stage at a time",
  // A change of the run's (the stage the next phases render), under the cluster's lock as any other.
  run: ({ stage }, run) =>
    run.runner.passGate().then(() => {
      writePeerTrust(run.resources.inventory.stateDir, stage);
      return `every member runs the stage before; now ${stage} (${PEER_STAGE_DOC[stage]})`;
    }),
});
