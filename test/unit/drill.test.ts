import test from 'ava';
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  DRILL_UNIT,
  drillCleanupScript,
  drillMember,
  drillPrepareScript,
  drillStartScript,
  drillUploadScript,
  judgeDrill,
  roomVerdict,
  type DrillCandidate,
  type RestoredFacts,
} from '../../tasks/drill/plan.ts';
import type { BackupManifest } from '../../tasks/backup/manifest.ts';
import { drillScratch } from '../../tasks/render/restore-drill.ts';
import { drillLines, parseDrillRecord, type DrillRecord } from '../../tasks/drill/record.ts';
import { MiB } from '../../tasks/core/limits.ts';
import { baseDocument, load } from '../helpers/inventory.ts';
import { scratchDir } from '../helpers/scratch.ts';

/** A restore drill's decisions: which member restores, whether its disk has room, and what the restored copy proves. */

const healthy = (leader = 'a1'): DrillCandidate[] => [
  { name: 'etcd-1', status: { id: 'a1', leader, isLearner: false, alarms: [] } },
  { name: 'etcd-2', status: { id: 'b2', leader, isLearner: false, alarms: [] } },
  { name: 'etcd-3', status: { id: 'c3', leader, isLearner: false, alarms: [] } },
];
const with3 = (status: DrillCandidate['status']) => [...healthy().slice(0, 2), { name: 'etcd-3', status }];

const memberTable: { name: string; candidates: DrillCandidate[]; named?: string; expected: { member: string } | RegExp }[] = [
  { name: 'healthy, etcd-1 leads: the first follower', candidates: healthy(), expected: { member: 'etcd-2' } },
  { name: 'healthy, etcd-2 leads: etcd-1', candidates: healthy('b2'), expected: { member: 'etcd-1' } },
  { name: 'a follower named', candidates: healthy(), named: 'etcd-3', expected: { member: 'etcd-3' } },
  { name: 'the leader named: refused', candidates: healthy(), named: 'etcd-1', expected: /^--member etcd-1 is the leader/ },
  { name: 'an unknown member named', candidates: healthy(), named: 'etcd-9', expected: /^--member etcd-9 is not in the inventory/ },
  {
    name: 'a member down: no drill on a cluster short of a member',
    candidates: with3({ error: 'DEADLINE_EXCEEDED' }),
    expected: /^a restore drill runs only on a healthy cluster, and this one is not: etcd-3 does not answer \(DEADLINE_EXCEEDED\)$/,
  },
  {
    name: 'a learner',
    candidates: with3({ id: 'c3', leader: 'a1', isLearner: true, alarms: [] }),
    expected: /etcd-3 is a learner$/,
  },
  {
    name: 'an alarm',
    candidates: with3({ id: 'c3', leader: 'a1', isLearner: false, alarms: ['NOSPACE'] }),
    expected: /etcd-3 reports NOSPACE$/,
  },
  {
    name: 'two leaders named (a partition)',
    candidates: with3({ id: 'c3', leader: 'c3', isLearner: false, alarms: [] }),
    expected: /the members do not name one leader$/,
  },
  { name: 'no leader', candidates: healthy('0'), expected: /the members do not name one leader$/ },
];

for (const row of memberTable)
  test(`drill member: ${row.name}`, (t) => {
    const chosen = drillMember(row.candidates, row.named);
    if (row.expected instanceof RegExp) t.regex((chosen as { refused: string }).refused, row.expected);
    else t.deepEqual(chosen, row.expected);
  });

test('room: the snapshot, the database it restores into and the WAL fit on the data disk, or nothing is restored', (t) => {
  t.is(roomVerdict('etcd-2', 300 * MiB, 100 * MiB), undefined);
  t.is(
    roomVerdict('etcd-2', 200 * MiB, 100 * MiB),
    "etcd-2's data disk has 200 MiB free, and a drill of this 100 MiB snapshot needs 296 MiB: nothing was restored (grow the data disk, or run the drill on another member with --member)",
  );
});

const manifest = (changes: Partial<BackupManifest> = {}): BackupManifest => ({
  cluster: 'c',
  object: 'lab-2026-11-29T02:30:00Z.dump',
  revision: 40,
  dumpSha256: 'd'.repeat(64),
  keySha256: 'e'.repeat(64),
  taken: '2026-11-29T02:30:00Z',
  by: 'etcd-2',
  hashKV: { hash: 1111, compactRevision: 5 },
  ...changes,
});
const restored = (changes: Partial<RestoredFacts> = {}): RestoredFacts => ({
  revision: 40,
  keys: 12,
  hashKV: { hash: 1111, compactRevision: 5 },
  ...changes,
});

