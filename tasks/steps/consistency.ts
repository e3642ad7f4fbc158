import {
  clearMismatch,
  compareMembers,
  compareUntilDefinite,
  mismatchFailure,
  readMismatch,
  recordMismatch,
} from '../verify/consistency.ts';
import { deployStep } from './deploy-step.ts';

/**
 * After a run that changed a member: the voting members' data compared (verify/consistency.ts). A difference is
 * recorded in etcd and fails the run; an agreement found with --accept-mismatch removes the record.
 */
export const consistency = deployStep({
  id: 'consistency',
  kind: 'wait',
  on: 'etcd',
  selectable: false,
  changes: [],
  doc:
    "once a member changed in the run: every voting member's HashKV at one revision, equal; " +
    'a difference fails the run, and later runs change nothing until --accept-mismatch',
  async run(_phase, run) {
    const { clients, inventory } = run.resources;
    const { acceptMismatch } = run.options;
    const members = inventory.members;
    const root = run.resources.identities.root();
    const changed = new Set(run.runner.results.flatMap((result) => (result.status === 'changed' ? [result.host] : [])));
    const touched = members.filter((member) => changed.has(member.name)).map((member) => member.name);
    if (touched.length === 0 && !acceptMismatch) return 'no member changed in this run: nothing to compare';
    const comparison = await compareUntilDefinite(() => compareMembers(clients, members, root));
    const after = touched.length > 0 ? `after changes on ${touched.join(', ')}` : 'with --accept-mismatch';
    if (comparison.kind === 'unknown')
      throw new Error(`could not compare the members' data ${after}: ${comparison.detail}; run etcd-kvm verify`);
    if (comparison.kind === 'differ') {
      await run.runner.passGate();
      await recordMismatch(clients, members, root, { at: new Date().toISOString(), detail: comparison.detail });
      throw new Error(mismatchFailure(comparison.detail));
    }
    const recorded = acceptMismatch ? await readMismatch(clients, members, root) : undefined;
    if (recorded) {
      await run.runner.passGate();
      await clearMismatch(clients, members, root);
    }
    return `the members agree ${after}: ${comparison.detail}${recorded ? `; the mismatch recorded at ${recorded.at} is removed` : ''}`;
  },
});
