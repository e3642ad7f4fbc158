import test, { type ExecutionContext } from 'ava';
import { scenario } from '../helpers/timing.ts';
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { parse, stringify } from 'yaml';
import { masterKeyFromHex } from '../../tasks/backup/format.ts';
import { renderManifest, verifyManifest } from '../../tasks/backup/manifest.ts';
import { SnapshotBucket } from '../../tasks/backup/s3.ts';
import { BACKUP_PACKAGES } from '../../tasks/render/guest/member-agent.ts';
import { parseDrillRecord, type DrillRecord } from '../../tasks/drill/record.ts';
import { Secret } from '../../tasks/core/secret.ts';
import { run } from '../helpers/exec.ts';
import {
  coldDeploy,
  deploy,
  type DeployRun,
  endpoint,
  etcdctl,
  etcdKvm,
  freshLab,
  installed,
  lab,
  leaderNow,
  LAB_STATE,
  labRemoved,
  MEMBER_IPS,
  memberSsh,
  rootIdentity,
  virsh,
} from '../helpers/lab.ts';
import { LAB_S3_CREDENTIALS, startLabS3, type LabS3 } from '../helpers/lab-s3.ts';
import { stopWatching, TICK_SCHEDULE, WATCH_SCENARIOS, WATCH_SETTINGS } from '../helpers/lab-watch-scenarios.ts';

/**
 * Backups, restore and recovery on the real lab, against a real S3-compatible server (s3rver, on the control
 * node's loopback, which the members reach through the lab's bridge: test/helpers/lab-s3.ts): deploy
 * with scheduled backups, write keys, let the members' agents back up on their own, back up from the
 * control node too, lose two members for good and recover from the third, then tear the whole lab down and
 * found the cluster anew from the latest backup (recover --from-snapshot), and read the keys back.
 */

const INVENTORY = 'inventories/.e2e-restore.yaml';
const MASTER_KEY = randomBytes(32).toString('hex');
const ALL = Object.keys(MEMBER_IPS).map((name) => endpoint(name as keyof typeof MEMBER_IPS));

const KEEP = 2;
let s3: LabS3 | undefined;
let s3Settings: Record<string, string> = {};

function writeInventory(options: { restore: boolean; backup: boolean; timestamp?: string; verify?: string }): void {
  const doc = parse(readFileSync('inventories/lab.yaml', 'utf8'));
  doc.defaults.restore = {
    enabled: options.restore,
    s3: s3Settings,
    encryption_key: MASTER_KEY,
    ...(options.timestamp ? { backup_timestamp: options.timestamp } : {}),
  };
  doc.backup = {
    enabled: options.backup,
    schedule: TICK_SCHEDULE,
    keep: KEEP,
    endpoint: s3!.memberEndpoint,
    ...(options.verify ? { verify: { enabled: true, schedule: options.verify } } : {}),
  };
  // Scheduled defragmentation and the lab's alert settings throughout: the watching scenarios run on this chain's first cluster.
  Object.assign(doc, WATCH_SETTINGS);
  writeFileSync(INVENTORY, stringify(doc), { mode: 0o600 });
}

function deployed(t: { log: (...values: unknown[]) => void }): DeployRun {
  const started = Date.now();
  const result = deploy(['-i', INVENTORY]);
  t.log(`deploy: exit ${result.status} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  if (result.status !== 0) t.log(result.output.slice(-4000));
  return result;
}

/**
 * The snapshots' object prefix: a space, '+', '/' and a non-ASCII letter, which S3 signs as sent and a naive
 * signer encodes twice; the lab's S3 checks every request's signature with AWS's own signer, so every backup,
 * listing, pruning and restore below proves the agent's and the tool's signatures for it.
 */
const PREFIX = 'e2e lab+prod/étcd';
const regexEscaped = (text: string) => text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
/** A snapshot's object name, as a regular expression's source. */
const DUMP = `${regexEscaped(PREFIX)}-\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}Z\\.dump`;
/** Where s3rver keeps an object: <bucket>/<name>._S3rver_object, the name's '/' a directory. */
const storedAt = (name: string) => join(s3!.dir, s3!.bucket, `${name}._S3rver_object`);

/** The snapshots in the bucket, by name, oldest first (none yet: not even their directory). */
const dumps = () =>
  (existsSync(dirname(storedAt(PREFIX))) ? readdirSync(dirname(storedAt(PREFIX))) : [])
    .map((file) => `${dirname(PREFIX)}/${file}`)
    .filter((name) => name.startsWith(`${PREFIX}-`) && name.endsWith('.dump._S3rver_object'))
    .map((name) => name.replace(/\._S3rver_object$/, ''))
    .sort();
/** When a snapshot was taken, as its name says (RFC 3339, to the second). */
const takenAt = (dump: string) => /-(\d{4}-.*Z)\.dump$/.exec(dump)![1]!;
const timeOf = (dump: string) => Date.parse(takenAt(dump));

/** The lab's bucket through the S3 API, as anyone holding only its keys reaches it. */
const labBucket = () =>
  new SnapshotBucket({
    endpoint: s3!.endpoint,
    bucket: s3!.bucket,
    objectPrefix: PREFIX,
    region: '',
    caCert: '',
    accessKey: new Secret(LAB_S3_CREDENTIALS.access_key),
    secretKey: new Secret(LAB_S3_CREDENTIALS.secret_key),
  });
const BACKUP_OBJECTS = ['dump', 'key', 'manifest'];

/**
 * An attacker with only the bucket's keys: a backup's objects (.dump, .key and its manifest) copied under
 * another time, as the attack that once made pruning delete every real backup and the restore roll back.
 */
async function plantCopy(of: string, timestamp: string): Promise<string> {
  const bucket = labBucket();
  try {
    for (const kind of BACKUP_OBJECTS)
      await bucket.put(
        `${PREFIX}-${timestamp}.${kind}`,
        await bucket.get(of.replace(/\.dump$/, `.${kind}`), { name: 'e2e', bytes: 1 << 30 }),
      );
  } finally {
    bucket.close();
  }
  return `${PREFIX}-${timestamp}.dump`;
}

async function removePlanted(planted: string): Promise<void> {
  const bucket = labBucket();
  try {
    for (const kind of BACKUP_OBJECTS) await bucket.delete(planted.replace(/\.dump$/, `.${kind}`));
  } finally {
    bucket.close();
  }
}

const PLANTED_IN_2099 = '2099-01-01T00:00:00Z';

async function until(what: string, condition: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs / 1000} s (bucket: ${dumps().join(', ')})`);
    await new Promise((resolve) => setTimeout(resolve, 2_000));
  }
}

