import type { Member } from '../inventory/model.ts';
import type { ClusterIdentity } from '../pki/identity.ts';
import { domainTitle, OWNER_NAMESPACE } from '../render/domain.ts';
import { saysDomainMissing, type ProbeAnswer, type Question } from './virsh.ts';

/**
 * Which cluster a libvirt domain belongs to. Every domain the tool defines carries a mark in its
 * `<metadata>`: the cluster's name and the ID kept in its state directory. A run acts only on
 * domains marked with its own ID; a domain marked by another cluster, or one without a mark, is
 * refused before anything touches it or its volumes (two clusters with members named alike on one
 * hypervisor would otherwise redefine and restart each other's VMs). Pure: answers in, a verdict out.
 */

/** The questions the verdict needs, asked in the member's batched probe. */
export function ownerQuestions(member: Member): Record<'mark' | 'title' | 'state', Question> {
  return {
    mark: ['metadata', '--domain', member.name, '--uri', OWNER_NAMESPACE],
    title: ['desc', '--title', member.name],
    state: ['domstate', member.name],
  };
}

export type Ownership =
  | { kind: 'absent' }
  | { kind: 'ours'; running: boolean }
  /** Ours, but not marked yet: made by an earlier version for this cluster, or adopted with --adopt. */
  | { kind: 'to-mark'; running: boolean; why: string }
  | { kind: 'refused'; reason: string };

/** The mark's attributes from `virsh metadata` (the element alone); undefined when there is none. */
export function parseOwnerMark(output: string): { cluster: string; id: string } | undefined {
  const element = output.match(/<[\w.-]*:?owner\b[^>]*>/)?.[0];
  if (!element) return undefined;
  const attribute = (name: string) =>
    element
      .match(new RegExp(`\\b${name}="([^"]*)"`))?.[1]
      ?.replace(/&quot;/g, '"')
      .replace(/&lt;/g, '<')
      .replace(/&gt;/g, '>')
      .replace(/&amp;/g, '&');
  const cluster = attribute('cluster');
  const id = attribute('id');
  return cluster !== undefined && id !== undefined ? { cluster, id } : undefined;
}

const isMissing = (answer: ProbeAnswer) => answer.code !== 0 && saysDomainMissing(answer.output);

/**
 * The verdict on a member's domain, from its answers. `adopt` (the --adopt flag) takes an unmarked
 * domain on purpose; a domain another cluster marked is never taken (its owner may still run it).
 */
export function judgeOwnership(
  member: string,
  answers: Record<'mark' | 'title' | 'state', ProbeAnswer>,
  us: ClusterIdentity,
  adopt: boolean,
): Ownership {
  if (isMissing(answers.state)) return { kind: 'absent' };
  if (answers.state.code !== 0) throw new Error(`cannot read the state of domain ${member}: ${answers.state.output.trim().split('\n')[0]}`);
  // Active states, where a live change applies too (libvirt refuses --live on an inactive domain).
  const running = /^(running|paused|in shutdown|pmsuspended|blocked)$/.test(answers.state.output.trim());
  const mark = answers.mark.code === 0 ? parseOwnerMark(answers.mark.output) : undefined;
  if (answers.mark.code !== 0 && !/metadata not found|no metadata/i.test(answers.mark.output)) {
    throw new Error(`cannot read the metadata of domain ${member}: ${answers.mark.output.trim().split('\n')[0]}`);
  }
  if (mark) {
    if (us.id !== undefined && mark.id === us.id) return { kind: 'ours', running };
    return {
      kind: 'refused',
      reason:
        `domain ${member} belongs to cluster ${mark.cluster} (id ${mark.id}), ` +
        `not to this one (${us.cluster}, id ${us.id ?? 'not made yet'}); ` +
        'nothing of it or its volumes is touched. Give this cluster other member names, or place it on another hypervisor; ' +
        'if this is the same cluster, run with the state directory that deployed it',
    };
  }
  const title = answers.title.code === 0 ? answers.title.output.trim() : '';
  if (us.adoptsUnmarked && title === domainTitle(member, us.cluster))
    return { kind: 'to-mark', running, why: 'made for this cluster before domains were marked' };
  if (adopt) return { kind: 'to-mark', running, why: 'adopted (--adopt)' };
  const made = /^etcd member .+ of cluster (.+)$/.exec(title);
  return {
    kind: 'refused',
    reason:
      `domain ${member} exists without this tool's mark${made ? ` (titled for cluster ${made[1]})` : ''}; ` +
      `nothing of it or its volumes is touched. ` +
      "If it is this cluster's member, run with --adopt to mark it as this cluster's; otherwise give this cluster other member names",
  };
}
