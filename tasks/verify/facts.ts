import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { briefError } from '../core/errors.ts';
import type { ClientIdentity, EtcdClients } from '../etcd/client.ts';
import { alarmsIn } from '../etcd/health.ts';
import { memberStatus } from '../etcd/member-status.ts';
import { hexId } from '../etcd/membership.ts';
import { hashKV } from '../etcd/hash-kv.ts';
import { servedCertificate } from '../etcd/served-certificate.ts';
import { versionOf } from '../etcd/version.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import { TOOL_KEY_PREFIX } from '../inventory/reserved.ts';
import { failed, pinRevision, type Answer, type MemberVerifyFacts, type VerifyFacts } from './verdict.ts';

/**
 * What `verify` reads, in three rounds, changing nothing but its canary: each member's status, member list and
 * served certificate; then every voting member's HashKV at the revision pinned from those statuses (before the
 * canary moves the revision on); then the canary, written once through the first voting member that answered,
 * read back linearizably through every voting member, and deleted.
 */

/** Where the canary is written: under the tool's own prefix, which applications may not use. */
export const CANARY_KEY = `${TOOL_KEY_PREFIX}verify/canary`;

const settle = async <T>(work: () => Promise<T>): Promise<Answer<T>> => {
  try {
    return await work();
  } catch (error) {
    return { error: briefError(error) };
  }
};

/** A member's own status, as verify reads it, or why it did not answer. */
export const statusAnswer = (clients: EtcdClients, member: Member): Promise<MemberVerifyFacts['status']> =>
  settle(async () => {
    const own = await memberStatus(clients, member);
    return {
      id: own.id,
      isLearner: own.isLearner,
      revision: Number(own.revision),
      appliedIndex: Number(own.appliedIndex),
      version: own.version,
      alarms: alarmsIn(own.errors),
    };
  });

/** Each member's HashKV at the revision pinned from the statuses (the voting members that answered), or why not. */
export async function hashesAt(
  clients: EtcdClients,
  members: readonly Member[],
  statuses: readonly MemberVerifyFacts['status'][],
  /** Who asks (HashKV is root's alone once auth is on): the clients' own identity unless given. */
  identity?: ClientIdentity,
): Promise<{ hashes: Map<string, NonNullable<MemberVerifyFacts['hash']>>; pinnedRevision?: number }> {
  const voting = members.filter((_, i) => {
    const status = statuses[i]!;
    return !failed(status) && !status.isLearner;
  });
  const pinnedRevision = pinRevision(statuses.flatMap((status) => (failed(status) ? [] : [status])));
  const hashes = new Map<string, NonNullable<MemberVerifyFacts['hash']>>();
  if (pinnedRevision === undefined) return { hashes };
  await Promise.all(
    voting.map(async (member) => {
      hashes.set(member.name, await settle(async () => hashKV(await clients.for(member, identity), pinnedRevision)));
    }),
  );
  return { hashes, pinnedRevision };
}

async function firstRound(clients: EtcdClients, identity: ClientIdentity, member: Member): Promise<MemberVerifyFacts> {
  const [status, memberList, certificate] = await Promise.all([
    statusAnswer(clients, member),
    settle(async () => {
      const listed = await (await clients.for(member)).cluster.memberList({});
      return listed.members.map((m) => `${hexId(m.ID)}${m.isLearner ? ' (learner)' : ''}`).sort();
    }),
    settle(() => servedCertificate(clients, member, identity)),
  ]);
  return { name: member.name, status, memberList, certificate };
}

export async function gatherVerifyFacts(inventory: Inventory, clients: EtcdClients, identity: ClientIdentity): Promise<VerifyFacts> {
  const at = new Date();
  const members = await Promise.all(inventory.members.map((member) => firstRound(clients, identity, member)));
  const voting = inventory.members.filter((_, i) => {
    const { status } = members[i]!;
    return !failed(status) && !status.isLearner;
  });
  const byName = new Map(members.map((facts) => [facts.name, facts]));
  const { hashes, pinnedRevision } = await hashesAt(
    clients,
    inventory.members,
    members.map(({ status }) => status),
  );
  for (const [name, hash] of hashes) byName.get(name)!.hash = hash;
  const canary = await writeCanary(clients, voting, byName);
  const clusterVersion = await clusterVersionOf(clients, voting[0], identity);
  return { members, ...(pinnedRevision !== undefined ? { pinnedRevision } : {}), ...canary, clusterVersion, at };
}

/** The canary written through the first voting member, read through each, then deleted (a failed delete is said). */
async function writeCanary(
  clients: EtcdClients,
  voting: readonly Member[],
  byName: Map<string, MemberVerifyFacts>,
): Promise<Pick<VerifyFacts, 'canaryValue' | 'canaryError'>> {
  const writer = voting[0];
  if (!writer) return { canaryError: 'no voting member answered' };
  const value = `${hostname()} ${process.pid} ${new Date().toISOString()} ${randomBytes(8).toString('hex')}`;
  const written = await settle(async () => {
    await (await clients.for(writer)).put(CANARY_KEY).value(value);
    return {};
  });
  if (failed(written)) return { canaryError: `through ${writer.name}: ${written.error}` };
  await Promise.all(
    voting.map(async (member) => {
      byName.get(member.name)!.canary = await settle(async () => ({
        read: (await (await clients.for(member)).get(CANARY_KEY).string()) ?? undefined,
      }));
    }),
  );
  const removed = await settle(async () => {
    await (await clients.for(writer)).delete().key(CANARY_KEY);
    return {};
  });
  if (failed(removed)) console.error(`warning: the canary ${CANARY_KEY} was not deleted (${removed.error}): etcdctl del ${CANARY_KEY}`);
  return { canaryValue: value };
}

async function clusterVersionOf(
  clients: EtcdClients,
  member: Member | undefined,
  identity: ClientIdentity,
): Promise<VerifyFacts['clusterVersion']> {
  if (!member) return { error: 'no voting member answered' };
  return settle(async () => ({ version: (await versionOf(clients, member, identity)).etcdcluster }));
}