/** What the members' agents said, tick by tick: "tick <elapse>: backed up …" lines from every journal. */
function agentLines(): { member: string; line: string }[] {
  return (['etcd-1', 'etcd-2', 'etcd-3'] as const).flatMap((member) =>
    memberSsh(member, 'sudo journalctl -u etcd-kvm-backup -o cat --no-pager')
      .stdout.split('\n')
      .filter((line) => line.startsWith('tick '))
      .map((line) => ({ member, line })),
  );
}

/** Members lost for good: their VMs destroyed and undefined, their OS, data and seed volumes deleted. */
function destroyWithDisks(t: ExecutionContext, members: readonly string[]): void {
  for (const member of members) {
    t.is(virsh(['destroy', member]).status, 0);
    t.is(virsh(['undefine', member]).status, 0);
    for (const volume of [`${member}-os.qcow2`, `${member}-data.qcow2`, `${member}-cloud-init.iso`])
      t.is(virsh(['vol-delete', '--pool', 'etcd-lab', volume]).status, 0, volume);
  }
}

test.before(async (t) => {
  freshLab(t, LAB_STATE);
  // After lab:up: the forwarder lives in the lab's namespace, which lab:down deletes.
  s3 = await startLabS3();
  s3Settings = { endpoint: s3.endpoint, bucket: s3.bucket, object_prefix: PREFIX, ...LAB_S3_CREDENTIALS };
});

test.after.always(async () => {
  await stopWatching();
  labRemoved(LAB_STATE);
  rmSync(INVENTORY, { force: true });
  await s3?.stop();
});

scenario('scheduled backups: one member takes each tick, also with a member stopped; pruned to keep; status shows the last', async (t) => {
  // Each minute, as the chain's other scenarios: at 20 s (ff7760d) the three agents' ticks kept the guests busy on the
  // AMD EPYC machine of 2026-12-02 (~60 % of a core each), a tick's backup ended ~87 s after its tick, and status
  // rightly called the last backup late (over two 20 s periods); the cold deploy before it took 377 s, not ~72.
  writeInventory({ restore: false, backup: true });
  t.is(deployed(t).status, 0);
  for (const i of [1, 2, 3]) t.is(etcdctl([endpoint('etcd-1')], rootIdentity, ['put', `e2e/restore/${i}`, `value ${i}`]).status, 0);
  const written = Date.now();
  // Two ticks after the keys: the second one prunes (keep 2) whatever the first boots' ticks left. Waited for until
  // that tick has ended (its manifest is its last upload, its pruning comes after): a copy made while it still pruned
  // could read an object deleted under it.
  const settled = () => {
    const after = dumps().filter((dump) => timeOf(dump) > written);
    return after.length >= 2 && dumps().length === KEEP && existsSync(storedAt(after.at(-1)!.replace(/\.dump$/, '.manifest')));
  };
  await until('two backups after the keys, the second one pruned', settled, 4 * 60_000);
  // The oldest backup copied under a name dated 2099: the agents' pruning passes it over and never deletes it.
  const planted = await plantCopy(dumps()[0]!, PLANTED_IN_2099);
  t.teardown(() => removePlanted(planted));
  const real = () => dumps().filter((dump) => dump !== planted);

  // A member whose etcd is down takes no backup; the others still take every tick.
  t.is(memberSsh('etcd-3', 'sudo systemctl stop etcd').status, 0);
  const stopped = Date.now();
  // Ticks are the schedule's elapses on the members' clocks, which the lab's guests keep within seconds of the host's.
  await until('a backup while etcd-3 is stopped', () => real().some((dump) => timeOf(dump) > stopped + 5_000), 3 * 60_000);
  t.is(memberSsh('etcd-3', 'sudo systemctl start etcd').status, 0);

  const bucket = real();
  t.is(bucket.length, KEEP, bucket.join(', '));
  t.true(dumps().includes(planted), 'the planted copy is left alone');
  for (const dump of bucket)
    for (const kind of ['key', 'manifest']) t.true(existsSync(storedAt(dump.replace(/\.dump$/, `.${kind}`))), `${dump} ${kind}`);
  // Sealed: the raw object does not contain the values written.
  t.false(readFileSync(storedAt(bucket.at(-1)!)).includes('value 1'));

  // Exactly one member backed up each tick; none failed.
  const lines = agentLines();
  t.log(lines.map(({ member, line }) => `${member}: ${line}`).join('\n'));
  const takers = new Map<string, string[]>();
  for (const { member, line } of lines) {
    const taken = /^tick (\S+): backed up revision \d+ as (\S+) /.exec(line);
    if (taken) takers.set(taken[1]!, [...(takers.get(taken[1]!) ?? []), member]);
  }
  t.true(takers.size >= 3, `${takers.size} ticks backed up`);
  for (const [tick, members] of takers) t.is(members.length, 1, `tick ${tick}: ${members.join(', ')}`);
  t.deepEqual(
    lines.filter(({ line }) => line.includes('backup failed')),
    [],
  );
  // The agent that pruned after the plant said what it passed over, and why.
  t.true(
    lines.some(({ line }) => line.includes(`: ignored ${planted}: dated ${PLANTED_IN_2099}, after this machine's clock`)),
    'the planted copy is named in a journal',
  );
  const stoppedTick = [...takers].find(([tick]) => Date.parse(tick) > stopped + 5_000);
  t.truthy(stoppedTick);
  t.not(stoppedTick![1][0], 'etcd-3');

  const status = etcdKvm('status', ['-i', INVENTORY]);
  t.is(status.status, 0, status.stdout + status.stderr);
  t.regex(status.stdout, new RegExp(`^backup: last success \\d+ (s|min) ago \\(\\S+\\) by etcd-\\d, revision \\d+, ${DUMP}$`, 'm'));
});

