import type { Inventory, Member } from '../inventory/model.ts';
import { peerUrl } from '../inventory/urls.ts';

/** etcd's uint64 IDs arrive as decimal strings; hex is how etcd and etcdctl's tables show them. */
export const hexId = (decimal: string): string => BigInt(decimal).toString(16);

/**
 * Who is in the cluster, decided from etcd's own member list, pure. Members are matched by their
 * peer URL (what etcd knows a member by before it has started and told its name). A member the
 * inventory has and etcd does not joins as a learner, one at a time (etcd allows one learner), and is
 * promoted once it has caught up. A member leaves only when the inventory marks it `state: absent`,
 * never on the strength of a missing entry.
 */

export interface LiveMember {
  /** etcd's uint64 member ID, as its API gives it (decimal). */
  id: string;
  /** Empty until the member has started and joined. */
  name: string;
  peerURLs: string[];
  isLearner: boolean;
}

/** etcd's answer for one member (etcd3's `IMember`), as the plans read it. */
export const liveMember = (m: { ID: string; name: string; peerURLs: string[]; isLearner?: boolean }): LiveMember => ({
  id: m.ID,
  name: m.name,
  peerURLs: m.peerURLs,
  isLearner: Boolean(m.isLearner),
});

/** Where a joining member stands: not added yet, added as a learner but not started, started as a learner. */
export type JoinStage = 'to-add' | 'added' | 'learning';

export interface Joiner {
  member: Member;
  stage: JoinStage;
  /** Set once etcd has it. */
  id?: string;
}

export interface MembershipPlan {
  /** Inventory members that are voting members now. */
  voting: Member[];
  /** Inventory members still to join, in the inventory's order; they join strictly one after another. */
  joiners: Joiner[];
  /**
   * Members marked `state: absent`, each with its etcd ID while etcd still has it; they leave one
   * after another (their VMs are undefined even once etcd has let them go).
   */
  leavers: { member: Member; id?: string }[];
  /**
   * Members to replace (a disk gone, named by --replace, or a replacement an earlier run began): removed
   * with their VM and volumes, then they join again as new members (they are among the joiners too).
   * `id` while etcd still lists the member; without it, only its VM and volumes are left to go.
   */
  replacements: { member: Member; id?: string; why: string }[];
}

export interface MembershipOptions {
  /** Members the operator asked to replace (--replace). */
  replace?: ReadonlySet<string>;
  /** Members whose OS or data volume is gone, with what is gone. */
  disksGone?: ReadonlyMap<string, string>;
  /**
   * Members whose libvirt domain carries the being-replaced mark (replacingQuestion in
   * steps/depart.ts): a replacement an earlier run began and did not finish. Once etcd has let the
   * member go, the mark is all that says its old VM and disks must go before it joins again.
   */
  markedReplacing?: ReadonlySet<string>;
}

export class MembershipRefusal extends Error {}

const describe = (live: LiveMember) =>
  `${live.name || '(not started)'} (ID ${BigInt(live.id).toString(16)}, ${live.peerURLs.join(', ')}${live.isLearner ? ', learner' : ''})`;

/**
 * Why a member is to be replaced, if it is. A replacement an earlier run began is finished whatever etcd
 * lists now; --replace of a member etcd no longer lists is a replacement too (its old VM and disks go,
 * then it joins), never a plain join on them. A learner is not replaced on request: the join it
 * belongs to goes on, on disks made for that join.
 */
function replacementReason(name: string, live: LiveMember | undefined, options: MembershipOptions): string | undefined {
  if (options.replace?.has(name) && !live?.isLearner) return 'asked by --replace';
  if (options.markedReplacing?.has(name)) return 'a replacement an earlier run began (its domain is marked as being replaced)';
  return live && !live.isLearner ? options.disksGone?.get(name) : undefined;
}

export function planMembership(inventory: Inventory, list: readonly LiveMember[], options: MembershipOptions = {}): MembershipPlan {
  const problems: string[] = [];
  const claimed = new Set<LiveMember>();
  const voting: Member[] = [];
  const joiners: Joiner[] = [];
  const replacements: MembershipPlan['replacements'] = [];
  let replacedVoters = 0;
  for (const member of inventory.members) {
    const url = peerUrl(inventory, member);
    const live = list.find((candidate) => candidate.peerURLs.includes(url));
    const namesake = list.find((candidate) => candidate.name === member.name);
    if (namesake && namesake !== live) {
      problems.push(
        `etcd has a member named ${member.name} at ${namesake.peerURLs.join(', ')}, ` +
          `but the inventory puts ${member.name} at ${url}: a member's address is not changed in place (remove ` +
          `it with etcdctl member remove ${BigInt(namesake.id).toString(16)} and run again to add it back)`,
      );
      continue;
    }
    if (live?.name && live.name !== member.name) {
      problems.push(`etcd's member at ${url} is named ${live.name}, but the inventory names ${member.name} there`);
      continue;
    }
    if (live) claimed.add(live);
    const why = replacementReason(member.name, live, options);
    if (why) {
      replacements.push({ member, ...(live ? { id: live.id } : {}), why });
      if (live && !live.isLearner) replacedVoters += 1;
      joiners.push({ member, stage: 'to-add' });
    } else if (live && !live.isLearner) voting.push(member);
    else joiners.push({ member, stage: !live ? 'to-add' : live.name ? 'learning' : 'added', ...(live ? { id: live.id } : {}) });
  }
  const leavers = inventory.absentMembers.map((member) => {
    const live = list.find((candidate) => candidate.peerURLs.includes(peerUrl(inventory, member)));
    if (live) claimed.add(live);
    return { member, ...(live ? { id: live.id } : {}) };
  });
  const strangers = list.filter((live) => !claimed.has(live));
  for (const stranger of strangers) {
    problems.push(
      `etcd has member ${describe(stranger)}, which the inventory does not have. ` +
        `Leaving a member out of the inventory does not remove it; ` +
        `remove it with etcdctl member remove ${BigInt(stranger.id).toString(16)} ` +
        `or mark it state: absent in the inventory to have it removed, or add it back`,
    );
  }
  // etcd accepts one learner at a time: a second joiner waits for the first to be promoted.
  const learners = list.filter((live) => live.isLearner);
  if (learners.length > 1)
    problems.push(`etcd has ${learners.length} learners (${learners.map(describe).join('; ')}); it allows one at a time`);
  if (replacedVoters > 0 && voting.length === 0)
    problems.push(
      `every voting member is to be replaced (${replacements.map((r) => `${r.member.name}: ${r.why}`).join('; ')}): ` +
        `the cluster would be gone; restore it from a snapshot instead`,
    );
  else if (voting.length === 0 && joiners.length > 0)
    problems.push(
      'no member of the inventory is a voting member of the cluster etcd answers for: ' +
        'this is another cluster, or its members all changed address',
    );
  if (problems.length > 0)
    throw new MembershipRefusal(`the cluster's members do not match the inventory: ${problems.join('; ')}. Nothing was changed.`);
  // A half-joined learner (a run stopped after adding it) goes first: etcd will not add another before it is promoted.
  joiners.sort((a, b) => Number(a.stage === 'to-add') - Number(b.stage === 'to-add'));
  return { voting, joiners, leavers, replacements };
}

/** The cluster as it is after `members` (a subset, in inventory order): what a step sees while a member joins. */
export function inventoryOf(inventory: Inventory, members: readonly Member[]): Inventory {
  const names = new Set(members.map((member) => member.name));
  return { ...inventory, members: inventory.members.filter((member) => names.has(member.name)) };
}
