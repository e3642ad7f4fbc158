import { setTimeout as delay } from 'node:timers/promises';
import type { Inventory, Member } from '../inventory/model.ts';
import type { MemberClients } from './client.ts';
import { briefError } from '../core/errors.ts';
import { liveMember, type LiveMember } from './membership.ts';
import { memberStatus } from './member-status.ts';

/**
 * Is a member healthy, as etcd itself answers: it has a leader, and its member list is exactly the
 * inventory's members with https peer and client URLs.
 */

/** `alarms`: the cluster's active alarms as this member reports them (NOSPACE: writes are refused). */
export type Health = { healthy: true; leader: string; alarms: string[] } | { healthy: false; reason: string };

/** One active alarm: the member it is raised on (etcd's decimal ID, as its answers carry it) and its kind (NOSPACE, CORRUPT). */
export interface ListedAlarm {
  memberId: string;
  alarm: string;
}

/**
 * The cluster's active alarms, as members' statuses list them among their errors ("memberID:<id>
 * alarm:NOSPACE"), once each. Every member lists all of them from its own applied state, so they are
 * known without a leader. Never Maintenance.Alarm's Get: etcd puts every alarm request through raft,
 * an entry in every member's log at each ask, and no answer without quorum.
 */
export function alarmsListed(errorLists: readonly (readonly string[])[]): ListedAlarm[] {
  const seen = new Map<string, ListedAlarm>();
  for (const error of errorLists.flat()) {
    const match = /memberID:(\d+) alarm:([A-Z]+)/.exec(error);
    if (match) seen.set(`${match[1]} ${match[2]}`, { memberId: match[1]!, alarm: match[2]! });
  }
  return [...seen.values()];
}

/** The kinds of the cluster's active alarms in one member's status errors. */
export const alarmsIn = (errors: readonly string[]): string[] => [...new Set(alarmsListed([errors]).map(({ alarm }) => alarm))];

/** A member's answer to a status call (its alarms read from its errors), or why it gave none. */
export interface MemberAnswer {
  name: string;
  status: { id: string; leader: string; isLearner: boolean; alarms: readonly string[]; raftTerm?: string } | { error: string };
}

/** Every member's status, asked side by side. */
export function memberAnswers(inventory: Inventory, clients: MemberClients): Promise<MemberAnswer[]> {
  return Promise.all(
    inventory.members.map(async (member): Promise<MemberAnswer> => {
      try {
        const status = await memberStatus(clients, member);
        return { name: member.name, status: { ...status, alarms: alarmsIn(status.errors) } };
      } catch (error) {
        return { name: member.name, status: { error: briefError(error) } };
      }
    }),
  );
}

/**
 * What keeps a cluster from being whole, the bar for adding load on purpose (a restore drill, a fault drill): every
 * member answers, none is a learner, none reports an alarm, and all name one leader. Empty when whole; with the
 * leader's ID all of them name.
 */
export function wholeCluster(answers: readonly MemberAnswer[]): { unwhole: string[]; leaderId?: string } {
  const unwhole = answers.flatMap(({ name, status }) => {
    if ('error' in status) return [`${name} does not answer (${status.error})`];
    if (status.isLearner) return [`${name} is a learner`];
    if (status.alarms.length > 0) return [`${name} reports ${status.alarms.join(', ')}`];
    return [];
  });
  const leaders = new Set(answers.flatMap(({ status }) => ('error' in status ? [] : [status.leader])));
  if (leaders.size !== 1 || leaders.has('0')) return { unwhole: [...unwhole, 'the members do not name one leader'] };
  return { unwhole, leaderId: [...leaders][0] };
}

export async function memberHealth(inventory: Inventory, clients: MemberClients, member: Member): Promise<Health> {
  try {
    const client = await clients.for(member);
    const [status, list] = await Promise.all([client.maintenance.status({}), client.cluster.memberList({})]);
    if (!status.leader || status.leader === '0') return { healthy: false, reason: 'no leader elected yet' };
    const problems: string[] = [];
    // Voting members only: a learner joining (and not promoted yet) is the membership steps' business.
    const names = list.members
      .filter((m) => !m.isLearner)
      .map((m) => m.name || `(unstarted ${m.peerURLs.join(',')})`)
      .sort();
    const wanted = inventory.members.map((m) => m.name).sort();
    if (names.join(',') !== wanted.join(',')) problems.push(`member list is ${names.join(', ')}, inventory has ${wanted.join(', ')}`);
    for (const m of list.members) {
      const plain = [...m.peerURLs, ...m.clientURLs].filter((url) => !url.startsWith('https://'));
      if (plain.length > 0) problems.push(`${m.name} advertises non-TLS URLs ${plain.join(', ')}`);
    }
    const leader = list.members.find((m) => m.ID === status.leader)?.name ?? status.leader;
    return problems.length > 0
      ? { healthy: false, reason: problems.join('; ') }
      : { healthy: true, leader, alarms: alarmsIn(status.errors) };
  } catch (error) {
    return { healthy: false, reason: describeEtcdError(error, member) };
  }
}

