import type { Change, Step } from '../core/step.ts';
import type { EtcdClients } from '../etcd/client.ts';
import { ensureQuorumWithout, handLeadershipAway } from '../etcd/roll.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { RemoteContext } from '../libvirt/context.ts';
import { parseDomInfo } from '../libvirt/domain-xml.ts';
import { imageQuestions, judgeImage, type ImageVerdict } from '../libvirt/os-image.ts';
import { shutDown } from '../libvirt/power.ts';
import { volInfo, volumeState } from '../libvirt/volumes.ts';
import { createVolumeArgs, osDiskBytes } from './volumes.ts';
import { domainQuestions } from './domains.ts';
import { deployStep } from './deploy-step.ts';

/**
 * A member rebuilt on the image `base_image` names, when its OS disk was built from another: the VM
 * stopped, its OS disk deleted and made again as an overlay on the new image, the VM started on the
 * same seed. Its data disk is not touched, so etcd starts on its own data with its own member ID (no
 * membership change, no resync); its SSH host key is the seed's, which the state directory pins. The
 * plan puts one member per phase, followed by its guest and its health (deploy/plan.ts); this step
 * keeps the quorum and hands leadership away before it stops a member.
 */

interface RebuildState {
  verdict: ImageVerdict;
  running: boolean;
  /** The new image's path and the OS disk's size on it (when the verdict is a rebuild). */
  disk?: { basePath: string; capacityBytes: number };
}

interface RebuildAction {
  pool: string;
  name: string;
  basePath: string;
  capacityBytes: number;
  running: boolean;
}

export function rebuildStep({
  inventory,
  member,
  context,
  clients,
}: {
  inventory: Inventory;
  member: Member;
  context: RemoteContext;
  clients: EtcdClients;
}): Step<RebuildState, RebuildAction> {
  return {
    name: 'rebuild',
    targets: [member.name],
    check: () => rebuildFacts(member, context),
    plan(state) {
      const { verdict } = state;
      if (verdict.kind === 'current') return [];
      if (verdict.kind === 'refused')
        throw new Error(
          `refusing to rebuild ${member.name} on ${verdict.to} (built from ${verdict.from}): ${verdict.why}. Nothing was changed.`,
        );
      // The plan replaces such a member instead, with other voters to keep the quorum; a sole voter comes here.
      if (verdict.kind === 'replace')
        throw new Error(
          `refusing to move ${member.name} onto ${verdict.to} (built from ${verdict.from}): it has no data disk, so it would leave ` +
            'its cluster and join again empty, and it is the only voting member. ' +
            'Grow the cluster first, or give members a data disk. Nothing was changed.',
        );
      const { os, pool } = member.volumes;
      if (!('base' in os) || !state.disk) return [];
      return [
        {
          summary:
            `rebuild ${member.name} on ${verdict.to} (built from ${verdict.from}): ` +
            `${state.running ? 'stop it, ' : ''}a new OS disk ${pool}/${os.name} on the new image, start it; ` +
            'its data disk, etcd member ID and SSH host key stay',
          action: { pool, name: os.name, ...state.disk, running: state.running },
        },
      ] satisfies Change<RebuildAction>[];
    },
    async apply(changes) {
      for (const { action } of changes) {
        if (action.running) await stopForRebuild(inventory, clients, member, context);
        const virsh = await context.virshFor(member);
        await virsh.run(['vol-delete', '--pool', action.pool, action.name]);
        await virsh.run(
          createVolumeArgs({
            kind: 'overlay',
            pool: action.pool,
            name: action.name,
            capacityBytes: action.capacityBytes,
            basePath: action.basePath,
          }),
        );
        await virsh.run(['start', member.name]);
      }
    },
  };
}

async function rebuildFacts(member: Member, context: RemoteContext): Promise<RebuildState> {
  const questions = imageQuestions(member);
  const { os } = member.volumes;
  if (!questions || !('base' in os)) return { verdict: { kind: 'current' }, running: false };
  const answers = await context.probe(member, {
    ...questions,
    baseInfo: volInfo(os.base.pool, os.base.volume),
    info: domainQuestions(member).info,
  });
  const verdict = judgeImage(member, { osXml: answers.osXml, basePath: answers.basePath, dataDisk: member.volumes.data !== undefined });
  // Stopped first unless it is off for certain: a domain caught "in shutdown" or paused still holds its OS disk.
  const running = answers.info.code === 0 && parseDomInfo(answers.info.output).active;
  if (verdict.kind !== 'rebuild') return { verdict, running };
  const base = volumeState(answers.baseInfo, `base image ${os.base.pool}/${os.base.volume}`);
  const capacityBytes = osDiskBytes(os, base.exists ? base.capacityBytes : 0);
  return { verdict, running, disk: { basePath: answers.basePath.output.trim(), capacityBytes } };
}

/** The member stopped, once the others keep the quorum without it and it no longer leads (an election is seconds of no writes). */
async function stopForRebuild(inventory: Inventory, clients: EtcdClients, member: Member, context: RemoteContext): Promise<void> {
  await ensureQuorumWithout(inventory, clients, member);
  await handLeadershipAway(inventory, clients, member);
  await shutDown(await context.virshFor(member), member.name);
}

export const rebuild = deployStep({
  id: 'rebuild',
  kind: 'operation',
  on: 'hypervisors',
  selectable: true,
  changes: ['libvirt', 'guest', 'vm'],
  doc:
    'a member built from another image than base_image: a new OS disk on it, ' +
    'data disk kept (without one: replaced on it); one at a time, leader last',
  asksHypervisor: (member) => Object.values(imageQuestions(member) ?? {}),
  run: (phase, run) =>
    run.runner.runStep(
      rebuildStep({
        inventory: run.clusterOf(run.membership.voting.map((member) => member.name)),
        member: run.resources.membersNamed([phase.member])[0]!,
        context: run.resources.remote,
        clients: run.resources.clients,
      }),
    ),
});
