/**
 * What `etcd-kvm verify` concludes from what it read (verify/facts.ts): one check per line, each passed or failed with
 * the member it concerns and what was seen. Pure: the tests hold it against tables (test/unit/verify.test.ts).
 *
 * The members agree when every voting member's HashKV at one pinned revision is equal (etcd's own hash of its MVCC
 * keys up to that revision, over the same compaction), their member lists are the same, no alarm is raised, none lags
 * far behind in the raft log, a canary written through one member reads back from every member linearizably, and the
 * certificate each presents chains to the state directory's CA.
 */

/** A member's answer, or why there is none. */
export type Answer<T> = T | { error: string };
export const failed = <T extends object>(answer: Answer<T>): answer is { error: string } => 'error' in answer;

export interface MemberVerifyFacts {
  name: string;
  /** Its own status: member ID (hex), whether it is a learner, revision, applied index, version, alarms listed. */
  status: Answer<{ id: string; isLearner: boolean; revision: number; appliedIndex: number; version: string; alarms: string[] }>;
  /** Its member list: each member's ID (hex) and whether it is a learner, sorted. */
  memberList: Answer<string[]>;
  /** HashKV at the pinned revision (voting members only). */
  hash?: Answer<{ hash: number; compactRevision: number }>;
  /** The canary written through the first voting member, read back through this one linearizably. */
  canary?: Answer<{ read: string | undefined }>;
  /** The certificate it presents on its client port, verified against the state directory's CA. */
  certificate: Answer<{ notAfter: Date }>;
}

export interface VerifyFacts {
  members: MemberVerifyFacts[];
  /** The revision every voting member's HashKV was asked at: the lowest current revision among them. */
  pinnedRevision?: number;
  /** The canary's value, as written. */
  canaryValue?: string;
  /** The canary's write, when it failed. */
  canaryError?: string;
  clusterVersion: Answer<{ version: string }>;
  at: Date;
}

export interface Check {
  check: 'answers' | 'member list' | 'alarms' | 'raft log' | 'hashkv' | 'canary' | 'certificate' | 'versions';
  ok: boolean;
  /** The member it concerns; none for a check of the whole cluster. */
  member?: string;
  detail: string;
  /** The hashkv check's finding that the members' data differ (not a member that did not answer, nor a compaction meanwhile). */
  mismatch?: true;
}

/** How far behind the most advanced member's applied index a member may be and still count as caught up. */
export const APPLIED_INDEX_BOUND = 1000;

/** The revision to pin: the lowest current revision among the voting members that answered (each has applied it). */
export function pinRevision(statuses: readonly { isLearner: boolean; revision: number }[]): number | undefined {
  const voting = statuses.filter((status) => !status.isLearner).map((status) => status.revision);
  return voting.length > 0 ? Math.min(...voting) : undefined;
}

const answered = (member: MemberVerifyFacts) => (failed(member.status) ? undefined : member.status);

export function verifyChecks(facts: VerifyFacts): Check[] {
  return [
    ...answerChecks(facts),
    ...memberListChecks(facts),
    ...alarmChecks(facts),
    ...raftLogChecks(facts),
    ...hashChecks(facts),
    ...canaryChecks(facts),
    ...certificateChecks(facts),
    versionCheck(facts),
  ];
}

function answerChecks(facts: VerifyFacts): Check[] {
  return facts.members.flatMap((member): Check[] =>
    failed(member.status)
      ? [{ check: 'answers', ok: false, member: member.name, detail: `its etcd does not answer: ${member.status.error}` }]
      : [],
  );
}

function memberListChecks(facts: VerifyFacts): Check[] {
  const lists = facts.members.flatMap((member) => (failed(member.memberList) ? [] : [{ name: member.name, list: member.memberList }]));
  const failures = facts.members.flatMap((member): Check[] =>
    failed(member.memberList) && !failed(member.status)
      ? [{ check: 'member list', ok: false, member: member.name, detail: `no member list: ${member.memberList.error}` }]
      : [],
  );
  const reference = lists[0];
  if (!reference) return failures;
  const differing = lists.filter(({ list }) => list.join(',') !== reference.list.join(','));
  if (differing.length === 0)
    return [...failures, { check: 'member list', ok: true, detail: `the same on ${lists.length} members: ${reference.list.join(', ')}` }];
  return [
    ...failures,
    ...differing.map(({ name, list }) => ({
      check: 'member list' as const,
      ok: false,
      member: name,
      detail: `lists ${list.join(', ')}; ${reference.name} lists ${reference.list.join(', ')}`,
    })),
  ];
}

function alarmChecks(facts: VerifyFacts): Check[] {
  const alarms = [...new Set(facts.members.flatMap((member) => answered(member)?.alarms ?? []))].sort();
  return [{ check: 'alarms', ok: alarms.length === 0, detail: alarms.length === 0 ? 'none raised' : `raised: ${alarms.join(', ')}` }];
}

