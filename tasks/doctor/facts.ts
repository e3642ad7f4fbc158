import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';
import { commandLine } from '../core/shell.ts';
import type { Inventory } from '../inventory/model.ts';
import { volInfo } from '../libvirt/volumes.ts';
import { isNotFound, type ProbeAnswer, type Question, Virsh, virshSays } from '../libvirt/virsh.ts';
import type { HypervisorConnections } from '../remote/hypervisors.ts';
import { type GroundAsked, groundAsked } from './ground.ts';

/**
 * What `etcd-kvm doctor` reads, changing nothing: the control node's tools, and on each hypervisor (one SSH
 * connection, one batch of questions) libvirt's version, /dev/kvm, the pools, base images, networks and macvtap
 * devices the inventory's members need, which of their volumes exist already, and the guest agent of each member
 * that runs. The parsers are pure (test/unit/doctor.test.ts); doctor/checks.ts judges.
 */

/** The control node's programs the tool starts: where each was found on PATH, or undefined. */
export interface ControlNodeFacts {
  node: string;
  tools: { xorriso?: string; etcdctl?: string };
}

export type PoolFacts = { name: string } & (
  | { state: 'running'; availableBytes?: number }
  | { state: 'inactive' }
  | { state: 'missing' }
  | { error: string }
);
export type NetworkFacts = { name: string } & ({ active: boolean } | { missing: true } | { error: string });
export type VolumeFacts = { pool: string; volume: string } & ({ bytes: number } | { missing: true } | { error: string });

export interface ReachedFacts {
  reachable: true;
  /** The daemon's version, as `virsh version --daemon` says it. */
  libvirt?: string;
  /** /dev/kvm is there, and the CPU says vmx or svm: hardware virtualisation (a /dev/kvm alone can be a PVM device). */
  kvm: { device: boolean; cpu: boolean };
  pools: PoolFacts[];
  baseImages: VolumeFacts[];
  networks: NetworkFacts[];
  macvtap: { device: string; present: boolean }[];
  /** `pool/name` of each planned volume that exists already. */
  existingVolumes: string[];
  /** The members whose domain runs, with whether its guest agent answered a ping. */
  running: { member: string; agent: boolean }[];
}

export type HypervisorFacts = { asked: GroundAsked } & (ReachedFacts | { reachable: false; reason: string });

export interface DoctorFacts {
  control: ControlNodeFacts;
  hypervisors: HypervisorFacts[];
}

/** Where `program` is on PATH, or undefined. */
export function onPath(program: string, path = process.env.PATH ?? ''): string | undefined {
  for (const dir of path.split(delimiter).filter(Boolean)) {
    const candidate = join(dir, program);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {}
  }
  return undefined;
}

export const controlNodeFacts = (path?: string): ControlNodeFacts => {
  const xorriso = onPath('xorriso', path);
  const etcdctl = onPath('etcdctl', path);
  return { node: process.versions.node, tools: { ...(xorriso ? { xorriso } : {}), ...(etcdctl ? { etcdctl } : {}) } };
};

/** `virsh version --daemon`: "Running against daemon: 9.0.0". */
export const libvirtVersion = (answer: ProbeAnswer): string | undefined =>
  answer.code === 0 ? answer.output.match(/Running against daemon:\s*(\S+)/)?.[1] : undefined;

/** `virsh pool-info --bytes NAME`. */
export function poolFacts(name: string, answer: ProbeAnswer): PoolFacts {
  if (answer.code !== 0) return isNotFound(answer, 'pool') ? { name, state: 'missing' } : { name, error: virshSays(answer) };
  if (!/^State:\s+running/m.test(answer.output)) return { name, state: 'inactive' };
  const available = answer.output.match(/^Available:\s+(\d+)/m)?.[1];
  return { name, state: 'running', ...(available ? { availableBytes: Number(available) } : {}) };
}

/** `virsh net-info NAME`. */
export function networkFacts(name: string, answer: ProbeAnswer): NetworkFacts {
  if (answer.code !== 0) return isNotFound(answer, 'network') ? { name, missing: true } : { name, error: virshSays(answer) };
  return { name, active: /^Active:\s+yes/m.test(answer.output) };
}

