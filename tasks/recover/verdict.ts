import { quorumOf } from '../etcd/roll.ts';

/**
 * Has the cluster lost its quorum for good, and from which member could it come back? Pure: the
 * facts of each member in, a verdict out. Lost for good means that the members that still hold
 * their data (their etcd answers, or their VM or disks are still there and a deploy could start them)
 * are fewer than a quorum of the voting members. A cluster whose etcd is merely down everywhere (a
 * power cut) has not lost its quorum: a deploy starts it again, and recover refuses it.
 */

export interface MemberQuorumFacts {
  name: string;
  /** Its etcd's own status, when it answered: its raft index, revision and the leader it knows ('0': none). */
  etcd?: { id: string; leader: string; raftIndex: bigint; revision: bigint; isLearner: boolean };
  /** Why its etcd did not answer. */
  silent?: string;
  /** Its OS or data volume is gone for certain (libvirt says so, and its etcd does not answer): its data is gone. */
  dataGone?: string;
}

export interface Survivor {
  name: string;
  /** Its etcd member ID (hex), which a recovery record binds to. */
  id: string;
  raftIndex: bigint;
  revision: bigint;
}

export type QuorumVerdict =
  | { kind: 'quorum'; leader: string; why: string }
  | { kind: 'may-return'; why: string }
  | { kind: 'lost'; why: string; survivors: Survivor[]; gone: string[]; voting: number };

/**
 * `voting` is the number of voting members etcd's member list names (from a survivor), or the
 * inventory's member count when no member answered.
 */
export function judgeQuorum(members: readonly MemberQuorumFacts[], voting: number): QuorumVerdict {
  const needed = quorumOf(voting);
  const leading = members.find((member) => member.etcd && member.etcd.leader !== '0');
  if (leading)
    return {
      kind: 'quorum',
      leader: leading.name,
      why: `${leading.name} knows a leader (${leading.etcd!.leader}): the cluster has a quorum`,
    };
  const survivors = members
    .filter((member) => member.etcd && !member.etcd.isLearner)
    .map(({ name, etcd }): Survivor => ({ name, id: etcd!.id, raftIndex: etcd!.raftIndex, revision: etcd!.revision }));
  const gone = members.filter((member) => !member.etcd && member.dataGone).map((member) => member.name);
  const maybe = members.filter((member) => !member.etcd && !member.dataGone);
  if (survivors.length + maybe.length >= needed) {
    const waiting = maybe.map((member) => `${member.name} (${member.silent ?? 'not answering'})`);
    return {
      kind: 'may-return',
      why: `${survivors.length + maybe.length} of ${voting} voting members still hold their data, a quorum is ${needed}: ${
        waiting.length ? `run the deploy, which starts ${waiting.join(', ')}` : 'wait for the election to end'
      }`,
    };
  }
  return {
    kind: 'lost',
    why:
      `only ${survivors.length} of ${voting} voting members hold their data ` +
      `(${gone.map((name) => `${name}: ${members.find((m) => m.name === name)!.dataGone}`).join('; ')}); a quorum is ${needed}`,
    survivors,
    gone,
    voting,
  };
}

/** The most advanced survivor: the highest raft index, then revision, then name (the same choice on every run). */
export function chooseSurvivor(survivors: readonly Survivor[], named?: string): Survivor | { refused: string } {
  if (named !== undefined) {
    const survivor = survivors.find((candidate) => candidate.name === named);
    return (
      survivor ?? {
        refused:
          `${named} is not a survivor: its etcd does not answer with its data ` +
          `(survivors: ${survivors.map((s) => s.name).join(', ') || 'none'})`,
      }
    );
  }
  const ranked = [...survivors].sort((a, b) =>
    a.raftIndex !== b.raftIndex
      ? a.raftIndex > b.raftIndex
        ? -1
        : 1
      : a.revision !== b.revision
        ? a.revision > b.revision
          ? -1
          : 1
        : a.name.localeCompare(b.name),
  );
  return ranked[0] ?? { refused: 'no member survived with its data: only a snapshot can bring the cluster back (--from-snapshot)' };
}

/** What a recovery record must match to be resumed: this state directory's cluster, and its survivor as it answers now. */
export interface RecordBinding {
  record: { from: string; clusterId?: string; memberId?: string };
  clusterId: string;
  /** The survivor's facts now (its etcd member ID, when it answers). */
  survivor?: MemberQuorumFacts;
}

/**
 * Why a record is not this recovery's, or undefined when it is: written for another cluster (a state directory
 * copied from elsewhere), begun from a member that has been built again since (another member ID), or written by
 * an earlier version that bound it to nothing. Each is refused; a fresh `recover` judges the quorum again.
 */
export function recordRefusal({ record, clusterId, survivor }: RecordBinding): string | undefined {
  const again = 'delete recovery.json and run recover again: it judges the quorum afresh';
  if (record.clusterId === undefined || record.memberId === undefined)
    return `the record names no cluster or member ID (an earlier etcd-kvm wrote it), so nothing binds it to this recovery: ${again}`;
  if (record.clusterId !== clusterId)
    return `the record is cluster ${record.clusterId}'s, and this state directory is cluster ${clusterId}'s: ${again}`;
  const now = survivor?.etcd?.id;
  if (now !== undefined && now !== record.memberId) {
    const rebuilt = `${record.from} answers as member ${now}, and the recovery began from member ${record.memberId}`;
    return `${rebuilt}: it was built again since; ${again}`;
  }
  return undefined;
}

/**
 * What a recovery found under way (recovery.json) still does, from live facts, not from the record: the
 * destructive part (etcd stopped on the other members, their data moved aside, the survivor forced into a
 * cluster of its own) only while the quorum is lost for good. With a quorum (the forced start done and members
 * already rejoined, or a record left behind after the cluster was mended otherwise) nothing is forced again: the
 * deploy finishes the recovery, which changes nothing on a cluster that needs nothing. When the members holding
 * data could form a quorum again (a power cut after the recovery ended, say), a recovery under way would have
 * lost them for good: the record is stale, and nothing is done.
 */
export function resumePlan(from: string, verdict: QuorumVerdict): { force: boolean; say: string } | { refused: string } {
  if (verdict.kind === 'quorum')
    return { force: false, say: `the cluster has a quorum (${verdict.why}): nothing is forced again; the deploy finishes the recovery` };
  if (verdict.kind === 'may-return')
    return {
      refused:
        `the members that hold their data could form a quorum again (${verdict.why}), which no recovery under ` +
        `way leaves: the record is stale. Run the deploy; once the cluster is healthy, delete recovery.json`,
    };
  return {
    force: true,
    say:
      `the quorum is still lost (${verdict.why}): etcd stops on the other members that answer, ` +
      `their data is moved aside, ${from} starts forcing a new cluster, then the deploy`,
  };
}
