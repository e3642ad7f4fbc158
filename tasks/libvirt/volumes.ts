import type { ProbeAnswer } from './virsh.ts';
import { isNotFound, missingObject, virshSays } from './virsh.ts';

/** Reading `virsh vol-info --bytes` answers. */

export type VolumeState = { exists: false } | { exists: true; capacityBytes: number };

export function volumeState(answer: ProbeAnswer, what: string): VolumeState {
  if (answer.code === 0) {
    const capacity = answer.output.match(/^Capacity:\s+(\d+)/m)?.[1];
    return { exists: true, capacityBytes: capacity ? Number(capacity) : 0 };
  }
  if (isNotFound(answer, 'volume')) return { exists: false };
  const said = virshSays(answer);
  const hint =
    missingObject(answer) === 'pool'
      ? ' (the pool is missing on that hypervisor, so whether the volume exists ' +
        'is unknown: check volume_pool; virsh pool-list --all lists the pools)'
      : '';
  throw new Error(`cannot read ${what}: ${said}${hint}`);
}

export const GIB = 1024 ** 3;

export const volInfo = (pool: string, volume: string) => ['vol-info', '--bytes', '--pool', pool, volume];