/** `virsh vol-info --bytes --pool POOL VOLUME`. */
export function volumeFacts(pool: string, volume: string, answer: ProbeAnswer): VolumeFacts {
  if (answer.code === 0) return { pool, volume, bytes: Number(answer.output.match(/^Capacity:\s+(\d+)/m)?.[1] ?? 0) };
  return isNotFound(answer, 'volume') ? { pool, volume, missing: true } : { pool, volume, error: virshSays(answer) };
}

const PING = JSON.stringify({ execute: 'guest-ping' });

/** The questions for one hypervisor, each named by a short key: one virsh batch and one shell for the pipelines. */
export function groundQuestions(asked: GroundAsked): Record<string, Question> {
  const keyed = <T>(prefix: string, items: readonly T[], question: (item: T) => Question) =>
    items.map((item, i) => [`${prefix}${i}`, question(item)] as const);
  return Object.fromEntries([
    ['version', ['version', '--daemon']],
    ['kvm', { shell: 'if [ -c /dev/kvm ]; then echo device; fi; if grep -qw -e vmx -e svm /proc/cpuinfo; then echo cpu; fi' }],
    ...keyed('pool', asked.pools, (pool) => ['pool-info', '--bytes', pool]),
    ...keyed('base', asked.baseImages, (image) => volInfo(image.pool, image.volume)),
    ...keyed('net', asked.networks, (network) => ['net-info', network]),
    ...keyed('dev', asked.macvtapDevices, (device) => ({ shell: commandLine(['ip', '-o', 'link', 'show', 'dev', device]) })),
    ...keyed('vol', asked.volumes, (volume) => volInfo(volume.pool, volume.name)),
    ...keyed('state', asked.members, (member) => ['domstate', member]),
    ...keyed('ping', asked.members, (member) => ['qemu-agent-command', '--timeout', '5', member, PING]),
  ]);
}

/** The answers to groundQuestions, read. */
export function reachedFacts(asked: GroundAsked, answers: Record<string, ProbeAnswer>): ReachedFacts {
  const answer = (key: string) => answers[key]!;
  const libvirt = libvirtVersion(answer('version'));
  return {
    reachable: true,
    ...(libvirt ? { libvirt } : {}),
    kvm: { device: /^device$/m.test(answer('kvm').output), cpu: /^cpu$/m.test(answer('kvm').output) },
    pools: asked.pools.map((pool, i) => poolFacts(pool, answer(`pool${i}`))),
    baseImages: asked.baseImages.map((image, i) => volumeFacts(image.pool, image.volume, answer(`base${i}`))),
    networks: asked.networks.map((network, i) => networkFacts(network, answer(`net${i}`))),
    macvtap: asked.macvtapDevices.map((device, i) => ({ device, present: answer(`dev${i}`).code === 0 })),
    existingVolumes: asked.volumes.filter((_, i) => answer(`vol${i}`).code === 0).map((volume) => `${volume.pool}/${volume.name}`),
    running: asked.members.flatMap((member, i) =>
      answer(`state${i}`).code === 0 && answer(`state${i}`).output.trim() === 'running'
        ? [{ member, agent: answer(`ping${i}`).code === 0 }]
        : [],
    ),
  };
}

/** Every hypervisor asked at once; one that cannot be reached says why, and the others are asked all the same. */
export async function gatherDoctorFacts(inventory: Inventory, connections: HypervisorConnections): Promise<DoctorFacts> {
  const hypervisors = await Promise.all(
    groundAsked(inventory).map(async (asked): Promise<HypervisorFacts> => {
      try {
        const virsh = new Virsh(await connections.get(asked.hypervisor), asked.hypervisor.libvirtUri);
        return { asked, ...reachedFacts(asked, await virsh.probe(groundQuestions(asked))) };
      } catch (error) {
        // Said without the hypervisor's own name, which the check's subject carries.
        const unreachable = connections.unreachable.get(asked.hypervisor.name);
        const reason = unreachable?.detail ? `${unreachable.at}: ${unreachable.detail}` : (error as Error).message;
        return { asked, reachable: false, reason };
      }
    }),
  );
  return { control: controlNodeFacts(), hypervisors };
}
