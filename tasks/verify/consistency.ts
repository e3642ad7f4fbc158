import type { Etcd3 } from 'etcd3';
import type { ClientIdentity, EtcdClients } from '../etcd/client.ts';
import type { Member } from '../inventory/model.ts';
import { MISMATCH_KEY } from '../inventory/lock-keys.ts';
import { hashesAt, statusAnswer } from './facts.ts';
import { hashChecks, type Check, type MemberVerifyFacts } from './verdict.ts';

/**
 * The members agree after a run that changed one of them, and the run itself says so: every voting member's HashKV
 * at one pinned revision, compared as `verify` compares it (verdict.ts's hashkv check). A difference fails the run
 * and is recorded in etcd (MISMATCH_KEY): from then on every run refuses its first change, until an operator who
 * looked runs with --accept-mismatch. That run compares again, whatever it changed, and removes the record once
 * the members agree. In etcd, not in the state directory: every operator's clone of it sees the same record.
 */

export { MISMATCH_KEY };

/** What a run that found the members' data different left for the runs after it. */
export interface MismatchRecord {
  /** When it was found (ISO 8601). */
  at: string;
  /** The hashkv check's words: the revision and each member's hash. */
  detail: string;
}

/** One comparison's outcome: the members agree, their data differ, or it could not be told (ask again). */
export type Comparison = { kind: 'agree'; detail: string } | { kind: 'differ'; detail: string } | { kind: 'unknown'; detail: string };

/** Pure: the hashkv check's lines, judged. A member that did not answer, or a compaction meanwhile, is no proof either way. */
export function judgeComparison(checks: readonly Check[]): Comparison {
  const detail = checks.map(({ member, detail }) => (member ? `${member}: ${detail}` : detail)).join('; ');
  if (checks.some((check) => check.mismatch)) return { kind: 'differ', detail };
  if (checks.length > 0 && checks.every((check) => check.ok)) return { kind: 'agree', detail };
  return { kind: 'unknown', detail };
}

/** Asks every member's status, then (as root) the voting members' HashKV at the lowest current revision among them. */
export async function compareMembers(clients: EtcdClients, members: readonly Member[], root: ClientIdentity): Promise<Comparison> {
  const statuses = await Promise.all(members.map((member) => statusAnswer(clients, member)));
  const { hashes, pinnedRevision } = await hashesAt(clients, members, statuses, root);
  const asked: Pick<MemberVerifyFacts, 'name' | 'hash'>[] = members.map((member) => ({
    name: member.name,
    ...(hashes.has(member.name) ? { hash: hashes.get(member.name)! } : {}),
  }));
  return judgeComparison(hashChecks({ members: asked, ...(pinnedRevision !== undefined ? { pinnedRevision } : {}) }));
}

/** How often, and how far apart, a comparison that could not tell is asked again (a member still catching up, a compaction). */
export const COMPARISON_ATTEMPTS = 5;
export const COMPARISON_RETRY_MS = 3_000;

/** Compares until the answer is definite, or the attempts are spent (the last answer, unknown). */
export async function compareUntilDefinite(
  compare: () => Promise<Comparison>,
  attempts = COMPARISON_ATTEMPTS,
  retryMs = COMPARISON_RETRY_MS,
): Promise<Comparison> {
  for (let attempt = 1; ; attempt++) {
    const comparison = await compare();
    if (comparison.kind !== 'unknown' || attempt >= attempts) return comparison;
    await new Promise((resolve) => setTimeout(resolve, retryMs));
  }
}

/** Asks the members in order, as root, until one answers. */
async function throughFirst<T>(
  clients: EtcdClients,
  members: readonly Member[],
  root: ClientIdentity,
  ask: (client: Etcd3) => Promise<T>,
): Promise<T> {
  const failures: string[] = [];
  for (const member of members) {
    try {
      return await ask(await clients.for(member, root));
    } catch (error) {
      failures.push(`${member.name}: ${(error as Error).message.split('\n')[0]}`);
    }
  }
  throw new Error(`no member answers: ${failures.join('; ')}`);
}

export async function readMismatch(
  clients: EtcdClients,
  members: readonly Member[],
  root: ClientIdentity,
): Promise<MismatchRecord | undefined> {
  const value = await throughFirst(clients, members, root, (client) => client.get(MISMATCH_KEY).string());
  return value === null ? undefined : parseMismatch(value);
}

/** The record as the key holds it; a value the tool did not write is taken whole as its detail (it still stands). */
export function parseMismatch(text: string): MismatchRecord {
  try {
    const { at, detail } = JSON.parse(text) as { at?: unknown; detail?: unknown };
    if (typeof at === 'string' && typeof detail === 'string') return { at, detail };
  } catch {
    // Not the tool's record: said as it is.
  }
  return { at: 'an unknown time', detail: text };
}

export async function recordMismatch(
  clients: EtcdClients,
  members: readonly Member[],
  root: ClientIdentity,
  record: MismatchRecord,
): Promise<void> {
  await throughFirst(clients, members, root, async (client) => {
    await client.put(MISMATCH_KEY).value(JSON.stringify(record));
  });
}

export async function clearMismatch(clients: EtcdClients, members: readonly Member[], root: ClientIdentity): Promise<void> {
  await throughFirst(clients, members, root, async (client) => {
    await client.delete().key(MISMATCH_KEY);
  });
}

const HOW_TO_GO_ON =
  'Find the member whose data differs (etcd-kvm verify names the hashes), ' +
  'and mend it (deploy --replace NAME builds it again from the others); ' +
  'then run with --accept-mismatch: that run compares the members again and removes the record once they agree';

/** The refusal of a run's first change while a mismatch is recorded (none with --accept-mismatch). */
export function refusalOf(record: MismatchRecord): string {
  return `the members' data differed after a run at ${record.at} (${record.detail}); this run changes nothing. ${HOW_TO_GO_ON}`;
}

/** Throws the refusal when a mismatch is recorded: asked once, before a run's first change. */
export async function refuseAfterMismatch(clients: EtcdClients, members: readonly Member[], root: ClientIdentity): Promise<void> {
  const record = await readMismatch(clients, members, root);
  if (record) throw new Error(refusalOf(record));
}

/** A run's failure when its comparison found the members' data different. */
export function mismatchFailure(detail: string): string {
  return `after this run's changes, ${detail}. Recorded in etcd (${MISMATCH_KEY}): the runs after this one change nothing. ${HOW_TO_GO_ON}`;
}
