import type { ProbeAnswer } from './virsh.ts';
import { isNotFound } from './virsh.ts';

/** Reading `virsh vol-info --bytes` answers. */

export type VolumeState = { exists: false } | { exists: true; capacityBytes: number };

export function volumeState(answer: ProbeAnswer, what: string): VolumeState {
  if (answer.code === 0) {
    const capacity = answer.output.match(/^Capacity:\s+(\d+)/m)?.[1];
    return { exists: true, capacityBytes: capacity ? Number(capacity) : 0 };
  }
  if (isNotFound(answer)) return { exists: false };
  throw new Error(`cannot read ${what}: ${answer.output.trim().split('\n')[0] || `virsh exit ${answer.code}`}`);
}

export const GIB = 1024 ** 3;

export const volInfo = (pool: string, volume: string) => ['vol-info', '--bytes', '--pool', pool, volume];