/** A drill's record in etcd (drill/record.ts), as the control node reads it. */
function drillRecord(key: 'last-drill' | 'last-verified'): DrillRecord | undefined {
  const answer = etcdctl(ALL, rootIdentity, ['get', `etcd-kvm/backup/${key}`, '--print-value-only']);
  return answer.stdout.trim() ? parseDrillRecord(answer.stdout.trim()) : undefined;
}

// Here, while the first scenario's backups run each minute: later scenarios turn them off, and the last one
// takes the control node's backup for the newest (a scheduled backup after it would hold its later keys).
scenario(
  "a scheduled restore drill (backup.verify): at its tick a follower's agent restores the newest backup on its own, its HashKV as recorded; status shows it, the others say whose it was, nothing is left behind; turned off, its units go",
  async (t) => {
    const started = Date.now();
    // Every minute at :50, between the backups (:00) and the defragmentations (:15, :45); off again at the end.
    writeInventory({ restore: false, backup: true, verify: '*:*:50' });
    t.is(deployed(t).status, 0);
    const fresh = () => {
      const record = drillRecord('last-drill');
      return record?.by === 'its agent on schedule' && Date.parse(record.finished) > started ? record : undefined;
    };
    try {
      await until('a scheduled drill recorded', () => fresh() !== undefined, 3 * 60_000);
    } finally {
      // What each member's timer and agent did, in the log whatever came of it.
      for (const name of ['etcd-1', 'etcd-2', 'etcd-3'] as const)
        t.log(
          name,
          memberSsh(
            name,
            'systemctl list-timers etcd-kvm-verify.timer --no-pager; sudo journalctl -u etcd-kvm-verify -o cat --no-pager -n 40',
          ).stdout,
        );
    }
    const record = fresh()!;
    t.log(JSON.stringify(record));
    t.is(record.outcome, 'ok', record.findings.join('; '));
    t.regex(record.findings.join('\n'), /^HashKV at revision \d+ is \d+, as recorded at backup time$/m);
    // The newest backup when it drilled: still in the bucket (keep 2), a tick's backup at most after it.
    t.true(dumps().slice(-2).includes(record.object), `${record.object} in ${dumps().join(', ')}`);
    t.deepEqual(drillRecord('last-verified'), record);
    const member = record.member as keyof typeof MEMBER_IPS;
    // Nothing left in the member that drilled: its scratch directory empty, no throwaway etcd listening.
    const left = memberSsh(member, "sudo sh -c 'ls -A /var/lib/etcd/.etcd-kvm-restore-drill; ss -Hltn sport = :32379'");
    t.is(left.stdout.trim(), '', left.stdout + left.stderr);
    // The others looked, and left the tick to it.
    const other = (['etcd-1', 'etcd-2', 'etcd-3'] as const).find((name) => name !== member)!;
    const said = memberSsh(other, 'sudo journalctl -u etcd-kvm-verify -o cat --no-pager').stdout;
    t.regex(said, new RegExp(`^tick \\S+: the drill is ${member}'s`, 'm'), said);
    const status = etcdKvm('status', ['-i', INVENTORY]).stdout;
    t.regex(
      status,
      new RegExp(
        `^backup drill: ${regexEscaped(record.object)} restored and verified \\d+ s ago on ${member} by its agent on schedule`,
        'm',
      ),
    );

    // Back to the first scenario's inventory (backups on each minute), which the scenarios after it start from.
    writeInventory({ restore: false, backup: true });
    t.is(deployed(t).status, 0);
    for (const name of ['etcd-1', 'etcd-2', 'etcd-3'] as const)
      t.is(
        memberSsh(name, 'test -e /etc/systemd/system/etcd-kvm-verify.timer || test -e /etc/systemd/system/etcd-kvm-verify.service').status,
        1,
        name,
      );
  },
);