const verdictTable: {
  name: string;
  manifest?: BackupManifest;
  restored: RestoredFacts;
  unauthenticated?: string;
  outcome: 'ok' | 'failed';
  finding: RegExp;
}[] = [
  {
    name: 'the HashKV recorded at backup time',
    manifest: manifest(),
    restored: restored(),
    outcome: 'ok',
    finding: /^HashKV at revision 40 is 1111, as recorded at backup time$/,
  },
  {
    name: 'a control-node backup: the snapshot holds more than the revision recorded as it began',
    manifest: manifest({ by: 'the control node' }),
    restored: restored({ revision: 43 }),
    outcome: 'ok',
    finding: /^HashKV at revision 40 is 1111, as recorded/,
  },
  {
    name: 'another HashKV: not the data the cluster held',
    manifest: manifest(),
    restored: restored({ hashKV: { hash: 2222, compactRevision: 5 } }),
    outcome: 'failed',
    finding: /^HashKV at revision 40 is 2222, but 1111 was recorded at backup time: the restored data is not what the cluster held$/,
  },
  {
    name: 'a compaction between the snapshot and its hash: said, not a failure',
    manifest: manifest(),
    restored: restored({ hashKV: { hash: 2222, compactRevision: -1 } }),
    outcome: 'ok',
    finding:
      /^HashKV not compared: the member was compacted at revision 5 when it was hashed, the snapshot never compacted \(a compaction between the two\)$/,
  },
  {
    name: 'a version 1 manifest: revision and keys only, said',
    manifest: manifest({ hashKV: undefined }),
    restored: restored({ hashKV: undefined }),
    outcome: 'ok',
    finding: /^HashKV not compared: the manifest \(version 1, made before drills\) records none$/,
  },
  {
    name: 'a revision below the manifest',
    manifest: manifest(),
    restored: restored({ revision: 39 }),
    outcome: 'failed',
    finding: /^its revision 39 is below the manifest's 40/,
  },
  {
    name: 'the HashKV could not be read',
    manifest: manifest(),
    restored: restored({ hashKV: { error: 'mvcc: required revision has been compacted' } }),
    outcome: 'failed',
    finding: /could not be read from the restored copy: mvcc: required revision has been compacted$/,
  },
  {
    name: "another cluster's backup, named explicitly: it restores, but proves nothing of this cluster",
    manifest: manifest({ cluster: 'other' }),
    restored: restored(),
    unauthenticated: "its manifest binds cluster other, not this one's",
    outcome: 'failed',
    finding: /^not provably this cluster's: its manifest binds cluster other/,
  },
  {
    name: 'no manifest at all',
    restored: restored({ hashKV: undefined }),
    unauthenticated: 'no manifest: not made by this tool, or before manifests',
    outcome: 'failed',
    finding: /^not provably this cluster's: no manifest/,
  },
];

for (const row of verdictTable)
  test(`drill verdict: ${row.name}`, (t) => {
    const verdict = judgeDrill(row.manifest, row.restored, row.unauthenticated);
    t.is(verdict.outcome, row.outcome, verdict.findings.join('; '));
    t.is(verdict.findings[0], `restored: revision ${row.restored.revision}, 12 keys`);
    t.true(
      verdict.findings.some((finding) => row.finding.test(finding)),
      verdict.findings.join('\n'),
    );
  });

const imageInventory = () => load(baseDocument());
const releaseInventory = () => {
  const doc = baseDocument();
  doc.etcd = { binaries: 'release', version: 'v3.5.16' };
  return load(doc);
};

test("the drill's etcd: restored with the member's own tools, listening on loopback only, served with the member's certificate, clients checked against the cluster's CA, at a low weight", (t) => {
  for (const [inventory, restore] of [
    [imageInventory(), /^env ETCDCTL_API=3 \/usr\/bin\/etcdctl snapshot restore /m],
    [releaseInventory(), /^\/opt\/etcd-kvm\/etcd-v3\.5\.16-linux-amd64\/etcdutl snapshot restore /m],
  ] as const) {
    const script = drillStartScript(inventory, inventory.members[1]!);
    t.is(spawnSync('sh', ['-n', '-c', script]).status, 0, 'sh reads it');
    t.regex(script, restore);
    const start = script.split('\n').find((line) => line.startsWith('systemd-run '))!;
    t.regex(start, new RegExp(`--unit=${DRILL_UNIT} --property=User=etcd --property=CPUWeight=10 --property=IOWeight=10`));
    const urls = [...start.matchAll(/--[a-z-]+-urls?=(\S+)/g)].map((match) => match[1]!);
    t.true(urls.length >= 4);
    for (const url of urls) t.regex(url, /^(\S+=)?https?:\/\/127\.0\.0\.1:323(79|80)$/, url);
    t.regex(start, / --client-cert-auth --trusted-ca-file=\/etc\/etcd\/tls\/ca\.crt$/);
    t.regex(start, / --cert-file=\/etc\/etcd\/tls\/server\.crt --key-file=\/etc\/etcd\/tls\/server\.key /);
    t.true(script.includes(`--data-dir ${drillScratch(inventory)}/data`));
  }
});