function raftLogChecks(facts: VerifyFacts): Check[] {
  const indexes = facts.members.flatMap((member) => {
    const status = answered(member);
    return status ? [{ name: member.name, applied: status.appliedIndex }] : [];
  });
  if (indexes.length === 0) return [];
  const ahead = Math.max(...indexes.map(({ applied }) => applied));
  const behind = indexes.filter(({ applied }) => ahead - applied > APPLIED_INDEX_BOUND);
  if (behind.length === 0)
    return [
      {
        check: 'raft log',
        ok: true,
        detail:
          `applied indexes within ${APPLIED_INDEX_BOUND} of ${ahead}: ` +
          `${indexes.map(({ name, applied }) => `${name} ${applied}`).join(', ')}`,
      },
    ];
  return behind.map(({ name, applied }) => ({
    check: 'raft log' as const,
    ok: false,
    member: name,
    detail: `applied index ${applied}, ${ahead - applied} behind the most advanced member (${ahead}; bound ${APPLIED_INDEX_BOUND})`,
  }));
}

/** The hashkv check alone: also what a deploy asks after it changed a member (verify/consistency.ts). */
export function hashChecks(facts: { members: readonly Pick<MemberVerifyFacts, 'name' | 'hash'>[]; pinnedRevision?: number }): Check[] {
  const asked = facts.members.filter((member) => member.hash !== undefined);
  if (facts.pinnedRevision === undefined || asked.length === 0)
    return [{ check: 'hashkv', ok: false, detail: 'no voting member answered: nothing to compare' }];
  const at = `at revision ${facts.pinnedRevision}`;
  const failures = asked.flatMap((member): Check[] =>
    failed(member.hash!) ? [{ check: 'hashkv', ok: false, member: member.name, detail: `no HashKV ${at}: ${member.hash.error}` }] : [],
  );
  const hashes = asked.flatMap((member) => (failed(member.hash!) ? [] : [{ name: member.name, ...member.hash! }]));
  const compactions = new Set(hashes.map(({ compactRevision }) => compactRevision));
  // etcd answers -1 for a store never compacted.
  const compaction = (revision: number) => (revision < 0 ? 'never compacted' : `compacted at ${revision}`);
  const listed = hashes.map(({ name, hash, compactRevision }) => `${name} ${hash} (${compaction(compactRevision)})`).join(', ');
  if (compactions.size > 1)
    return [
      ...failures,
      { check: 'hashkv', ok: false, detail: `a compaction ran while the hashes were asked ${at}, run verify again: ${listed}` },
    ];
  if (new Set(hashes.map(({ hash }) => hash)).size > 1)
    return [...failures, { check: 'hashkv', ok: false, detail: `the members' data differ ${at}: ${listed}`, mismatch: true }];
  if (hashes.length === 0) return failures;
  return [...failures, { check: 'hashkv', ok: true, detail: `equal on ${hashes.length} voting members ${at}: ${listed}` }];
}

function canaryChecks(facts: VerifyFacts): Check[] {
  if (facts.canaryError !== undefined) return [{ check: 'canary', ok: false, detail: `could not write the canary: ${facts.canaryError}` }];
  const read = facts.members.filter((member) => member.canary !== undefined);
  const wrong = read.flatMap((member): Check[] => {
    const canary = member.canary!;
    if (failed(canary)) return [{ check: 'canary', ok: false, member: member.name, detail: `could not read the canary: ${canary.error}` }];
    if (canary.read !== facts.canaryValue)
      return [
        {
          check: 'canary',
          ok: false,
          member: member.name,
          detail: `read ${canary.read === undefined ? 'nothing' : 'another value'} where the canary was written`,
        },
      ];
    return [];
  });
  if (read.length === 0) return [{ check: 'canary', ok: false, detail: 'no member was asked' }];
  if (wrong.length > 0) return wrong;
  return [{ check: 'canary', ok: true, detail: `written once, read back linearizably through ${read.map(({ name }) => name).join(', ')}` }];
}

function certificateChecks(facts: VerifyFacts): Check[] {
  const days = (until: Date) => Math.floor((until.getTime() - facts.at.getTime()) / 86_400_000);
  return facts.members.map((member): Check => {
    const { certificate } = member;
    if (failed(certificate))
      return {
        check: 'certificate',
        ok: false,
        member: member.name,
        detail: `does not verify against the state directory's CA: ${certificate.error}`,
      };
    if (certificate.notAfter <= facts.at)
      return { check: 'certificate', ok: false, member: member.name, detail: `expired ${certificate.notAfter.toISOString()}` };
    return { check: 'certificate', ok: true, member: member.name, detail: `chains to the CA, ends in ${days(certificate.notAfter)} days` };
  });
}

function versionCheck(facts: VerifyFacts): Check {
  const versions = facts.members.map((member) => `${member.name} ${answered(member)?.version ?? '?'}`).join(', ');
  const cluster = failed(facts.clusterVersion) ? `unknown (${facts.clusterVersion.error})` : facts.clusterVersion.version;
  // Mixed versions are an upgrade under way, not a fault: said, never failed.
  return { check: 'versions', ok: true, detail: `cluster ${cluster}; ${versions}` };
}

/** One line per check: `ok   hashkv: …`, `FAIL hashkv etcd-2: …`. */
export function formatChecks(checks: readonly Check[]): string {
  return checks
    .map(({ ok, check, member, detail }) => `${ok ? 'ok  ' : 'FAIL'} ${check}${member ? ` ${member}` : ''}: ${detail}`)
    .join('\n');
}
