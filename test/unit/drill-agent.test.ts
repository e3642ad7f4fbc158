import test from 'ava';
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { masterKeyFromHex, newDataKey, sealStream } from '../../tasks/backup/format.ts';
import type { BackupManifest } from '../../tasks/backup/manifest.ts';
import { commandLine } from '../../tasks/core/shell.ts';
import { drillMember, drillStartScript, judgeDrill, type DrillCandidate, type RestoredFacts } from '../../tasks/drill/plan.ts';
import { AGENT_PATHS, VERIFY_UNITS, type AgentConfig } from '../../tasks/render/guest/member-agent.ts';
import { drillScratch } from '../../tasks/render/restore-drill.ts';
import { baseDocument, load, problemsOf } from '../helpers/inventory.ts';
import { renderWithPki } from '../helpers/render.ts';
import { scratchDir } from '../helpers/scratch.ts';

/**
 * The scheduled restore drill (agent/etcd-kvm-agent.py, `verify`) decides as `backup --verify` does
 * (drill/plan.ts): the same member, the same verdict word for word, one table run against both. And it
 * opens what the tool seals, in whatever pieces S3's answer arrives.
 */

function agent<T>(command: string, argument: unknown): T {
  const done = spawnSync('python3', ['test/helpers/agent-harness.py', command, JSON.stringify(argument)], { encoding: 'utf8' });
  if (done.status !== 0) throw new Error(`agent-harness ${command}: ${done.stderr}`);
  return JSON.parse(done.stdout) as T;
}

test('a backup the tool seals is opened by the scheduled drill chunk by chunk, in any pieces; a damaged byte or another key is refused', async (t) => {
  const dir = scratchDir('drill-open');
  const master = '5e'.repeat(32);
  // Two whole chunks and a short one, as the tool's own backup seals them.
  const snapshot = randomBytes(2 * 1024 * 1024 + 777);
  const { dataKey, sealedKey } = newDataKey(masterKeyFromHex(master));
  const pieces: Buffer[] = [];
  for await (const piece of sealStream(
    (async function* () {
      yield snapshot;
    })(),
    dataKey,
  ))
    pieces.push(piece);
  const dump = join(dir, 'snapshot.dump');
  writeFileSync(dump, Buffer.concat(pieces));
  const opened = (key: string, pieceBytes: number, path = dump) =>
    agent<{ sha256?: string; bytes?: number; error?: string }>('open', {
      master_key: key,
      key: sealedKey.toString('hex'),
      dump: path,
      piece_bytes: pieceBytes,
    });
  for (const pieceBytes of [7001, 1024 * 1024 + 40, 5 * 1024 * 1024])
    t.deepEqual(
      opened(master, pieceBytes),
      { sha256: createHash('sha256').update(snapshot).digest('hex'), bytes: snapshot.length },
      `${pieceBytes}`,
    );

  const damaged = Buffer.concat(pieces);
  damaged[1024 * 1024 + 100]! ^= 1;
  writeFileSync(join(dir, 'damaged.dump'), damaged);
  t.truthy(opened(master, 65536, join(dir, 'damaged.dump')).error);
  t.throws(() => opened('5f'.repeat(32), 65536), { message: /agent-harness open/ });
});

const manifest = (hashKV: BackupManifest['hashKV'] | null = { hash: 1111, compactRevision: 5 }): BackupManifest => ({
  cluster: 'c1',
  object: 'lab-2026-11-29T04:00:00Z.dump',
  revision: 40,
  dumpSha256: 'a'.repeat(64),
  keySha256: 'b'.repeat(64),
  taken: '2026-11-29T04:00:00Z',
  by: 'etcd-2',
  ...(hashKV ? { hashKV } : {}),
});
const restored = (facts: Partial<RestoredFacts> = {}): RestoredFacts => ({
  revision: 40,
  keys: 12,
  hashKV: { hash: 1111, compactRevision: 5 },
  ...facts,
});

