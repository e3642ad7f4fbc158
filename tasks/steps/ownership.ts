import { CONTROL_NODE, type ControlNode, type Step } from '../core/step.ts';
import type { Member } from '../inventory/model.ts';
import type { RemoteContext } from '../libvirt/context.ts';
import { judgeOwnership, ownerQuestions, type Ownership } from '../libvirt/ownership.ts';
import { readIdentity, stopAdoptingUnmarked, type ClusterIdentity } from '../pki/identity.ts';
import { OWNER_NAMESPACE, OWNER_PREFIX, ownerElement } from '../render/domain.ts';
import { preloadEtcdClient } from '../etcd/client.ts';
import { memberTargets } from './member-targets.ts';
import { deployStep } from './deploy-step.ts';

/**
 * Before anything touches a member's volumes, seed or VM: is its domain this cluster's? A domain
 * another cluster marked, or one without a mark, fails this member here, and the later steps skip it.
 * A domain an earlier version made for this cluster (or one adopted with --adopt) gets the mark, in
 * its persistent definition and, while it runs, live: no restart.
 */
export function ownershipStep({
  members,
  context,
  identity,
  adopt,
}: {
  members: readonly Member[];
  context: RemoteContext;
  identity: ClusterIdentity;
  adopt: ReadonlySet<string>;
}): Step<Ownership, 'mark'> {
  const { targets, memberNamed } = memberTargets(members);
  return {
    name: 'owner',
    targets,
    async check(name) {
      const member = memberNamed(name);
      return judgeOwnership(name, await context.probe(member, ownerQuestions(member)), identity, adopt.has(name));
    },
    plan(ownership, name) {
      if (ownership.kind === 'refused') throw new Error(`refusing to touch ${name}: ${ownership.reason}`);
      if (ownership.kind !== 'to-mark') return [];
      return [
        {
          summary:
            `mark domain ${name} as cluster ${identity.cluster}'s (${ownership.why}; ` +
            `${ownership.running ? 'live and persistent, ' : ''}no restart)`,
          action: 'mark',
        },
      ];
    },
    async apply(_changes, name, ownership) {
      const running = ownership.kind === 'to-mark' && ownership.running;
      const virsh = await context.virshFor(memberNamed(name));
      await virsh.run([
        'metadata',
        '--domain',
        name,
        '--uri',
        OWNER_NAMESPACE,
        '--key',
        OWNER_PREFIX,
        '--set',
        ownerElement(identity),
        '--config',
        ...(running ? ['--live'] : []),
      ]);
    },
  };
}

/**
 * A state directory migrated from before domains were marked takes unmarked domains titled for its
 * cluster as its own, until every member's domain carries the mark: then it stops, so a domain made
 * later under such a title is refused like any other unmarked one.
 */
export function adoptionStep({
  stateDir,
  cluster,
  everyDomainMarked,
}: {
  stateDir: string;
  cluster: string;
  everyDomainMarked: () => boolean;
}): Step<{ adoptsUnmarked: boolean }, 'stop', ControlNode> {
  return {
    name: 'adoption',
    targets: [CONTROL_NODE],
    async check() {
      return { adoptsUnmarked: readIdentity(stateDir, cluster)?.adoptsUnmarked ?? false };
    },
    plan({ adoptsUnmarked }) {
      if (!adoptsUnmarked || !everyDomainMarked()) return [];
      return [
        {
          summary:
            `stop taking unmarked domains titled for cluster ${cluster} as its ` +
            `own (cluster-id.json): every member's domain carries the mark now`,
          action: 'stop',
        },
      ];
    },
    async apply() {
      stopAdoptingUnmarked(stateDir);
    },
  };
}

declare module './deploy-step.ts' {
  interface PassSteps {
    owner: true;
  }
}

export const owner = deployStep({
  id: 'owner',
  kind: 'operation',
  on: 'hypervisors',
  selectable: false,
  changes: ['libvirt'],
  doc: "only this cluster's domains are touched: another's or an unmarked one stops that member",
  converge: {},
  asksHypervisor: (member) => Object.values(ownerQuestions(member)),
  /** Always: whatever else a run does on a member's VM, it does only to this cluster's. */
  async run({ pass }, run) {
    const { inventory, remote, membersNamed } = run.resources;
    void preloadEtcdClient();
    // Asked now for members the cluster phase did not ask (a joiner); each step waits for the answers it takes.
    const members = membersNamed(pass.members);
    run.prefetchFacts(members, run.renderedFor(pass).guests);
    const ours = run.resources.owner();
    const results = await run.runner.runStep(ownershipStep({ members, context: remote, ...ours }));
    // Every member's domain marked in this pass: a migrated state directory stops adopting unmarked ones.
    const wholeCluster = !pass.joining && pass.members.length === inventory.members.length;
    if (!ours.identity.adoptsUnmarked || ours.identity.id === undefined || !wholeCluster) return results;
    const everyDomainMarked = () => results.every((result) => result.status === 'ok' || result.status === 'changed');
    return [
      ...results,
      ...(await run.runner.runStep(adoptionStep({ stateDir: inventory.stateDir, cluster: inventory.cluster.name, everyDomainMarked }))),
    ];
  },
});
