import { missingObject, type ProbeAnswer } from './virsh.ts';

/**
 * Is a listed member's disk gone for certain, so that the run may replace it without being asked?
 * A replacement removes the member from etcd and deletes its VM: it needs definite evidence, never a
 * failed question. Definite means all of: the hypervisor answered, the pool exists and libvirt says the
 * volume does not (a missing pool — a mistyped volume_pool — says nothing about the volume), and the
 * member's etcd does not answer (a VM can run on a deleted file it still holds open). Anything less
 * replaces nothing: the volumes step then reports what it saw for that member and stops there.
 * A member whose data disk is there has lost no etcd data with its OS disk: the volumes step makes
 * the OS disk again on the base image, as an image rebuild does (and a rebuild killed between the
 * old disk's deletion and the new one's creation resumes that way).
 */

export interface DiskFacts {
  /** `virsh vol-info` of the OS volume and, when the member has one, of the data volume. */
  os: ProbeAnswer;
  data?: ProbeAnswer;
  /** Did the member's etcd answer just now? Asked only when a volume is missing. */
  etcdAnswers: () => Promise<boolean>;
}

export type DiskVerdict = { gone: true; why: string } | { gone: false; why?: string };

const volumesMissing = (facts: DiskFacts): string[] =>
  (
    [
      ['OS', facts.os],
      ['data', facts.data],
    ] as const
  ).flatMap(([which, answer]) => (answer && missingObject(answer) === 'volume' ? [`its ${which} volume is gone`] : []));

/** Unreadable answers (a missing pool, an error) are not evidence: the member is kept. */
const unreadable = (facts: DiskFacts): string[] =>
  [facts.os, facts.data].flatMap((answer) =>
    answer && answer.code !== 0 && missingObject(answer) !== 'volume'
      ? [
          answer.output
            .trim()
            .split('\n')
            .at(-1)!
            .replace(/^error: /, ''),
        ]
      : [],
  );

export async function judgeDisks(facts: DiskFacts): Promise<DiskVerdict> {
  const missing = volumesMissing(facts);
  if (missing.length === 0) return { gone: false };
  if (facts.data?.code === 0) return { gone: false };
  const unknown = unreadable(facts);
  if (unknown.length > 0)
    return { gone: false, why: `${missing.join(' and ')}, but libvirt could not say about the rest (${unknown.join('; ')})` };
  if (await facts.etcdAnswers())
    return { gone: false, why: `${missing.join(' and ')}, but its etcd still answers (the VM may hold the deleted file open)` };
  return { gone: true, why: `${missing.join(' and ')} and its etcd does not answer` };
}