const verdicts: { name: string; manifest: BackupManifest; restored: RestoredFacts; outcome: 'ok' | 'failed' }[] = [
  { name: 'equal HashKV', manifest: manifest(), restored: restored(), outcome: 'ok' },
  { name: 'another HashKV', manifest: manifest(), restored: restored({ hashKV: { hash: 2222, compactRevision: 5 } }), outcome: 'failed' },
  {
    name: 'a compaction between',
    manifest: manifest(),
    restored: restored({ hashKV: { hash: 2222, compactRevision: -1 } }),
    outcome: 'ok',
  },
  { name: 'a version 1 manifest', manifest: manifest(null), restored: restored({ hashKV: undefined }), outcome: 'ok' },
  { name: 'a revision below', manifest: manifest(), restored: restored({ revision: 39 }), outcome: 'failed' },
  {
    name: 'the HashKV unread',
    manifest: manifest(),
    restored: restored({ hashKV: { error: 'mvcc: required revision has been compacted' } }),
    outcome: 'failed',
  },
  {
    name: 'never compacted, equal',
    manifest: manifest({ hash: 7, compactRevision: -1 }),
    restored: restored({ hashKV: { hash: 7, compactRevision: -1 } }),
    outcome: 'ok',
  },
];

/** The manifest as the agent holds it (verify_manifest's fields, strings), and the facts as it reads them. */
const asAgent = (m: BackupManifest, r: RestoredFacts) => ({
  manifest: {
    revision: String(m.revision),
    ...(m.hashKV ? { hashkv: String(m.hashKV.hash), 'compact-revision': String(m.hashKV.compactRevision) } : {}),
  },
  restored: {
    revision: r.revision,
    keys: r.keys,
    ...(r.hashKV === undefined
      ? {}
      : {
          hash_kv:
            'error' in r.hashKV ? { error: r.hashKV.error } : { hashkv: r.hashKV.hash, 'compact-revision': r.hashKV.compactRevision },
        }),
  },
});

for (const row of verdicts)
  test(`a drill's verdict, the agent's and the tool's alike: ${row.name}`, (t) => {
    const tool = judgeDrill(row.manifest, row.restored);
    t.is(tool.outcome, row.outcome, tool.findings.join('; '));
    t.deepEqual(agent('judge-drill', asAgent(row.manifest, row.restored)), tool);
  });

const ORDER = ['etcd-1', 'etcd-2', 'etcd-3'];
const IDS: Record<string, number> = { 'etcd-1': 161, 'etcd-2': 178, 'etcd-3': 195 };
type Answer = { leader: number; learner?: boolean } | 'silent';

const members: { name: string; answers: Record<string, Answer>; alarm?: string; expected: string | RegExp }[] = [
  {
    name: 'etcd-1 leads',
    answers: { 'etcd-1': { leader: 161 }, 'etcd-2': { leader: 161 }, 'etcd-3': { leader: 161 } },
    expected: 'etcd-2',
  },
  {
    name: 'etcd-2 leads',
    answers: { 'etcd-1': { leader: 178 }, 'etcd-2': { leader: 178 }, 'etcd-3': { leader: 178 } },
    expected: 'etcd-1',
  },
  { name: 'a member silent', answers: { 'etcd-1': { leader: 161 }, 'etcd-2': { leader: 161 }, 'etcd-3': 'silent' }, expected: /healthy/ },
  {
    name: 'a learner',
    answers: { 'etcd-1': { leader: 161 }, 'etcd-2': { leader: 161 }, 'etcd-3': { leader: 161, learner: true } },
    expected: /healthy/,
  },
  {
    name: 'an alarm',
    answers: { 'etcd-1': { leader: 161 }, 'etcd-2': { leader: 161 }, 'etcd-3': { leader: 161 } },
    alarm: 'NOSPACE',
    expected: /healthy/,
  },
  {
    name: 'two leaders',
    answers: { 'etcd-1': { leader: 161 }, 'etcd-2': { leader: 161 }, 'etcd-3': { leader: 195 } },
    expected: /healthy/,
  },
  { name: 'no leader', answers: { 'etcd-1': { leader: 0 }, 'etcd-2': { leader: 0 }, 'etcd-3': { leader: 0 } }, expected: /healthy/ },
];