scenario('a member whose image lacks python3-botocore: the deploy refuses that member by name and changes nothing', (t) => {
  // What the probe looks for: a file the package installs (ImagePackage.path), put aside as a stock image would lack it.
  const botocore = BACKUP_PACKAGES.find((need) => need.name === 'python3-botocore')!.path;
  t.is(memberSsh('etcd-2', `sudo mv ${botocore} ${botocore}.away`).status, 0);
  try {
    const refused = deployed(t);
    t.is(refused.status, 1);
    t.regex(
      refused.output,
      /guest: FAILED: the image lacks python3-botocore \(\/usr\/lib\/python3\/dist-packages\/botocore\/auth\.py is not there; the backup agent signs its S3 requests with its SigV4 signer\)\. Install python3-botocore in the member's image/,
    );
    t.deepEqual(
      refused.report.results.filter((r) => r.status === 'failed').map((r) => `${r.host}/${r.step}`),
      ['etcd-2/guest'],
    );
    t.deepEqual(
      refused.report.results.filter((r) => r.status === 'changed').map((r) => `${r.host}/${r.step}`),
      [],
    );
  } finally {
    t.is(memberSsh('etcd-2', `sudo mv ${botocore}.away ${botocore}`).status, 0);
  }
});

// Watching and tending, on the cluster the first scenario left (scheduled backups taken, healthy): test/helpers/lab-watch-scenarios.ts.
for (const [title, run] of WATCH_SCENARIOS) scenario(title, (t) => run(t, INVENTORY));

scenario(
  "backups turned off: each member's backup timer stops and its S3 keys go, defragmentation stays; the next run changes nothing",
  (t) => {
    writeInventory({ restore: false, backup: false });
    const off = deployed(t);
    t.is(off.status, 0);
    const guest = off.report.results.filter((r) => r.step === 'guest');
    t.deepEqual(guest.map((r) => `${r.host} ${r.status}`).sort(), ['etcd-1 changed', 'etcd-2 changed', 'etcd-3 changed']);
    for (const result of guest) {
      const said = result.changes.map((change) => change.summary);
      t.true(said.includes('stop etcd-kvm-backup.timer, etcd-kvm-backup.service (turned off in the inventory)'), said.join('\n'));
      t.true(said.includes('remove /etc/etcd-kvm/agent/s3-secret-key (turned off in the inventory)'), said.join('\n'));
    }
    for (const member of Object.keys(MEMBER_IPS) as (keyof typeof MEMBER_IPS)[]) {
      const look = memberSsh(
        member,
        'for u in etcd-kvm-backup.timer etcd-kvm-defrag.timer; do echo "$u $(systemctl is-active $u)"; done; sudo ls /etc/etcd-kvm/agent /etc/systemd/system/timers.target.wants',
      );
      t.is(look.status, 0, look.stderr);
      const lines = look.stdout.split('\n');
      t.true(lines.includes('etcd-kvm-backup.timer inactive'), `${member}: ${look.stdout}`);
      t.true(lines.includes('etcd-kvm-defrag.timer active'), `${member}: ${look.stdout}`);
      for (const gone of ['s3-access-key', 's3-secret-key', 'encryption-key', 'etcd-kvm-backup.timer'])
        t.false(lines.includes(gone), `${member}: ${gone}`);
      for (const kept of ['agent.key', 'backup.json', 'etcd-kvm-defrag.timer']) t.true(lines.includes(kept), `${member}: ${kept}`);
    }
    const again = deployed(t);
    t.is(again.status, 0);
    t.deepEqual(
      again.report.results.filter((r) => r.status !== 'ok').map((r) => `${r.host}/${r.step}`),
      [],
    );
  },
);

scenario(
  'backup --keep 2: two more backups leave the two newest, each with its key and manifest; a replayed copy pushes none out',
  async (t) => {
    const listing = async () => {
      const bucket = labBucket();
      try {
        return (await bucket.list(`${PREFIX}-`)).sort();
      } finally {
        bucket.close();
      }
    };
    // The agents' backups are there; the cluster takes none of its own now (the scenario before turned them off).
    const before = (await listing()).filter((name) => name.endsWith('.dump'));
    t.true(before.length > 0);
    // A real backup replayed under a name newer than any (a minute ahead: within the clocks' allowed skew), with its
    // manifest: before manifests, it was the newest and pushed a real backup out.
    const replayed = await plantCopy(before[0]!, new Date(Date.now() + 60_000).toISOString().replace(/\.\d{3}Z$/, 'Z'));
    t.teardown(() => removePlanted(replayed));
    const made: string[] = [];
    for (const round of [1, 2]) {
      // Object names carry the time to the second: never two in one second.
      await new Promise((resolve) => setTimeout(resolve, 1_100));
      const backup = etcdKvm('backup', ['-i', INVENTORY, '--keep', '2'], {
        timeoutMs: 5 * 60_000,
      });
      t.is(backup.status, 0, backup.stderr);
      made.push(new RegExp(` as (${DUMP}) `).exec(backup.stdout)![1]!);
      t.regex(
        backup.stdout,
        round === 1
          ? /\nkept 2 snapshot\(s\) .*; deleted \d+ object\(s\)/m // whatever the agents and the control node left: only these two stay
          : new RegExp(
              `\\nkept 2 snapshot\\(s\\) .*; deleted 3 object\\(s\\): ${['dump', 'key', 'manifest'].map((kind) => DUMP.replace(/dump$/, kind)).join(', ')}$`,
              'm',
            ),
      );
      t.true(backup.stdout.includes(`\nignored ${replayed}: its manifest is ${before[0]}'s: renamed or copied`), backup.stdout);
    }
    const after = await listing();
    t.deepEqual(after, [...made, replayed].flatMap((dump) => BACKUP_OBJECTS.map((kind) => dump.replace(/\.dump$/, `.${kind}`))).sort());
    const refused = etcdKvm('backup', ['-i', INVENTORY, '--keep', '0']);
    t.is(refused.status, 2);
    t.regex(refused.stderr, /--keep 0: give a whole number of at least 1/);
    t.deepEqual(await listing(), after);
  },
);