/** gRPC's "14 UNAVAILABLE: No connection established. Last error: …" says little to an operator. */
function describeEtcdError(error: unknown, member: Member): string {
  const message = error instanceof Error ? error.message.split('\n')[0]! : String(error);
  if (/UNAVAILABLE|ECONNREFUSED|EHOSTUNREACH|socket disconnected/i.test(message))
    return `etcd not reachable at ${member.etcdIp} (${message.replace(/^\d+ UNAVAILABLE: /, '').slice(0, 160)})`;
  return message;
}

/**
 * Polls until healthy; on timeout the error names the member, the last answer and where to look.
 * Each answer goes to `onAnswer` (the run's progress: what the member waits on).
 */
export async function waitForHealth(
  inventory: Inventory,
  clients: MemberClients,
  member: Member,
  timeoutMs: number,
  onAnswer?: (health: Health) => void,
): Promise<Health> {
  const started = Date.now();
  let last: Health = { healthy: false, reason: 'not asked yet' };
  while (Date.now() - started < timeoutMs) {
    last = await memberHealth(inventory, clients, member);
    onAnswer?.(last);
    if (last.healthy) return last;
    // A dead hypervisor connection looks like a member that is down: no answer would ever come through it.
    const unreachable = clients.unreachable(member);
    if (unreachable !== undefined) throw new Error(`etcd on ${member.name} cannot be asked: ${unreachable}`);
    await new Promise((resolve) => setTimeout(resolve, HEALTH_POLL_MS));
  }
  throw new Error(healthFailure(member, timeoutMs, last.healthy ? 'healthy' : last.reason));
}

/** Between two health questions to a member that is not healthy yet. */
export const HEALTH_POLL_MS = 2_000;

/** A member not healthy by its deadline: its last answer, and where to look. */
export const healthFailure = (member: Member, waitedMs: number, lastAnswer: string): string =>
  `etcd on ${member.name} (${member.etcdIp}) not healthy after ${Math.round(waitedMs / 1000)} s; last answer: ${lastAnswer}. ` +
  `Look at its console (virsh -c ${member.hypervisor.libvirtUri} console ${member.name} on hypervisor ${member.hypervisor.name}) ` +
  `and, once it boots, journalctl -u etcd -u cloud-final; cluster.health_timeout sets the wait.`;

/** How long a member's etcd has to answer before it counts as down: a live member answers a status in tens of milliseconds. */
const ANSWER_PROBE_MS = 5_000;

/** The member's status if its etcd answers now, undefined when it does not answer in time. */
async function statusNow(clients: MemberClients, member: Member): Promise<{ leader: string } | undefined> {
  const asked = clients
    .for(member)
    .then((client) => client.maintenance.status({}))
    .then(
      (status) => status,
      () => undefined,
    );
  return Promise.race([asked, delay(ANSWER_PROBE_MS, undefined, { ref: false })]);
}

/** Does the member's etcd answer a status request now (with or without a leader)? */
export const etcdAnswers = async (clients: MemberClients, member: Member): Promise<boolean> =>
  (await statusNow(clients, member)) !== undefined;

/** Does the member's etcd answer now, with a leader? No answer in time is no. */
export async function hasLeaderNow(clients: MemberClients, member: Member): Promise<boolean> {
  const status = await statusNow(clients, member);
  return status !== undefined && Boolean(status.leader) && status.leader !== '0';
}

/** How long the formed-cluster probe waits for any member: a cluster that does not answer by then is treated as not formed. */
const FORMED_PROBE_MS = 8_000;

export interface FormedCluster {
  leader: string;
  /** etcd's member list as the answering member sees it, learners and members not started yet included. */
  members: LiveMember[];
}

/**
 * Has the cluster formed? Any member that answers with a leader says so, whatever its member list
 * (a member joining, or one the inventory lacks, is the membership plan's business). While a cluster
 * is being created nothing answers, and members start as `new`; once it has formed every member's
 * environment says `existing`, so a member that lost its data never founds a second cluster.
 */
export async function formedCluster(clients: MemberClients, members: readonly Member[]): Promise<FormedCluster | undefined> {
  const asks = members.map(async (member): Promise<FormedCluster> => {
    const client = await clients.for(member);
    const [status, list] = await Promise.all([client.maintenance.status({}), client.cluster.memberList({})]);
    if (!status.leader || status.leader === '0') throw new Error('no leader');
    const live = list.members.map(liveMember);
    return { leader: live.find((m) => m.id === status.leader)?.name || status.leader, members: live };
  });
  // An unreferenced timer: it never keeps the process alive after the answer came.
  const timeout = delay(FORMED_PROBE_MS, undefined, { ref: false });
  return Promise.race([Promise.any(asks).catch(() => undefined), timeout]);
}