for (const row of members)
  test(`the drill's member, the agent's and the tool's alike: ${row.name}`, (t) => {
    const candidates: DrillCandidate[] = ORDER.map((name) => {
      const answer = row.answers[name]!;
      return answer === 'silent'
        ? { name, status: { error: 'DEADLINE_EXCEEDED' } }
        : {
            name,
            status: {
              id: String(IDS[name]),
              leader: String(answer.leader),
              isLearner: answer.learner ?? false,
              alarms: row.alarm ? [row.alarm] : [],
            },
          };
    });
    const view = {
      members: ORDER.map((name) => ({
        id: IDS[name],
        name,
        learner: row.answers[name] !== 'silent' && (row.answers[name] as { learner?: boolean }).learner === true,
      })),
      statuses: Object.fromEntries(
        ORDER.flatMap((name) => {
          const answer = row.answers[name]!;
          return answer === 'silent' ? [] : [[IDS[name], { leader: answer.leader }]];
        }),
      ),
      alarms: row.alarm ? [{ member: IDS['etcd-3'], alarm: row.alarm }] : [],
    };
    const tool = drillMember(candidates);
    const agents = agent<{ member?: string; refused?: string }>('drill-member', { view, order: ORDER });
    if (typeof row.expected === 'string') {
      t.deepEqual(tool, { member: row.expected });
      t.deepEqual(agents, { member: row.expected });
    } else {
      t.regex('refused' in tool ? tool.refused : '', row.expected);
      t.regex(agents.refused ?? '', row.expected);
    }
  });

test("scheduled drills: each member's agent gets a timer and the drill's two commands, the control node's own; its unit may write etcd's data directory alone", async (t) => {
  const s3 = { endpoint: 'https://s3.example.org', bucket: 'bkt', object_prefix: 'lab', access_key: 'AK', secret_key: 'SK' };
  const doc = baseDocument();
  const inventory = load({
    ...doc,
    backup: { enabled: true, verify: { enabled: true, schedule: 'Sun *-*-* 05:00:00' } },
    defaults: { ...(doc.defaults as object), restore: { s3, encryption_key: 'ab'.repeat(32) } },
  });
  const guest = (await renderWithPki(inventory)).guests.get('etcd-2')!;
  const files = new Map(guest.files.map((file) => [file.path, file.content]));
  t.regex(files.get(AGENT_PATHS.verifyTimer)!, /^OnCalendar=Sun \*-\*-\* 05:00:00$/m);
  t.true(guest.services.some((service) => service.unit === VERIFY_UNITS.timer));
  const scratch = drillScratch(inventory);
  const service = files.get(AGENT_PATHS.verifyService)!.split('\n');
  for (const line of [
    `ReadWritePaths=${inventory.etcd.dataDir}`,
    'ExecStart=/usr/local/sbin/etcd-kvm-agent verify',
    'MemoryMax=512M',
    'CPUWeight=10',
    'IOWeight=10',
    'ProtectSystem=strict',
    'User=etcd',
  ])
    t.true(service.includes(line), line);
  const config = JSON.parse(files.get(AGENT_PATHS.config)!) as AgentConfig;
  const member = inventory.members[1]!;
  // The commands `backup --verify` sends over SSH, word for word.
  const script = drillStartScript(inventory, member);
  t.true(script.includes(commandLine(config.verify.restore)), script);
  t.true(script.includes(commandLine(config.verify.etcd)), script);
  t.like(config.verify, { enabled: true, schedule: 'Sun *-*-* 05:00:00', scratch, members: ['etcd-1', 'etcd-2', 'etcd-3'] });

  // Without backups there is nothing to drill: refused at its field.
  t.deepEqual(problemsOf({ ...doc, backup: { enabled: false, verify: { enabled: true } } }), [
    "backup.verify.enabled: needs backup.enabled: true — a scheduled drill restores the cluster's newest backup, with the bucket and keys the agents back up with: turn backups on too",
  ]);
});