scenario(
  'quorum loss: two members destroyed with their disks; status and deploy say so; recover (killed once, run again) brings back three voting members with every key; the next deploy changes nothing; a recovery record left behind then forces nothing',
  async (t) => {
    // Backups play no part here: the cluster runs no backup agent (the inventory turned them off). The restore is
    // off too: members rejoining empty would wait for one (recover refuses to run while it is on).
    const recoverArgs = [...installed('recover'), '-i', INVENTORY];
    writeInventory({ restore: true, backup: false });
    const withRestore = run(process.execPath, [...recoverArgs, '--dry-run']);
    t.is(withRestore.status, 2);
    t.regex(withRestore.stderr, /restore\.enabled is true: members that rejoin the recovered cluster would wait for a restore/);
    writeInventory({ restore: false, backup: false });
    // A healthy cluster is not recovered.
    const healthyRefused = run(process.execPath, [...recoverArgs, '--dry-run']);
    t.is(healthyRefused.status, 1);
    t.regex(healthyRefused.stdout, /^refused: etcd-\d knows a leader \([0-9a-f]+\): the cluster has a quorum$/m);
    const keys = Array.from({ length: 20 }, (_, i) => `e2e/quorum/${i + 1}`);
    for (const key of keys) t.is(etcdctl([endpoint('etcd-1')], rootIdentity, ['put', key, `acknowledged ${key}`]).status, 0);
    const last = keys.at(-1)!;
    // Every member has applied the last write: a serializable read answers from the member's own store.
    for (const member of ['etcd-1', 'etcd-2', 'etcd-3'] as const) {
      const deadline = Date.now() + 60_000;
      while (
        etcdctl([endpoint(member)], rootIdentity, ['get', '--consistency=s', '--print-value-only', last]).stdout.trim() !==
        `acknowledged ${last}`
      ) {
        if (Date.now() > deadline) throw new Error(`${member} did not apply ${last}`);
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
    }

    destroyWithDisks(t, ['etcd-2', 'etcd-3']);
    // The survivor names its old leader until its election timeout has passed (5 s in the lab's inventory,
    // randomised up to twice that): only then does it know the quorum is gone.
    // etcdctl's JSON leaves a zero leader out (omitempty): an answer without one is "no leader".
    const survivorsLeader = () => {
      const answer = etcdctl([endpoint('etcd-1')], rootIdentity, ['endpoint', 'status', '-w', 'json']);
      if (answer.status !== 0) return `no answer (${answer.stderr.trim()})`;
      return /"leader":(\d+)/.exec(answer.stdout)?.[1] ?? '0';
    };
    const noticed = Date.now() + 60_000;
    while (survivorsLeader() !== '0') {
      if (Date.now() > noticed) throw new Error(`etcd-1 still names a leader 60 s after the others went: ${survivorsLeader()}`);
      await new Promise((resolve) => setTimeout(resolve, 1_000));
    }

    const status = etcdKvm('status', ['-i', INVENTORY]);
    t.is(status.status, 1);
    t.regex(status.stdout, /^problem: no leader: the quorum is lost \(1 of 3 members answer; no VM for etcd-2, etcd-3\)/m);
    t.regex(status.stdout, /^cluster: DEGRADED .* leader none$/m);

    const refused = deployed(t);
    t.is(refused.status, 1, refused.output.slice(-4000));
    t.regex(
      refused.output,
      /the cluster has lost its quorum for good: only 1 of 3 voting members hold their data \(etcd-2: .*; etcd-3: .*\); a quorum is 2\. Nothing was changed\. .*--dry-run: --from-member etcd-1 keeps every write etcd-1 had applied \(revision \d+, raft index \d+\)/,
    );
    t.false(virsh(['dominfo', 'etcd-2']).status === 0, 'the deploy made no VM');

    const dry = run(process.execPath, [...recoverArgs, '--dry-run']);
    t.is(dry.status, 0, dry.stdout + dry.stderr);
    t.regex(dry.stdout, /^quorum lost: only 1 of 3 voting members hold their data/m);
    t.regex(dry.stdout, /^recover from etcd-1 at revision \d+ \(raft index \d+\): every write etcd-1 had applied is kept;/m);
    t.false(existsSync(join(LAB_STATE, 'recovery.json')), 'a dry-run records nothing');

    // Killed once, right after the survivor was started with --force-new-cluster.
    const first = spawn(process.execPath, recoverArgs, { detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = once(first, 'exit');
    let seen = '';
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`recover never forced a new cluster:\n${seen}`)), 10 * 60_000);
      first.stdout!.on('data', (chunk: Buffer) => {
        seen += chunk.toString();
        if (seen.includes('etcd-1: etcd started with --force-new-cluster')) {
          clearTimeout(timer);
          process.kill(-first.pid!, 'SIGKILL');
          resolve();
        }
      });
    });
    // Reaped before the next run looks at the lock: a killed process not yet waited for is a zombie, which still "runs".
    await exited;
    t.log(`killed: ${seen}`);
    t.true(existsSync(join(LAB_STATE, 'recovery.json')));
    // It asked for the cluster's run lock before forcing anything; with no leader there is no lease to hold it by.
    t.regex(seen, /^lock: .*: only the lock in \S+ holds this run \(a run from another copy of it is not kept out\)$/m);
    t.true(seen.indexOf('lock: ') < seen.indexOf('etcd-1: etcd started with --force-new-cluster'), 'the lock was asked for first');

    const started = Date.now();
    const again = run(process.execPath, recoverArgs, { timeoutMs: 30 * 60_000 });
    t.log(
      `recover: exit ${again.status} in ${((Date.now() - started) / 1000).toFixed(1)} s\n${again.stdout.slice(-3000)}\n${again.stderr.slice(-2000)}`,
    );
    t.is(again.status, 0);
    t.regex(again.stdout, /^resuming the recovery from etcd-1/m);
    t.regex(again.stdout, /^recovered from etcd-1/m);
    t.false(existsSync(join(LAB_STATE, 'recovery.json')));

    const list = JSON.parse(etcdctl(ALL, rootIdentity, ['member', 'list', '-w', 'json']).stdout) as {
      members: { name: string; isLearner?: boolean }[];
    };
    t.deepEqual(list.members.map((m) => `${m.name}${m.isLearner ? ' (learner)' : ''}`).sort(), ['etcd-1', 'etcd-2', 'etcd-3']);
    for (const member of ['etcd-1', 'etcd-2', 'etcd-3'] as const)
      for (const key of [...keys, 'e2e/restore/1'])
        t.not(
          etcdctl([endpoint(member)], rootIdentity, ['get', '--consistency=s', '--print-value-only', key]).stdout.trim(),
          '',
          `${member}: ${key}`,
        );

    const unchanged = deployed(t);
    t.is(unchanged.status, 0);
    t.deepEqual(
      unchanged.report.results.filter((r) => r.status !== 'ok').map((r) => `${r.host}/${r.step}`),
      [],
    );

    // A record of a recovery left behind on the healthy cluster, naming a member that does not lead: trusted only as
    // far as live facts agree. Nothing is stopped, moved aside or forced; the deploy runs, and the record goes.
    const leaderId = /"leader":(\d+)/.exec(etcdctl([endpoint('etcd-1')], rootIdentity, ['endpoint', 'status', '-w', 'json']).stdout)![1]!;
    const follower = (['etcd-1', 'etcd-2', 'etcd-3'] as const).find(
      (member) =>
        !etcdctl([endpoint(member)], rootIdentity, ['endpoint', 'status', '-w', 'json']).stdout.includes(`"member_id":${leaderId},`),
    )!;
    // Bound to this cluster and to the follower as it answers (a record bound to nothing is refused: unit-tested).
    const clusterId = (JSON.parse(readFileSync(join(LAB_STATE, 'cluster-id.json'), 'utf8')) as { id: string }).id;
    const followerStatus = etcdctl([endpoint(follower)], rootIdentity, ['endpoint', 'status', '-w', 'json']).stdout;
    const memberId = BigInt(/"member_id":(\d+)/.exec(followerStatus)![1]!).toString(16);
    writeFileSync(
      join(LAB_STATE, 'recovery.json'),
      JSON.stringify({ from: follower, raftIndex: '1', revision: '1', started: '2026-01-01T00:00:00Z', clusterId, memberId }),
    );
    const stale = run(process.execPath, recoverArgs, { timeoutMs: 10 * 60_000 });
    t.is(stale.status, 0, stale.stdout + stale.stderr);
    t.regex(
      stale.stdout,
      new RegExp(
        `^resuming the recovery from ${follower} begun 2026-01-01T00:00:00Z: the cluster has a quorum \\(.*\\): nothing is forced again`,
        'm',
      ),
    );
    t.false(/force-new-cluster|moved aside|etcd stopped/.test(stale.stdout), stale.stdout);
    t.false(existsSync(join(LAB_STATE, 'recovery.json')));
    t.is(etcdctl(ALL, rootIdentity, ['get', '--print-value-only', 'e2e/restore/1']).status, 0);
  },
);

