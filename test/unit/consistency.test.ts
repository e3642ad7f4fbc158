import test from 'ava';
import { parseDeployOptions } from '../../tasks/cli/options.ts';
import {
  compareUntilDefinite,
  judgeComparison,
  mismatchFailure,
  parseMismatch,
  MISMATCH_KEY,
  refusalOf,
  type Comparison,
} from '../../tasks/verify/consistency.ts';
import { hashChecks, type MemberVerifyFacts } from '../../tasks/verify/verdict.ts';

/**
 * The deploy's comparison of the members after its changes: the hashkv check's lines judged as agree, differ or
 * unknown (no proof either way: asked again), and what the run and the runs after it say.
 */

type Hashes = Pick<MemberVerifyFacts, 'name' | 'hash'>[];
const hashed = (name: string, hash: number, compactRevision = -1) => ({ name, hash: { hash, compactRevision } });

const rows: { name: string; members: Hashes; pinnedRevision?: number; kind: Comparison['kind'] }[] = [
  {
    name: 'three equal hashes',
    members: [hashed('etcd-1', 7), hashed('etcd-2', 7), hashed('etcd-3', 7)],
    pinnedRevision: 40,
    kind: 'agree',
  },
  {
    name: "one member's hash differs",
    members: [hashed('etcd-1', 7), hashed('etcd-2', 7), hashed('etcd-3', 9)],
    pinnedRevision: 40,
    kind: 'differ',
  },
  {
    name: 'a difference found while another member did not answer is still a difference',
    members: [hashed('etcd-1', 7), { name: 'etcd-2', hash: { error: 'deadline exceeded' } }, hashed('etcd-3', 9)],
    pinnedRevision: 40,
    kind: 'differ',
  },
  {
    name: 'equal hashes but a member did not answer: not proven',
    members: [hashed('etcd-1', 7), { name: 'etcd-2', hash: { error: 'deadline exceeded' } }, hashed('etcd-3', 7)],
    pinnedRevision: 40,
    kind: 'unknown',
  },
  {
    name: 'a compaction between the answers (other compact revisions): not proven, even with other hashes',
    members: [hashed('etcd-1', 7, 10), hashed('etcd-2', 8, 30), hashed('etcd-3', 7, 10)],
    pinnedRevision: 40,
    kind: 'unknown',
  },
  { name: 'no voting member answered its status: nothing pinned', members: [{ name: 'etcd-1' }, { name: 'etcd-2' }], kind: 'unknown' },
  // A learner is not asked: two voting members' equal hashes agree.
  {
    name: 'a learner not asked',
    members: [hashed('etcd-1', 7), hashed('etcd-2', 7), { name: 'etcd-4' }],
    pinnedRevision: 40,
    kind: 'agree',
  },
];

for (const row of rows) {
  test(`comparison: ${row.name} → ${row.kind}`, (t) => {
    const comparison = judgeComparison(
      hashChecks({ members: row.members, ...(row.pinnedRevision ? { pinnedRevision: row.pinnedRevision } : {}) }),
    );
    t.is(comparison.kind, row.kind, comparison.detail);
  });
}

test('a difference names the revision and every hash', (t) => {
  const comparison = judgeComparison(
    hashChecks({ members: [hashed('etcd-1', 7), hashed('etcd-2', 7), hashed('etcd-3', 9)], pinnedRevision: 40 }),
  );
  t.is(
    comparison.detail,
    "the members' data differ at revision 40: etcd-1 7 (never compacted), etcd-2 7 (never compacted), etcd-3 9 (never compacted)",
  );
});

test('asked again while it cannot tell, at most so often; a definite answer ends it', async (t) => {
  const answers = (...kinds: Comparison['kind'][]) => {
    const asked: Comparison['kind'][] = [];
    return {
      asked,
      compare: async (): Promise<Comparison> => {
        const kind = kinds[asked.length] ?? kinds.at(-1)!;
        asked.push(kind);
        return { kind, detail: kind } as Comparison;
      },
    };
  };
  const settles = answers('unknown', 'unknown', 'differ', 'agree');
  t.is((await compareUntilDefinite(settles.compare, 5, 0)).kind, 'differ');
  t.deepEqual(settles.asked, ['unknown', 'unknown', 'differ']);
  const never = answers('unknown');
  t.is((await compareUntilDefinite(never.compare, 3, 0)).kind, 'unknown');
  t.is(never.asked.length, 3);
  const first = answers('agree');
  t.is((await compareUntilDefinite(first.compare, 5, 0)).kind, 'agree');
  t.is(first.asked.length, 1);
});

test('the failure and the refusal say where the record is and how to go on', (t) => {
  const failure = mismatchFailure("the members' data differ at revision 40: …");
  t.regex(failure, /^after this run's changes, the members' data differ at revision 40: …\. Recorded in etcd/);
  t.true(failure.includes(MISMATCH_KEY));
  t.regex(failure, /--accept-mismatch/);
  const refusal = refusalOf({ at: '2026-11-28T16:00:00.000Z', detail: "the members' data differ at revision 40: …" });
  t.regex(refusal, /^the members' data differed after a run at 2026-11-28T16:00:00.000Z \(.*revision 40.*\); this run changes nothing\./);
  t.regex(refusal, /etcd-kvm verify.*--replace NAME.*--accept-mismatch/);
});

test('--accept-mismatch is a deploy flag, off unless given', (t) => {
  t.false(parseDeployOptions(['-i', 'inv.yaml']).acceptMismatch);
  t.true(parseDeployOptions(['-i', 'inv.yaml', '--accept-mismatch']).acceptMismatch);
});

test('a record the tool did not write still stands, taken whole as its detail', (t) => {
  t.deepEqual(parseMismatch('{"at":"2026-11-28T16:00:00.000Z","detail":"etcd-3 differs"}'), {
    at: '2026-11-28T16:00:00.000Z',
    detail: 'etcd-3 differs',
  });
  t.deepEqual(parseMismatch('written by hand'), { at: 'an unknown time', detail: 'written by hand' });
  t.deepEqual(parseMismatch('{"at":1}'), { at: 'an unknown time', detail: '{"at":1}' });
});
