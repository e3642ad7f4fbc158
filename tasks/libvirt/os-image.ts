import type { ProbeAnswer, Question } from './virsh.ts';
import { isNotFound, virshSays } from './virsh.ts';
import type { Member } from '../inventory/model.ts';

/**
 * Which image a member's OS disk was built from, against the one the inventory names (`base_image`).
 * The OS disk is a qcow2 overlay the tool made on the base image's volume: its backing file is the
 * image it was built from, a fact libvirt keeps (vol-dumpxml), never a record of the tool's own.
 */

export type ImageVerdict =
  /** Built from the image the inventory names, or nothing to compare (no OS disk yet: the volumes step makes it). */
  | { kind: 'current' }
  /** Built from another image: rebuilt on the new one, keeping its data disk. */
  | { kind: 'rebuild'; from: string; to: string }
  /**
   * Built from another image, with etcd's data on the OS disk (no data disk): replaced on the new
   * image — removed from the cluster, joined again empty as a learner, its data from the cluster.
   */
  | { kind: 'replace'; from: string; to: string }
  /** Built from another image, but not rebuilt in place: why, and what to do. */
  | { kind: 'refused'; from: string; to: string; why: string };

export interface ImageFacts {
  /** `vol-dumpxml` of the member's OS volume. */
  osXml: ProbeAnswer;
  /** `vol-path` of the base image the inventory names. */
  basePath: ProbeAnswer;
  /** Does the member have a data disk (etcd's data apart from the OS)? */
  dataDisk: boolean;
}

/** The OS volume's questions, when the tool made it as an overlay (a volume_id is the operator's disk, never rebuilt). */
export function imageQuestions(member: Member): { osXml: Question; basePath: Question } | undefined {
  const { os, pool } = member.volumes;
  if (!('base' in os)) return undefined;
  return { osXml: ['vol-dumpxml', '--pool', pool, os.name], basePath: ['vol-path', '--pool', os.base.pool, os.base.volume] };
}

/** The backing file's path in a volume's XML; undefined for a volume with no backing file. */
export function backingPathOf(volumeXml: string): string | undefined {
  return volumeXml.match(/<backingStore>[\s\S]*?<path>([^<]+)<\/path>/)?.[1]?.trim();
}

/** The image's file name, as an operator reads it in a plan or in status. */
export const imageName = (path: string): string => path.split('/').at(-1) ?? path;

export function judgeImage(member: Member, facts: ImageFacts): ImageVerdict {
  const { os } = member.volumes;
  if (!('base' in os)) return { kind: 'current' };
  if (facts.osXml.code !== 0) {
    if (isNotFound(facts.osXml, 'volume')) return { kind: 'current' };
    throw new Error(`cannot read ${member.name}'s OS volume: ${virshSays(facts.osXml)}`);
  }
  const from = backingPathOf(facts.osXml.output);
  const wanted = `${os.base.pool}/${os.base.volume}`;
  if (facts.basePath.code !== 0) {
    if (!isNotFound(facts.basePath, 'volume') && !isNotFound(facts.basePath, 'pool'))
      throw new Error(`cannot read base image ${wanted}: ${virshSays(facts.basePath)}`);
    // Nothing to rebuild onto: only a problem when the member is not already on it (then the rebuild says so).
    return from === undefined || imageName(from) === os.base.volume
      ? { kind: 'current' }
      : { kind: 'refused', from: imageName(from), to: wanted, why: `base image ${wanted} is not on hypervisor ${member.hypervisor.name}` };
  }
  const to = facts.basePath.output.trim();
  if (from === undefined || from === to) return { kind: 'current' };
  if (!facts.dataDisk) return { kind: 'replace', from: imageName(from), to: wanted };
  return { kind: 'rebuild', from: imageName(from), to: wanted };
}