scenario('a backup from the control node: sealed, its key and manifest beside it, the master key never printed', async (t) => {
  t.is(etcdctl(ALL, rootIdentity, ['put', 'e2e/snapshot/before', 'in the backup']).status, 0);
  const backup = etcdKvm('backup', ['-i', INVENTORY], { timeoutMs: 5 * 60_000 });
  t.is(backup.status, 0, backup.stderr);
  t.regex(
    backup.stdout,
    new RegExp(
      `^backed up \\d+ bytes from etcd-\\d to s3 bucket etcd-backups at http://127\\.0\\.0\\.1:\\d+ as ${DUMP} \\(encrypted, with its manifest\\)$`,
      'm',
    ),
  );
  t.false(backup.stdout.includes(MASTER_KEY) || backup.stderr.includes(MASTER_KEY));
  const latest = new RegExp(`as (${DUMP})`).exec(backup.stdout)![1]!;
  const bucket = labBucket();
  const objects = await bucket.list(`${PREFIX}-`);
  bucket.close();
  for (const kind of BACKUP_OBJECTS) t.true(objects.includes(latest.replace(/\.dump$/, `.${kind}`)), `${kind}: ${objects.join(', ')}`);
  // Sealed: the raw object does not contain the values written.
  t.false(readFileSync(storedAt(latest)).includes('value 1'));
  // Written after the backup: the next scenario's cluster, founded from it, must not hold it.
  t.is(etcdctl(ALL, rootIdentity, ['put', 'e2e/snapshot/after', 'not in the backup']).status, 0);
});

