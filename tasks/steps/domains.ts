import type { Change, Step } from '../core/step.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { EtcdClients } from '../etcd/client.ts';
import { waitForHealth } from '../etcd/health.ts';
import { ensureQuorumWithout, handLeadershipAway, rollWaves, type RollKind } from '../etcd/roll.ts';
import { canonicalDomainXml, compareDomainXml, parseDomInfo } from '../libvirt/domain-xml.ts';
import { isNotFound, type Question } from '../libvirt/virsh.ts';
import type { RenderedFile } from '../render/member.ts';
import type { RemoteContext } from '../libvirt/context.ts';
import { shutDown } from '../libvirt/power.ts';
import { memberTargets } from './member-targets.ts';
import { deployStep } from './deploy-step.ts';

/**
 * Each member's libvirt domain: defined from the rendered XML, running, autostarted. A definition
 * that differs (compared semantically) is redefined; a running member then restarts to apply it. The
 * step rolls: one member at a time, leader last, the next member redefined only after the one before
 * it is healthy again, and never while the others could not keep the quorum without it.
 */

interface DomainState {
  /** libvirt's inactive (persistent) definition; absent when the domain is not defined. */
  liveXml?: string;
  running: boolean;
  autostart: boolean;
  state: string;
}

type DomainAction = 'define' | 'restart' | 'start' | 'autostart';

/** libvirt refuses to redefine a domain under a new uuid: keep the one it has. */
function withUuidOf(liveXml: string | undefined, renderedXml: string): string {
  const uuid = liveXml?.match(/<uuid>([0-9a-f-]+)<\/uuid>/)?.[1];
  return uuid ? renderedXml.replace(/(<name>[^<]*<\/name>)/, `$1\n  <uuid>${uuid}</uuid>`) : renderedXml;
}

export const domainQuestions = (member: Member): Record<'xml' | 'info', Question> => ({
  xml: ['dumpxml', '--inactive', member.name],
  info: ['dominfo', member.name],
});

export interface DomainsOptions {
  inventory: Inventory;
  members: readonly Member[];
  rendered: ReadonlyMap<string, RenderedFile[]>;
  context: RemoteContext;
  clients: EtcdClients;
}

export function domainsStep({ inventory, members, rendered, context, clients }: DomainsOptions): Step<DomainState, DomainAction> {
  const { targets, memberNamed } = memberTargets(members);
  const renderedXml = (name: string) => rendered.get(name)?.find((file) => file.name === 'domain.xml')?.content ?? '';

  async function restart(member: Member): Promise<void> {
    await ensureQuorumWithout(inventory, clients, member);
    await handLeadershipAway(inventory, clients, member);
    const virsh = await context.virshFor(member);
    await shutDown(virsh, member.name);
    await virsh.run(['start', member.name]);
    await waitForHealth(inventory, clients, member, inventory.cluster.healthTimeout * 1000);
  }

  return {
    name: 'domain',
    targets,
    async check(name) {
      const answers = await context.probe(memberNamed(name), domainQuestions(memberNamed(name)));
      if (answers.xml.code !== 0) {
        if (isNotFound(answers.xml, 'domain')) return { running: false, autostart: false, state: 'undefined' };
        throw new Error(`cannot read domain ${name}: ${answers.xml.output.trim().split('\n')[0]}`);
      }
      return { liveXml: answers.xml.output, ...parseDomInfo(answers.info.output) };
    },
    plan(state, name) {
      const wanted = renderedXml(name);
      const changes: Change<DomainAction>[] = [];
      if (state.liveXml === undefined) {
        changes.push({
          summary: `define domain ${name}`,
          diff: { label: `${name}/domain.xml`, before: '', after: canonicalDomainXml(wanted) },
          action: 'define',
        });
      } else {
        const comparison = compareDomainXml(wanted, state.liveXml);
        if (!comparison.same) {
          changes.push({
            summary: `redefine domain ${name}`,
            diff: { label: `${name}/domain.xml`, before: comparison.live, after: comparison.wanted },
            action: 'define',
          });
          if (state.running)
            changes.push({
              summary: `restart ${name} to apply its new definition (one member at a time, waiting for cluster health)`,
              action: 'restart',
            });
        }
      }
      if (!state.running)
        changes.push({ summary: state.state === 'undefined' ? `start ${name}` : `start ${name} (was ${state.state})`, action: 'start' });
      if (!state.autostart) changes.push({ summary: `enable autostart of ${name}`, action: 'autostart' });
      return changes;
    },
    async rollingOrder(pending) {
      const kindOf = (changes: readonly Change<DomainAction>[]): RollKind =>
        changes.some((c) => c.action === 'restart') ? 'restarts' : changes.some((c) => c.action === 'start') ? 'starts' : 'keeps-running';
      return rollWaves(
        inventory,
        clients,
        pending.map(({ target, changes }) => ({ target, kind: kindOf(changes) })),
      );
    },
    async apply(changes, name, state) {
      const member = memberNamed(name);
      const virsh = await context.virshFor(member);
      for (const { action } of changes) {
        if (action === 'define') await virsh.run(['define', '/dev/stdin'], { stdin: withUuidOf(state.liveXml, renderedXml(name)) });
        if (action === 'start') await virsh.run(['start', name]);
        if (action === 'autostart') await virsh.run(['autostart', name]);
        if (action === 'restart') await restart(member);
      }
    },
  };
}

declare module './deploy-step.ts' {
  interface PassSteps {
    domain: true;
  }
}

export const domain = deployStep({
  id: 'domain',
  kind: 'operation',
  on: 'hypervisors',
  selectable: true,
  changes: ['libvirt', 'guest', 'vm'],
  doc: 'define, start, autostart; a changed definition restarts one member at a time, leader last',
  converge: {},
  asksHypervisor: (member) => Object.values(domainQuestions(member)),
  run: ({ pass }, run) =>
    run.runner.runStep(
      domainsStep({
        inventory: run.clusterOf(pass.cluster),
        members: run.resources.membersNamed(pass.members),
        rendered: run.renderedFor(pass).files,
        context: run.resources.remote,
        clients: run.resources.clients,
      }),
    ),
});