test('the scripts a drill runs in the member, run here by sh: the upload is private, the prepare prints free bytes, the clean-up leaves nothing and stops the unit', (t) => {
  const root = scratchDir('drill');
  const bin = join(root, 'bin');
  mkdirSync(bin);
  // A systemctl that records what it is asked: the machine's own must not be touched.
  writeFileSync(join(bin, 'systemctl'), `#!/bin/sh\necho "$@" >> ${root}/systemctl.log\n`);
  chmodSync(join(bin, 'systemctl'), 0o755);
  const doc = baseDocument();
  doc.etcd = { data_dir: join(root, 'data') };
  const inventory = load(doc);
  mkdirSync(join(root, 'data'));
  const sh = (script: string, input = '') =>
    spawnSync('sh', ['-c', script], { input, encoding: 'utf8', env: { ...process.env, PATH: `${bin}:${process.env.PATH}` } });

  const upload = sh(drillUploadScript(inventory), 'the snapshot');
  t.is(upload.status, 0, upload.stderr);
  const file = join(drillScratch(inventory), 'snapshot.db');
  t.is(readFileSync(file, 'utf8'), 'the snapshot');
  t.is(statSync(file).mode & 0o777, 0o600);
  t.is(statSync(drillScratch(inventory)).mode & 0o777, 0o700);

  const prepared = sh(drillPrepareScript(inventory));
  t.is(prepared.status, 0, prepared.stderr);
  t.regex(prepared.stdout, /^\d+\n$/);
  t.false(existsSync(drillScratch(inventory)), "a killed drill's leftovers go first");
  t.is(readFileSync(join(root, 'systemctl.log'), 'utf8'), `stop ${DRILL_UNIT}\nreset-failed ${DRILL_UNIT}\n`);

  sh(drillUploadScript(inventory), 'again');
  t.is(sh(drillCleanupScript(inventory)).status, 0);
  t.false(existsSync(drillScratch(inventory)));
  t.true(existsSync(join(root, 'data')), "etcd's data directory stays");
});

const record = (changes: Partial<DrillRecord> = {}): DrillRecord => ({
  object: 'lab-2026-11-29T02:30:00Z.dump',
  member: 'etcd-2',
  finished: '2026-11-29T03:00:00Z',
  outcome: 'ok',
  revision: 40,
  keys: 12,
  findings: ['restored: revision 40, 12 keys'],
  by: 'the control node',
  ...changes,
});

test('status: the last verified backup and its age; the last drill warned when it failed; a record that is not one is refused', (t) => {
  const now = new Date('2026-11-29T04:00:00Z');
  t.deepEqual(drillLines(record(), record(), now), {
    line: 'backup drill: lab-2026-11-29T02:30:00Z.dump restored and verified 60 min ago on etcd-2 by the control node (revision 40, 12 keys)',
    warnings: [],
  });
  const failed = record({
    outcome: 'failed',
    finished: '2026-11-29T03:50:00Z',
    findings: ['restored: revision 41, 12 keys', 'HashKV … differs'],
  });
  t.deepEqual(drillLines(record(), failed, now).warnings, [
    'the last restore drill (lab-2026-11-29T02:30:00Z.dump, on etcd-2, 10 min ago) failed: restored: revision 41, 12 keys; HashKV … differs',
  ]);
  t.is(
    drillLines(undefined, undefined, now).line,
    'backup drill: no backup verified by a restore drill yet (etcd-kvm backup --verify, or backup.verify on a schedule)',
  );
  t.deepEqual(parseDrillRecord(JSON.stringify(record())), record());
  t.is(parseDrillRecord('{"outcome":"ok"}'), undefined);
  t.is(parseDrillRecord('not json'), undefined);
});