scenario(
  'a restore drill: backup --verify restores the latest backup in a follower, its HashKV equal to the one recorded at backup time, leaves nothing behind and status shows it; a manifest recording another HashKV, and a damaged object, fail and are warned',
  async (t) => {
    const verify = (...args: string[]) =>
      etcdKvm('backup', ['-i', INVENTORY, '--verify', ...args], {
        timeoutMs: 10 * 60_000,
      });
    const status = () => etcdKvm('status', ['-i', INVENTORY]).stdout;
    const latest = dumps().at(-1)!;
    // The leader as the drill begins: it chooses its member from the statuses it reads first (waited for: under load
    // an election may be under way).
    let leaderBefore: string | undefined;
    await until(
      'one member leads before the drill',
      () => {
        leaderBefore = leaderNow();
        return leaderBefore !== undefined;
      },
      60_000,
    );
    const started = Date.now();
    const drilled = verify();
    t.log(`backup --verify: exit ${drilled.status} in ${((Date.now() - started) / 1000).toFixed(1)} s\n${drilled.stdout}${drilled.stderr}`);
    t.is(drilled.status, 0, drilled.stdout + drilled.stderr);
    t.true(drilled.stdout.startsWith(`drill: ${latest} in s3 bucket etcd-backups`), drilled.stdout);
    t.regex(drilled.stdout, /^ {2}HashKV at revision \d+ is \d+, as recorded at backup time$/m);
    const member = new RegExp(`^verified: ${regexEscaped(latest)} restores on (etcd-\\d) and holds what the cluster held`, 'm').exec(
      drilled.stdout,
    )?.[1] as keyof typeof MEMBER_IPS | undefined;
    t.truthy(member, drilled.stdout);
    // Never the leader it chose from (an election during a drill of minutes may hand leadership to the member after
    // it chose it: seen in CI's run of 2026-12-03 13:26, the drill 133 s); and nothing left in the member: no scratch
    // copy, no throwaway etcd.
    t.not(leaderBefore, endpoint(member!));
    const left = memberSsh(
      member!,
      "sudo sh -c 'ls -d /var/lib/etcd/.etcd-kvm-restore-drill 2>/dev/null; systemctl is-active etcd-kvm-restore-drill'",
    );
    t.is(left.stdout.trim(), 'inactive', left.stdout + left.stderr);
    t.regex(status(), new RegExp(`^backup drill: ${regexEscaped(latest)} restored and verified \\d+ s ago on ${member}`, 'm'));

    // An older backup whose manifest, signed with the master key (which only the key's holders have), records
    // another HashKV: it restores, and the drill says the data is not what the cluster held.
    const older = dumps().at(-2)!;
    const manifestName = older.replace(/\.dump$/, '.manifest');
    const bucket = labBucket();
    const original = await bucket.get(manifestName, { name: 'e2e', bytes: 1 << 20 });
    t.teardown(async () => {
      const restoring = labBucket();
      await restoring.put(manifestName, original);
      restoring.close();
    });
    const master = masterKeyFromHex(MASTER_KEY);
    const recorded = verifyManifest(original.toString('utf8'), master)!;
    t.truthy(recorded.hashKV, 'a backup made by the tool records its HashKV');
    const forged = { ...recorded, hashKV: { ...recorded.hashKV!, hash: (recorded.hashKV!.hash + 1) % 2 ** 32 } };
    await bucket.put(manifestName, Buffer.from(renderManifest(forged, master)));
    bucket.close();
    const mismatch = verify(takenAt(older));
    t.is(mismatch.status, 1, mismatch.stdout + mismatch.stderr);
    t.regex(mismatch.stdout, /was recorded at backup time: the restored data is not what the cluster held$/m);
    t.regex(mismatch.stdout, new RegExp(`^FAILED: ${regexEscaped(older)} does not prove restorable`, 'm'));
    t.regex(status(), new RegExp(`^warning: the last restore drill \\(${regexEscaped(older)}, on etcd-\\d, \\d+ s ago\\) failed: `, 'm'));

    // The latest backup's .dump damaged in the bucket (one byte): refused on the control node, before any member.
    const stored = readFileSync(storedAt(latest));
    t.teardown(() => writeFileSync(storedAt(latest), stored));
    const damaged = Buffer.from(stored);
    damaged[damaged.length >> 1]! ^= 0xff;
    writeFileSync(storedAt(latest), damaged);
    const broken = verify();
    t.is(broken.status, 1, broken.stdout + broken.stderr);
    t.regex(broken.stdout, new RegExp(`^ {2}not restored: it did not download intact: ${regexEscaped(latest)}: `, 'm'));
    // The last verified backup stays the one that verified.
    t.regex(status(), new RegExp(`^backup drill: ${regexEscaped(latest)} restored and verified`, 'm'));
  },
);

