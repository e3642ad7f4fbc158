import type { Member } from '../inventory/model.ts';
import type { MemberClients } from './client.ts';
import { hexId } from './membership.ts';

/** One member as its own etcd tells it (Maintenance.Status), with IDs in hex as etcdctl shows them. */
export interface EtcdMemberFacts {
  /** etcd's member ID, as hex (etcdctl's table and logs use hex). */
  id: string;
  leader: string;
  isLearner: boolean;
  raftTerm: string;
  /** The key-value store's revision. */
  revision: string;
  raftIndex: string;
  appliedIndex: string;
  dbSize: number;
  dbSizeInUse: number;
  version: string;
  errors: string[];
}

/** A member's Status, asked of that member. */
export async function memberStatus(clients: MemberClients, member: Member): Promise<EtcdMemberFacts> {
  const client = await clients.for(member);
  const status = await client.maintenance.status({});
  return {
    id: hexId(status.header.member_id),
    leader: hexId(status.leader),
    isLearner: status.isLearner,
    raftTerm: status.raftTerm,
    revision: status.header.revision,
    raftIndex: status.raftIndex,
    appliedIndex: status.raftAppliedIndex,
    dbSize: Number(status.dbSize),
    dbSizeInUse: Number(status.dbSizeInUse),
    version: status.version,
    errors: status.errors,
  };
}
