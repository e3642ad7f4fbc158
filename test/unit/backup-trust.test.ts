import test from 'ava';
import { spawnSync } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { masterKeyFromHex } from '../../tasks/backup/format.ts';
import { manifestObjectName, renderManifest, verifyManifest, type BackupManifest } from '../../tasks/backup/manifest.ts';
import { judgeSnapshots, retainTrusted, type TrustContext } from '../../tasks/backup/trust.ts';

/**
 * Which of a bucket's snapshots are the cluster's own, as someone holding only the bucket's keys would
 * attack it: planted, renamed, replayed, future-dated, foreign and forged objects. Before manifests, the
 * newest name won: a copy of the oldest backup named 2099 was restored, and pruning deleted every real
 * backup for it. The tool's decision and the members' agent's (Python) are held to the same tables.
 */

const MASTER_HEX = 'a1'.repeat(32);
const MASTER = masterKeyFromHex(MASTER_HEX);
const CLUSTER = '6f1c1f4e-3a7b-4c1e-9d55-0b5a0c3f9e21';
const OTHER_CLUSTER = '0d3f7a52-9c1e-4b7a-8e0f-5a6b7c8d9e0f';
const NOW = new Date('2026-11-28T12:00:00Z');
const CONTEXT: TrustContext = { prefix: 'lab', clusterId: CLUSTER, masterKey: MASTER, now: NOW };

const dump = (time: string) => `lab-${time}.dump`;
const stem = (time: string) => `lab-${time}`;
function manifest(time: string, changes: Partial<BackupManifest> = {}, key = MASTER): string {
  return renderManifest(
    {
      cluster: CLUSTER,
      object: dump(time),
      revision: 40 + Number(time.slice(11, 13)),
      dumpSha256: 'd'.repeat(64),
      keySha256: 'e'.repeat(64),
      taken: time,
      by: 'etcd-2',
      ...changes,
    },
    key,
  );
}

/** A bucket: names, and each manifest object's text. */
interface Bucket {
  names: string[];
  manifests: Map<string, string>;
}
function bucketWith(entries: { time: string; manifest?: string; key?: boolean }[], extra: string[] = []): Bucket {
  const names: string[] = [...extra];
  const manifests = new Map<string, string>();
  for (const entry of entries) {
    names.push(dump(entry.time));
    if (entry.key !== false) names.push(`${stem(entry.time)}.key`);
    if (entry.manifest !== undefined) {
      names.push(`${stem(entry.time)}.manifest`);
      manifests.set(`${stem(entry.time)}.manifest`, entry.manifest);
    }
  }
  return { names, manifests };
}

const REAL = ['2026-11-28T08:00:00Z', '2026-11-28T09:00:00Z', '2026-11-28T10:00:00Z', '2026-11-28T11:00:00Z'];
const real = REAL.map((time) => ({ time, manifest: manifest(time) }));

