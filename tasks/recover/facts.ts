import { setTimeout as delay } from 'node:timers/promises';
import { briefError } from '../core/errors.ts';
import type { EtcdClients } from '../etcd/client.ts';
import { etcdAnswers } from '../etcd/health.ts';
import { memberStatus } from '../etcd/member-status.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { RemoteContext } from '../libvirt/context.ts';
import { judgeDisks, type DiskVerdict } from '../libvirt/lost-disks.ts';
import type { Question } from '../libvirt/virsh.ts';
import { volumeQuestions } from '../steps/volumes.ts';
import type { MemberQuorumFacts } from './verdict.ts';

/**
 * What the quorum verdict reads, read-only: each member's etcd status (raft index, revision, the
 * leader it knows) and, for a member whose etcd is silent, whether libvirt says its disks are gone;
 * etcd's member list from a member that answered, for the number of voting members.
 */

/** A member that does not answer by then is silent: recover decides on members gone, not on slow ones (it is run again). */
const ANSWER_MS = 10_000;

export interface QuorumFacts {
  members: MemberQuorumFacts[];
  /** Voting members in etcd's member list, as a survivor tells it; the inventory's count when none answered. */
  voting: number;
  /** Member names in that list (the inventory's when none answered). */
  listed: string[];
}

async function statusOf(clients: EtcdClients, member: Member): Promise<Pick<MemberQuorumFacts, 'etcd' | 'silent'>> {
  const asked = memberStatus(clients, member).then(
    (status) => ({
      etcd: {
        id: status.id,
        leader: status.leader,
        raftIndex: BigInt(status.raftIndex),
        revision: BigInt(status.revision),
        isLearner: status.isLearner,
      },
    }),
    (error: unknown) => ({ silent: briefError(error) }),
  );
  return Promise.race([asked, delay(ANSWER_MS, { silent: `no answer within ${ANSWER_MS / 1000} s` }, { ref: false })]);
}

/**
 * Is the member's OS or data volume gone for certain (judgeDisks: libvirt says so, and its etcd does not
 * answer)? A hypervisor that does not answer, or a member without a volume the tool makes, says no.
 * The deploy asks it of the members etcd lists, to replace them; the quorum verdict of silent members.
 */
export async function diskVerdict(remote: RemoteContext, clients: EtcdClients, member: Member): Promise<DiskVerdict> {
  const { os, data } = volumeQuestions(member);
  if (!os) return { gone: false };
  const questions: Record<string, Question> = data ? { os, data } : { os };
  const answers = await remote.probe(member, questions).catch(() => undefined);
  if (!answers?.os) return { gone: false };
  return judgeDisks({
    os: answers.os,
    ...(answers.data ? { data: answers.data } : {}),
    etcdAnswers: () => etcdAnswers(clients, member),
  });
}

export async function gatherQuorumFacts(inventory: Inventory, remote: RemoteContext, clients: EtcdClients): Promise<QuorumFacts> {
  const members = await Promise.all(
    inventory.members.map(async (member): Promise<MemberQuorumFacts> => {
      const status = await statusOf(clients, member);
      if (status.etcd) return { name: member.name, etcd: status.etcd };
      const disks = await diskVerdict(remote, clients, member);
      return { name: member.name, ...status, ...(disks.gone ? { dataGone: disks.why } : {}) };
    }),
  );
  for (const member of inventory.members.filter((m) => members.find((f) => f.name === m.name)?.etcd)) {
    try {
      const client = await clients.for(member);
      const list = await client.cluster.memberList({});
      const voting = list.members.filter((m) => !m.isLearner);
      return { members, voting: voting.length, listed: list.members.map((m) => m.name) };
    } catch {
      // The next survivor's list.
    }
  }
  return { members, voting: inventory.members.length, listed: inventory.members.map((member) => member.name) };
}
