import { formedCluster } from '../etcd/health.ts';
import { cloudInitIsoStep } from './cloud-init-iso.ts';
import { deployStep } from './deploy-step.ts';
import { domainUuids, formationStep } from './formation.ts';
import { guestStepOf } from './guest.ts';
import { renderedFilesStep } from './rendered-files.ts';

/**
 * Once the cluster has formed in this run, or members have joined: every member's files again with
 * the whole cluster (ETCD_INITIAL_CLUSTER_STATE=existing, the full ETCD_INITIAL_CLUSTER); etcd reads
 * either only when it first starts, so nothing restarts.
 */
export const formed = deployStep({
  id: 'formed',
  kind: 'operation',
  on: 'control node',
  selectable: false,
  changes: [],
  doc: 'after the cluster formed or members joined: seeds and guests again as `existing` with the whole cluster',
  async run({ pass, seeds, guests, formedBefore }, run) {
    const { inventory, clients, remote, membersNamed } = run.resources;
    if (!formedBefore && (await formedCluster(clients, inventory.members)) === undefined)
      return 'the cluster has not formed: members stay `new`';
    const members = membersNamed(pass.members);
    const rendered = run.renderPass(pass);
    // The guests asked again now, after every change of this run, and answering while the seeds are rewritten.
    if (guests) run.prefetchGuests(pass);
    const everyone = inventory.members.map((member) => member.name);
    const recorded = await run.runner.runStep(
      formationStep({ stateDir: inventory.stateDir, members: everyone, domainUuids: domainUuids(remote, inventory.members) }),
    );
    const files = [
      ...recorded,
      ...(await run.runner.runStep(renderedFilesStep({ stateDir: inventory.stateDir, rendered: rendered.files }))),
    ];
    // The seeds on the hypervisors and the files in the guests at the same time: neither reads the other.
    const [seeded, converged] = await Promise.all([
      seeds
        ? run.runner.runStep(cloudInitIsoStep({ stateDir: inventory.stateDir, members, rendered: rendered.files, context: remote }))
        : [],
      guests ? run.runner.runStep(guestStepOf(pass, run)) : [],
    ]);
    return [...files, ...seeded, ...converged];
  },
});