const cases: { name: string; bucket: Bucket; trusted: string[]; ignored: [string, RegExp][] }[] = [
  { name: 'every backup with its manifest: all trusted', bucket: bucketWith(real), trusted: REAL.map(dump), ignored: [] },
  {
    name: 'the oldest backup copied to a name dated 2099, its manifest too (the attack that pruned every real backup)',
    bucket: bucketWith([...real, { time: '2099-01-01T00:00:00Z', manifest: manifest(REAL[0]!) }]),
    trusted: REAL.map(dump),
    ignored: [[dump('2099-01-01T00:00:00Z'), /^dated 2099-01-01T00:00:00Z, after this machine's clock \(2026-11-28T12:00:00Z\)$/]],
  },
  {
    name: 'the oldest backup replayed under a name within the clock, with its own manifest',
    bucket: bucketWith([...real, { time: '2026-11-28T11:59:00Z', manifest: manifest(REAL[0]!) }]),
    trusted: REAL.map(dump),
    ignored: [[dump('2026-11-28T11:59:00Z'), /^its manifest is lab-2026-11-28T08:00:00Z\.dump's: renamed or copied$/]],
  },
  {
    name: "a snapshot of the attacker's own making, without a manifest (or from before manifests)",
    bucket: bucketWith([...real, { time: '2026-11-28T11:30:00Z', key: false }]),
    trusted: REAL.map(dump),
    ignored: [[dump('2026-11-28T11:30:00Z'), /^no manifest: /]],
  },
  {
    name: 'a manifest made with another key',
    bucket: bucketWith([
      ...real,
      { time: '2026-11-28T11:30:00Z', manifest: manifest('2026-11-28T11:30:00Z', {}, masterKeyFromHex('b2'.repeat(32))) },
    ]),
    trusted: REAL.map(dump),
    ignored: [[dump('2026-11-28T11:30:00Z'), /^its manifest does not verify with restore\.encryption_key$/]],
  },
  {
    name: 'a real manifest edited (its revision), the MAC kept',
    bucket: bucketWith([...real.slice(0, 3), { time: REAL[3]!, manifest: manifest(REAL[3]!).replace(/^revision \d+$/m, 'revision 99') }]),
    trusted: REAL.slice(0, 3).map(dump),
    ignored: [[dump(REAL[3]!), /^its manifest does not verify/]],
  },
  {
    name: "another cluster's backup under the same prefix and key",
    bucket: bucketWith([...real, { time: '2026-11-28T11:45:00Z', manifest: manifest('2026-11-28T11:45:00Z', { cluster: OTHER_CLUSTER }) }]),
    trusted: REAL.map(dump),
    ignored: [
      [
        dump('2026-11-28T11:45:00Z'),
        new RegExp(`^taken of another cluster \\(${OTHER_CLUSTER}\\), not this state directory's \\(${CLUSTER}\\)$`),
      ],
    ],
  },
  {
    name: 'names under another prefix, and objects that are not snapshots, are not judged at all',
    bucket: bucketWith(real.slice(0, 1), ['labx-2026-11-28T09:00:00Z.dump', 'lab-notes.txt', 'lab-2026-11-28T07:00:00Z.key']),
    trusted: [dump(REAL[0]!)],
    ignored: [],
  },
];

function agentJudges(bucket: Bucket, options: { keep: number; maxAgeSeconds?: number; uploaded?: string }) {
  const argument = {
    names: bucket.names,
    manifests: Object.fromEntries(bucket.manifests),
    prefix: 'lab',
    cluster: CLUSTER,
    master_key: MASTER_HEX,
    now: NOW.toISOString(),
    keep: options.keep,
    max_age_seconds: options.maxAgeSeconds ?? 0,
    uploaded: options.uploaded,
  };
  const done = spawnSync('python3', ['test/helpers/agent-harness.py', 'judge-and-retain', JSON.stringify(argument)], { encoding: 'utf8' });
  if (done.status !== 0) throw new Error(done.stderr);
  return JSON.parse(done.stdout) as { trusted: string[]; ignored: [string, string][]; deleted: string[] };
}

for (const row of cases) {
  test(`trust: ${row.name}`, (t) => {
    const verdict = judgeSnapshots(row.bucket.names, row.bucket.manifests, CONTEXT);
    t.deepEqual(
      verdict.trusted.map((snapshot) => snapshot.name),
      row.trusted,
    );
    t.deepEqual(
      verdict.ignored.map((snapshot) => snapshot.name),
      row.ignored.map(([name]) => name),
    );
    for (const [i, snapshot] of verdict.ignored.entries()) t.regex(snapshot.why, row.ignored[i]![1]);
    // Pruning to the two newest: what was planted never pushes a real backup out, and is never deleted.
    const pruned = retainTrusted(verdict.trusted, new Set(row.bucket.names), { keep: 2, maxAgeSeconds: 0, now: NOW });
    t.deepEqual(pruned.kept, row.trusted.slice(-2));
    for (const name of row.ignored.map(([ignored]) => ignored)) t.false(pruned.deleted.includes(name));
    // The agent decides alike.
    const agent = agentJudges(row.bucket, { keep: 2 });
    t.deepEqual(agent.trusted, row.trusted);
    t.deepEqual(
      agent.ignored,
      verdict.ignored.map((snapshot) => [snapshot.name, snapshot.why]),
    );
    t.deepEqual(agent.deleted, pruned.deleted);
  });
}

const retentionCases: { name: string; keep: number; maxAgeSeconds?: number; uploaded?: string; deleted: string[] }[] = [
  {
    name: 'keep 2: the two oldest go, each .dump, then its .key and .manifest',
    keep: 2,
    deleted: REAL.slice(0, 2).flatMap((time) => [`${stem(time)}.dump`, `${stem(time)}.key`, `${stem(time)}.manifest`]),
  },
  { name: 'keep 10: nothing goes', keep: 10, deleted: [] },
  {
    name: 'keep 10 and at most 2.5 h old: the two older than that go',
    keep: 10,
    maxAgeSeconds: 2.5 * 3600,
    deleted: REAL.slice(0, 2).flatMap((time) => [`${stem(time)}.dump`, `${stem(time)}.key`, `${stem(time)}.manifest`]),
  },
  {
    name: 'at most a minute old: the newest still stays',
    keep: 10,
    maxAgeSeconds: 60,
    deleted: REAL.slice(0, 3).flatMap((time) => [`${stem(time)}.dump`, `${stem(time)}.key`, `${stem(time)}.manifest`]),
  },
  {
    name: 'keep 1, the run having uploaded an older one than the newest: what it uploaded stays',
    keep: 1,
    uploaded: dump(REAL[2]!),
    deleted: [REAL[0]!, REAL[1]!].flatMap((time) => [`${stem(time)}.dump`, `${stem(time)}.key`, `${stem(time)}.manifest`]),
  },
];
for (const row of retentionCases) {
  test(`retention: ${row.name}`, (t) => {
    const bucket = bucketWith(real);
    const verdict = judgeSnapshots(bucket.names, bucket.manifests, CONTEXT);
    const policy = { keep: row.keep, maxAgeSeconds: row.maxAgeSeconds ?? 0, now: NOW };
    t.deepEqual(retainTrusted(verdict.trusted, new Set(bucket.names), policy, row.uploaded).deleted, row.deleted);
    t.deepEqual(agentJudges(bucket, { keep: row.keep, maxAgeSeconds: row.maxAgeSeconds, uploaded: row.uploaded }).deleted, row.deleted);
  });
}

test('retention: keep 0 (or not a whole number) is refused: the newest snapshot is never deleted', (t) => {
  for (const keep of [0, -1, 1.5, Number.NaN])
    t.throws(() => retainTrusted([], new Set(), { keep, maxAgeSeconds: 0, now: NOW }), { instanceOf: RangeError });
});

/** The fields the agent renders the oldest real backup's manifest from (REAL[0], revision 41). */
const AGENT_FIELDS = {
  cluster: CLUSTER,
  object: dump(REAL[0]!),
  revision: 41,
  'dump-sha256': 'd'.repeat(64),
  'key-sha256': 'e'.repeat(64),
  taken: REAL[0],
  by: 'etcd-2',
};

test("a manifest: the agent writes the tool's text byte for byte; it verifies only with its key and unedited", (t) => {
  const fields = AGENT_FIELDS;
  const text = manifest(REAL[0]!, { revision: 41 });
  const done = spawnSync('python3', ['test/helpers/agent-harness.py', 'manifest', JSON.stringify({ fields, master_key: MASTER_HEX })], {
    encoding: 'utf8',
  });
  t.is(done.status, 0, done.stderr);
  t.is(JSON.parse(done.stdout), text);
  t.is(manifestObjectName(dump(REAL[0]!)), `${stem(REAL[0]!)}.manifest`);
  t.like(verifyManifest(text, MASTER), { cluster: CLUSTER, object: dump(REAL[0]!), revision: 41, by: 'etcd-2' });
  t.is(verifyManifest(text, masterKeyFromHex('b2'.repeat(32))), undefined);
  t.is(verifyManifest(text.replace('etcd-2', 'etcd-3'), MASTER), undefined);
  t.is(verifyManifest(text.replace(/\nmac .*\n$/, '\n'), MASTER), undefined);
  t.throws(() => renderManifest({ ...verifyManifest(text, MASTER)!, by: 'a\nb' }, MASTER), { message: /must be one line/ });
});

test("a version 2 manifest carries the HashKV a drill compares with: the agent writes the tool's text byte for byte, each side verifies both versions, a version's lines cannot pass for the other's", (t) => {
  const hashKV = { hash: 3175495313, compactRevision: 12 };
  const text = manifest(REAL[0]!, { revision: 41, hashKV });
  t.regex(text, /^etcd-kvm backup manifest 2\n[\s\S]*\nhashkv 3175495313\ncompact-revision 12\nmac [0-9a-f]{64}\n$/);
  t.deepEqual(verifyManifest(text, MASTER)?.hashKV, hashKV);
  const fields = { ...AGENT_FIELDS, hashkv: 3175495313, 'compact-revision': 12 };
  const agent = (command: string, argument: unknown) => {
    const done = spawnSync('python3', ['test/helpers/agent-harness.py', command, JSON.stringify(argument)], { encoding: 'utf8' });
    t.is(done.status, 0, done.stderr);
    return JSON.parse(done.stdout) as unknown;
  };
  t.is(agent('manifest', { fields, master_key: MASTER_HEX }), text);
  // The agent's pruning trusts both versions: version 2 manifests and a version 1 one of another backup.
  // A store never compacted: etcd answers a compact revision of -1.
  const neverCompacted = manifest(REAL[2]!, { hashKV: { hash: 7, compactRevision: -1 } });
  t.deepEqual(verifyManifest(neverCompacted, MASTER)?.hashKV, { hash: 7, compactRevision: -1 });
  const names = REAL.slice(0, 3).flatMap((time) => [dump(time), `${stem(time)}.manifest`, `${stem(time)}.key`]);
  const manifests = {
    [`${stem(REAL[0]!)}.manifest`]: text,
    [`${stem(REAL[1]!)}.manifest`]: manifest(REAL[1]!),
    [`${stem(REAL[2]!)}.manifest`]: neverCompacted,
  };
  const judged = agent('judge-and-retain', {
    names,
    manifests,
    prefix: 'lab',
    cluster: CLUSTER,
    master_key: MASTER_HEX,
    now: NOW.toISOString(),
    keep: 5,
  }) as { trusted: string[] };
  t.deepEqual(judged.trusted, REAL.slice(0, 3).map(dump));
  // Version 1 stays readable, without a HashKV.
  t.is(verifyManifest(manifest(REAL[1]!), MASTER)?.hashKV, undefined);
  // The header is under the MAC: a version 1 text relabelled 2 (or the reverse) does not verify, nor does a v2 missing its HashKV.
  t.is(verifyManifest(text.replace('manifest 2', 'manifest 1'), MASTER), undefined);
  const v1 = manifest(REAL[1]!);
  t.is(verifyManifest(v1.replace('manifest 1', 'manifest 2'), MASTER), undefined);
  // Signed with the right key, yet not whole or not numbers: refused alike.
  const macKey = createHmac('sha256', MASTER).update('etcd-kvm backup manifest 1').digest();
  const signed = (body: string) => `${body}mac ${createHmac('sha256', macKey).update(body).digest('hex')}\n`;
  t.truthy(verifyManifest(signed(text.replace(/mac .*\n$/, '')), MASTER), 'the test signs as the tool does');
  t.is(verifyManifest(signed(text.replace(/compact-revision 12\nmac .*\n$/, '')), MASTER), undefined);
  t.is(verifyManifest(signed(text.replace(/mac .*\n$/, '').replace('hashkv 3175495313', 'hashkv x')), MASTER), undefined);
});