scenario(
  'nothing survives: the whole lab torn down (every VM, disk, network and pool); recover --from-snapshot founds the cluster anew holding exactly the latest backup, auth on; a deploy restoring again changes nothing',
  async (t) => {
    // The newest backup in the bucket: the one the scenario before took from the control node.
    const latest = dumps().at(-1)!;
    // The latest copied under a name dated 2099 (once restored for being the newest name): passed over, and said.
    const planted = await plantCopy(latest, PLANTED_IN_2099);
    t.teardown(() => removePlanted(planted));

    // Tear everything down: VMs, volumes, network, pools. Only the state directory (PKI) and S3 remain.
    t.is(lab('down').status, 0);
    t.is(lab('up').status, 0);

    const recoverArgs = [...installed('recover'), '-i', INVENTORY, '--from-snapshot'];
    const dry = run(process.execPath, [...recoverArgs, '--dry-run']);
    t.is(dry.status, 0, dry.stdout + dry.stderr);
    t.regex(dry.stdout, new RegExp(`^recover from ${regexEscaped(latest)} in s3 bucket etcd-backups at \\S+, taken \\S+ `, 'm'));
    t.regex(dry.stdout, /every write after \S+ is lost$/m);
    t.true(
      dry.stdout.includes(`ignored 1 other snapshot(s) that are not this cluster's own: ${planted} (dated ${PLANTED_IN_2099}`),
      dry.stdout,
    );
    // An older backup, named by its time: the one chosen (the scheduled backups' oldest left, by the time in its name).
    const older = dumps().filter((dump) => dump !== planted && dump !== latest)[0]!;
    const olderTime = takenAt(older);
    const dryOlder = run(process.execPath, [...recoverArgs.slice(0, -1), '--from-snapshot', olderTime, '--dry-run']);
    t.is(dryOlder.status, 0, dryOlder.stdout + dryOlder.stderr);
    t.regex(dryOlder.stdout, new RegExp(`^recover from ${regexEscaped(older)} in s3 bucket etcd-backups`, 'm'));

    const started = Date.now();
    const recovered = coldDeploy('recover --from-snapshot', () => run(process.execPath, recoverArgs, { timeoutMs: 30 * 60_000 }));
    t.log(
      `recover --from-snapshot: exit ${recovered.status} in ${((Date.now() - started) / 1000).toFixed(1)} s\n${recovered.stdout.slice(-2000)}`,
    );
    t.is(recovered.status, 0, recovered.stderr);
    t.regex(recovered.stdout, new RegExp(`^recovered from ${regexEscaped(latest)}`, 'm'));

    const list = JSON.parse(etcdctl(ALL, rootIdentity, ['member', 'list', '-w', 'json']).stdout) as {
      members: { name: string; isLearner?: boolean }[];
    };
    t.deepEqual(list.members.map((m) => `${m.name}${m.isLearner ? ' (learner)' : ''}`).sort(), ['etcd-1', 'etcd-2', 'etcd-3']);
    // Each member restored the backup itself: every one answers from its own store with exactly what the backup held.
    for (const member of ['etcd-1', 'etcd-2', 'etcd-3'] as const) {
      const get = (key: string) =>
        etcdctl([endpoint(member)], rootIdentity, ['get', '--consistency=s', '--print-value-only', key]).stdout.trim();
      t.is(get('e2e/snapshot/before'), 'in the backup', member);
      t.is(get('e2e/quorum/20'), 'acknowledged e2e/quorum/20', member);
      for (const i of [1, 2, 3]) t.is(get(`e2e/restore/${i}`), `value ${i}`, member);
      t.is(get('e2e/snapshot/after'), '', member);
    }
    // Auth came back with the data: a certificate that is no etcd user reads nothing; root writes.
    const asMember = etcdctl(
      [endpoint('etcd-1')],
      { caCert: rootIdentity.caCert, cert: join(LAB_STATE, 'pki/members/etcd-1.crt'), key: join(LAB_STATE, 'pki/members/etcd-1.key') },
      ['get', 'e2e/snapshot/before'],
    );
    t.not(asMember.status, 0);
    t.is(etcdctl(ALL, rootIdentity, ['put', 'e2e/after-restore', 'yes']).status, 0);

    // Restored data is never restored again: the inventory asking for that restore changes nothing.
    writeInventory({ restore: true, backup: false, timestamp: takenAt(latest) });
    const again = deployed(t);
    t.is(again.status, 0);
    t.deepEqual(
      again.report.results.filter((r) => r.status !== 'ok').map((r) => `${r.host}/${r.step}`),
      [],
    );
    t.is(etcdctl(ALL, rootIdentity, ['get', '--print-value-only', 'e2e/after-restore']).stdout.trim(), 'yes');
  },
);
