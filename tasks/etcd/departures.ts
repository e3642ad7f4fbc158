import type { Inventory, Member } from '../inventory/model.ts';
import { peerUrl } from '../inventory/urls.ts';
import type { LiveMember } from './membership.ts';

/**
 * Members leaving in one run, pure. etcd commits a MemberRemove with a quorum of the voting members
 * it has when the removal is proposed, and from then on every decision — the next removal included —
 * needs a quorum of the voting members left. Departing members not removed yet still vote, so a
 * removal that leaves a healthy member's place to one that is down can lose the quorum for good:
 * with etcd-3 down, removing etcd-2 first leaves {etcd-1, etcd-3}, one of two up, and etcd-3's
 * removal can no longer commit. Hence: members known to be down go first, and each removal is
 * judged against the voting set right after it (the departure step refuses the rest).
 */

/**
 * `leave`: a member marked state: absent goes, its volumes kept. `replace`: a member whose disk is gone
 * (or named by --replace) goes with everything it had, so that it joins again empty and takes its data
 * from the cluster, never from an old disk or a snapshot.
 */
export type Departure = 'leave' | 'replace';

export interface Departing {
  departure: Departure;
  member: Member;
}

/**
 * What is known of a departing member's etcd before any departure: `down` (its VM does not run, or
 * its etcd does not answer with a leader), `up`, or `unknown` (its hypervisor did not answer).
 */
export type KnownHealth = 'down' | 'unknown' | 'up';

// Down first: its removal costs no healthy vote. Unknown next: if it is down after all, it had better
// go before a healthy one; if it is up, its place among the up ones does not matter.
const RANK: Record<KnownHealth, number> = { down: 0, unknown: 1, up: 2 };

/** The departures in the order they run: known down, unknown, up; otherwise as given (replacements, then leavers). */
export function orderDepartures(departing: readonly Departing[], health: ReadonlyMap<string, KnownHealth>): Departing[] {
  const rank = (d: Departing) => RANK[health.get(d.member.name) ?? 'unknown'];
  // Array.prototype.sort is stable: equals keep the order they were given in.
  return [...departing].sort((a, b) => rank(a) - rank(b));
}

/** From the domain's state and etcd's answer, each undefined when it could not be asked. */
export function knownHealth(facts: { domainRunning?: boolean | undefined; etcdHasLeader?: boolean | undefined }): KnownHealth {
  // etcd's answer is the newer fact: the domain's state may have been asked at the start of the run.
  if (facts.etcdHasLeader === true) return 'up';
  if (facts.domainRunning === false) return 'down';
  // A running VM whose etcd does not answer with a leader gives the cluster no vote either; with the
  // domain's state unknown, no answer may only mean that its hypervisor does not answer.
  if (facts.domainRunning === true && facts.etcdHasLeader === false) return 'down';
  return 'unknown';
}

export interface VotingSets {
  /** The voting members etcd lists now, among those that stay and those that depart: each one's health is judged against this list. */
  now: Member[];
  /** Those left right after `member` is removed: what must keep a healthy quorum. */
  after: Member[];
}

/**
 * The voting members around one removal, from etcd's member list (its voters are what the quorum is
 * counted over, whatever the inventory believes): those that stay and the departing ones etcd still
 * lists as voters — `member` among them now, never after. `assumedRemoved`: a dry-run's departures
 * before this one, which it planned and did not apply: etcd still lists them, but a real run will have
 * removed them by then (and, where one failed, judges this removal on etcd's list as it then is).
 */
export function votingSets(
  inventory: Inventory,
  list: readonly LiveMember[],
  member: Member,
  how: { staying: readonly Member[]; alsoDeparting: readonly Member[]; assumedRemoved?: readonly Member[] },
): VotingSets {
  const votes = (m: Member) => list.some((live) => !live.isLearner && live.peerURLs.includes(peerUrl(inventory, m)));
  const byName = new Map([...how.staying, member, ...how.alsoDeparting].map((m) => [m.name, m]));
  const now = [...byName.values()].filter(votes);
  const gone = new Set([member, ...(how.assumedRemoved ?? [])].map((m) => m.name));
  return { now, after: now.filter((m) => !gone.has(m.name)) };
}
