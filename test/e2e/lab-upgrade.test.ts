import test, { type ExecutionContext } from 'ava';
import { scenario } from '../helpers/timing.ts';
import { setTimeout as delay } from 'node:timers/promises';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { parse, stringify } from 'yaml';
import { LAB } from '../../scripts/lab/config.ts';
import {
  deploy,
  deployInBackground,
  endpoint,
  etcdctl,
  freshLab,
  inLab,
  LAB_STATE,
  labRemoved,
  MEMBER_IPS,
  memberSsh,
  rootIdentity,
  tlsArgs,
  virsh,
  type DeployRun,
  type Identity,
} from '../helpers/lab.ts';
import { quorumKept, sampledHealth, withWriter } from '../helpers/lab-watch.ts';
import { Processes } from '../helpers/processes.ts';
import { RELEASES_DIR } from '../../scripts/lab/releases.ts';
import { v2StoreCheckCommand, v2StoreVerdict } from '../../tasks/upgrade/v2store.ts';

/**
 * etcd's version moved on a running cluster, for real: the lab's release server holds Debian's builds
 * of 3.4.23, 3.5.16 and 3.5.30 in etcd's release layout; the inventory says `binaries: release`. One
 * cluster, scenarios in a fixed order, each asserting only what it did: a cold deploy on 3.4.23 from
 * the release (not the image's etcd), a minor step with auth on and roles changed just before, a patch
 * step, refusals that change nothing, a failed roll, a killed one, and last the OS image changed under
 * every member (base_image).
 */

const INVENTORY = 'inventories/.e2e-upgrade.yaml';
const MEMBERS = Object.keys(MEMBER_IPS) as (keyof typeof MEMBER_IPS)[];
const ALL = MEMBERS.map((name) => endpoint(name));
const app: Identity = {
  caCert: rootIdentity.caCert,
  cert: join(LAB_STATE, 'pki/clients/app.crt'),
  key: join(LAB_STATE, 'pki/clients/app.key'),
};

/**
 * The lab inventory with release binaries at `version` (and `stage`, staged ahead), an application role
 * that can read `/app2/` when asked, on the lab's `image`.
 */
function writeInventory(version: string, readsApp2 = false, image: string = LAB.baseVolume, stage?: string): void {
  const doc = parse(readFileSync('inventories/lab.yaml', 'utf8'));
  doc.etcd = { ...doc.etcd, binaries: 'release', version, release_url: LAB.releaseUrl, ...(stage ? { stage_version: stage } : {}) };
  doc.defaults.base_image = { pool: LAB.pools.images, volume: image };
  doc.roles = {
    app: {
      permissions: [{ prefix: '/app/', access: 'readwrite' }, ...(readsApp2 ? [{ prefix: '/app2/', access: 'read' }] : [])],
    },
  };
  doc.users = { app: { roles: ['app'] } };
  writeFileSync(INVENTORY, stringify(doc), { mode: 0o600 });
}

function deployed(t: ExecutionContext, args: string[] = []): DeployRun {
  const started = Date.now();
  const result = deploy(['-i', INVENTORY, ...args]);
  t.log(`deploy ${args.join(' ')}: exit ${result.status} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  if (result.status !== 0) t.log(result.output.slice(-4000));
  return result;
}

const changed = (result: DeployRun) =>
  result.report.results
    .filter((r) => r.status !== 'ok')
    .map((r) => `${r.host}/${r.step}: ${r.status} ${r.changes.map((c) => c.summary).join('; ')}`);

/** Each member's server version as its own etcd reports it. */
function versions(): Record<string, string> {
  const status = JSON.parse(etcdctl(ALL, rootIdentity, ['endpoint', 'status', '-w', 'json']).stdout) as {
    Endpoint: string;
    Status: { version: string };
  }[];
  return Object.fromEntries(MEMBERS.map((m) => [m, status.find((s) => s.Endpoint === endpoint(m))?.Status.version ?? 'none']));
}

/** /version's etcdcluster, from one member. */
function clusterVersion(): string {
  const answer = inLab('curl', ['-sS', ...tlsArgs(rootIdentity), `${endpoint('etcd-1')}/version`]);
  return (JSON.parse(answer.stdout) as { etcdcluster: string }).etcdcluster;
}

/** The binary each member's etcd process runs. */
const runningBinary = (member: keyof typeof MEMBER_IPS) => memberSsh(member, 'sudo readlink /proc/$(pgrep -x etcd)/exe').stdout.trim();

/** HashKV of every member at one revision (the lowest any member reports): equal data, compared by etcd itself. */
function hashesAtOneRevision(t: ExecutionContext): void {
  const status = JSON.parse(etcdctl(ALL, rootIdentity, ['endpoint', 'status', '-w', 'json']).stdout) as {
    Status: { header: { revision: number } };
  }[];
  const revision = Math.min(...status.map((s) => s.Status.header.revision));
  const hashes = JSON.parse(etcdctl(ALL, rootIdentity, ['endpoint', 'hashkv', `--rev=${revision}`, '-w', 'json']).stdout) as {
    Endpoint: string;
    HashKV: { hash: number };
  }[];
  t.is(hashes.length, 3, JSON.stringify(hashes));
  t.is(new Set(hashes.map((h) => h.HashKV.hash)).size, 1, `HashKV at revision ${revision}: ${JSON.stringify(hashes)}`);
}

/** Root reads and writes anywhere; the application user writes under /app/ only. */
function usersWork(t: ExecutionContext, stamp: string): void {
  t.is(etcdctl(ALL, rootIdentity, ['put', `/other/${stamp}`, 'root']).status, 0);
  const allowed = etcdctl(ALL, app, ['put', `/app/${stamp}`, 'app']);
  t.is(allowed.status, 0, allowed.stderr);
  const denied = etcdctl(ALL, app, ['put', `/other/${stamp}-app`, 'app']);
  t.not(denied.status, 0);
  t.regex(denied.stderr, /permission denied/);
}

/** Every acknowledged key of the writer is there. */
function nothingLost(t: ExecutionContext, prefix: string, acked: string[]): void {
  t.true(acked.length > 10, `${acked.length} writes acknowledged`);
  const keys = new Set(etcdctl(ALL, rootIdentity, ['get', prefix, '--prefix', '--keys-only']).stdout.split('\n').filter(Boolean));
  t.deepEqual(
    acked.filter((n) => !keys.has(`${prefix}${n}`)),
    [],
  );
}

/** No member's etcd panicked since the lab came up (a 3.4 member applying an entry it does not know panics, and restarts into it again). */
function noPanic(t: ExecutionContext): void {
  for (const member of MEMBERS)
    t.is(memberSsh(member, 'sudo journalctl -u etcd --no-pager -o cat | grep -c "^panic:" || true').stdout.trim(), '0', member);
}

/** The leader, then the followers in the inventory's order: the order the tool rolls them in reverse. */
function leaderAndFollowers(): { leader: string; followers: string[] } {
  const status = JSON.parse(etcdctl(ALL, rootIdentity, ['endpoint', 'status', '-w', 'json']).stdout) as {
    Endpoint: string;
    Status: { header: { member_id: number }; leader: number };
  }[];
  const leading = status.find((s) => s.Status.header.member_id === s.Status.leader)!;
  const leader = MEMBERS.find((m) => endpoint(m) === leading.Endpoint)!;
  return { leader, followers: MEMBERS.filter((m) => m !== leader) };
}

/**
 * The longest a client may wait for an acknowledged write while a version change rolls (issue 50). Measured on the lab
 * alone on 2026-12-02 14:20 (load ~5): 0.9 s for 3.4.23 → 3.5.16, 1.4 s for 3.5.16 → 3.5.30, with the leader handing
 * leadership away first and releases installed one member at a time at low weight; before both, 25.6 and 17.3 s.
 * 10 s leaves CI's load its room and still fails the old behaviour.
 */
const ROLL_GAP_AT_MOST_MS = 10_000;

/** A change rolled under a writer and the health sampler (and, given, a bound on the writer's gap); the run's exit and output. */
async function rolled(t: ExecutionContext, prefix: string, longestGapAtMostMs?: number): Promise<DeployRun> {
  let run: DeployRun | undefined;
  const acked = await withWriter(
    t,
    prefix,
    ALL,
    async () => {
      const sampled = sampledHealth(() => deployed(t));
      const { result } = sampled;
      run = result;
      quorumKept(t, sampled);
    },
    longestGapAtMostMs,
  );
  nothingLost(t, prefix, acked);
  return run!;
}

test.before((t) => freshLab(t, LAB_STATE));
test.after.always(() => {
  rmSync(INVENTORY, { force: true });
  labRemoved(LAB_STATE);
});

scenario(
  "etcdutl's check of a v2 store, as the pre-flight runs it, on a running etcd of the lab's 3.5.30 release (on loopback): clean, then custom data once v2 writes are in a snapshot",
  async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'e2e-v2store-'));
    const daemons = new Processes();
    try {
      const archive = join(RELEASES_DIR, 'v3.5.30', 'etcd-v3.5.30-linux-amd64.tar.gz');
      t.is(spawnSync('tar', ['-xzf', archive, '-C', dir]).status, 0);
      const bin = join(dir, 'etcd-v3.5.30-linux-amd64');
      const data = join(dir, 'data');
      const [client, peer] = ['http://127.0.0.1:23379', 'http://127.0.0.1:23380'];
      // v2 on and a snapshot every 5 entries: what a cluster that once served v2 writes holds (3.5.30's etcdutl reads snapshots).
      daemons.start(
        join(bin, 'etcd'),
        ['--name', 'v2', '--data-dir', data, '--listen-client-urls', client, '--advertise-client-urls', client],
        {
          env: {
            ...process.env,
            ETCD_LISTEN_PEER_URLS: peer,
            ETCD_INITIAL_ADVERTISE_PEER_URLS: peer,
            ETCD_INITIAL_CLUSTER: `v2=${peer}`,
            ETCD_ENABLE_V2: 'true',
            ETCD_SNAPSHOT_COUNT: '5',
          },
          logFile: join(dir, 'etcd.log'),
        },
      );
      const check = () => {
        // The pre-flight's command, as the host's root instead of the member's etcd user (sudo -u etcd).
        const [sudo, , , etcdutl, ...args] = v2StoreCheckCommand(join(bin, 'etcdutl'), data);
        t.is(sudo, 'sudo');
        const run = spawnSync(etcdutl!, args, { encoding: 'utf8' });
        return v2StoreVerdict(run.status ?? -1, `${run.stdout}\n${run.stderr}`);
      };
      const up = () => spawnSync('curl', ['-sf', `${client}/health`]).status === 0;
      for (let i = 0; i < 40 && !up(); i++) await delay(250);
      t.true(up(), 'the loopback etcd answers');
      t.deepEqual(check(), { clean: true });
      for (let i = 0; i < 8; i++) t.is(spawnSync('curl', ['-sf', '-XPUT', `${client}/v2/keys/custom-${i}`, '-d', 'value=x']).status, 0);
      // etcd writes the snapshot that holds them a moment after the write that triggers it.
      let verdict = check();
      for (let i = 0; i < 40 && 'clean' in verdict && verdict.clean; i++) {
        await delay(250);
        verdict = check();
      }
      t.deepEqual(verdict, { clean: false, detail: 'custom (non-membership) data in its v2 store' });
    } finally {
      await daemons.stopAll();
      rmSync(dir, { recursive: true, force: true });
    }
  },
);

scenario('cold deploy with binaries: release on 3.4.23: every member runs the release the tool installed, not the image etcd', (t) => {
  writeInventory('v3.4.23');
  const first = deployed(t);
  t.is(first.status, 0);
  for (const member of MEMBERS) t.is(runningBinary(member), '/opt/etcd-kvm/etcd-v3.4.23-linux-amd64/etcd', member);
  t.deepEqual(versions(), { 'etcd-1': '3.4.23', 'etcd-2': '3.4.23', 'etcd-3': '3.4.23' });
  usersWork(t, 'cold');
  const again = deployed(t);
  t.is(again.status, 0);
  t.deepEqual(changed(again), []);
});

scenario(
  '3.4.23 → 3.5.16 with auth on and a role changed just before: one member at a time, leader last, data equal, users work, no write lost',
  async (t) => {
    // The role's change is in every member's WAL (snapshot-count 10000) when the 3.5 members replay it.
    writeInventory('v3.4.23', true);
    const roles = deployed(t);
    t.is(roles.status, 0);
    t.true(
      changed(roles).some((line) => line.includes('/users: changed')),
      changed(roles).join('\n'),
    );

    writeInventory('v3.5.16', true);
    const run = await rolled(t, '/e2e/upgrade-3.5.16/', ROLL_GAP_AT_MOST_MS);
    t.is(run.status, 0);
    t.regex(run.output, /etcd 3\.4\.23 → 3\.5\.16 \(minor step\)/);
    t.deepEqual(versions(), { 'etcd-1': '3.5.16', 'etcd-2': '3.5.16', 'etcd-3': '3.5.16' });
    t.is(clusterVersion(), '3.5.0');
    for (const member of MEMBERS) t.is(runningBinary(member), '/opt/etcd-kvm/etcd-v3.5.16-linux-amd64/etcd', member);
    t.true(memberSsh('etcd-1', 'test -x /opt/etcd-kvm/etcd-v3.4.23-linux-amd64/etcd').status === 0, 'the previous release is kept');
    t.true(readFileSync(join(LAB_STATE, 'snapshots/before-etcd-3.4.23-to-3.5.16.db')).length > 0, 'a snapshot before the roll');
    hashesAtOneRevision(t);
    usersWork(t, 'after-3.5');
    const again = deployed(t);
    t.is(again.status, 0);
    t.deepEqual(changed(again), []);
  },
);

scenario(
  '3.5.16 → 3.5.30, a patch step, staged ahead: staging restarts nothing, then the roll installs nothing; every member on 3.5.30',
  async (t) => {
    writeInventory('v3.5.16', true, LAB.baseVolume, 'v3.5.30');
    const staged = deployed(t);
    t.is(staged.status, 0);
    t.deepEqual(changed(staged).sort(), [
      ...MEMBERS.map(
        (m) =>
          `${m}/guest: changed stage etcd 3.5.30 into /opt/etcd-kvm/etcd-v3.5.30-linux-amd64, not run (etcd.stage_version: a roll to it then only restarts)`,
      ),
    ]);
    t.deepEqual(versions(), { 'etcd-1': '3.5.16', 'etcd-2': '3.5.16', 'etcd-3': '3.5.16' });

    writeInventory('v3.5.30', true);
    const run = await rolled(t, '/e2e/upgrade-3.5.30/', ROLL_GAP_AT_MOST_MS);
    t.is(run.status, 0);
    t.regex(run.output, /etcd 3\.5\.16 → 3\.5\.30 \(patch step\)/);
    t.false(
      changed(run).some((line) => line.includes('install etcd 3.5.30')),
      changed(run).join('\n'),
    );
    t.deepEqual(versions(), { 'etcd-1': '3.5.30', 'etcd-2': '3.5.30', 'etcd-3': '3.5.30' });
    hashesAtOneRevision(t);
    usersWork(t, 'after-3.5.30');
  },
);

scenario('refused with nothing changed: back to 3.4 once the cluster is 3.5, two minors at once, a roll while a member is down', (t) => {
  const refused = (version: string, says: RegExp) => {
    writeInventory(version, true);
    const run = deployed(t);
    t.is(run.status, 1);
    t.regex(run.output, says);
    t.deepEqual(
      run.report.results.filter((r) => r.status === 'changed'),
      [],
    );
  };
  refused('v3.4.23', /below the cluster version 3\.5/);
  refused('v3.7.0', /moves 2 minors/);
  // Into 3.6: etcdutl of each member's release checked its v2 store (clean), and the 3.5 patch etcd's guide asks is missing.
  refused(
    'v3.6.5',
    /every member at 3\.5\.32 or later: etcd-1 runs 3\.5\.30[\s\S]*passed: [\s\S]*etcdutl check v2store clean \(no custom data in the v2 store of etcd-1, etcd-2, etcd-3\)/,
  );
  t.is(memberSsh('etcd-3', 'sudo systemctl stop etcd').status, 0);
  try {
    // A patch back (allowed while every member answers) with a member down.
    refused('v3.5.16', /every member healthy: etcd-3/);
  } finally {
    // Back on the version it runs: the run starts the stopped etcd again.
    writeInventory('v3.5.30', true);
    t.is(deployed(t).status, 0);
  }
  t.deepEqual(versions(), { 'etcd-1': '3.5.30', 'etcd-2': '3.5.30', 'etcd-3': '3.5.30' });
});

scenario(
  'a roll that fails on its second member: that member back on its previous release and healthy, the last untouched, exit 1; fixed, the next run finishes',
  (t) => {
    const { leader, followers } = leaderAndFollowers();
    const [first, second] = followers as [keyof typeof MEMBER_IPS, keyof typeof MEMBER_IPS];
    // The release 3.5.16 is kept on every member from the first roll: on the second one to roll, its etcd is made to fail at start.
    const binary = '/opt/etcd-kvm/etcd-v3.5.16-linux-amd64/etcd';
    t.is(
      memberSsh(
        second,
        `sudo mv ${binary} ${binary}.real && printf '#!/bin/sh\\nexit 1\\n' | sudo tee ${binary} >/dev/null && sudo chmod 755 ${binary}`,
      ).status,
      0,
    );
    writeInventory('v3.5.16', true);
    const failed = deployed(t);
    t.is(failed.status, 1);
    t.regex(failed.output, new RegExp(`etcd on ${second} did not come back after its restart`));
    t.regex(failed.output, /It is back on its previous \/etc\/etcd\/etcd\.env and healthy/);
    t.deepEqual(versions(), { [first]: '3.5.16', [second]: '3.5.30', [leader]: '3.5.30' });
    t.is(runningBinary(second), '/opt/etcd-kvm/etcd-v3.5.30-linux-amd64/etcd');

    t.is(memberSsh(second, `sudo mv ${binary}.real ${binary}`).status, 0);
    const finished = deployed(t);
    t.is(finished.status, 0);
    t.deepEqual(versions(), { 'etcd-1': '3.5.16', 'etcd-2': '3.5.16', 'etcd-3': '3.5.16' });
    hashesAtOneRevision(t);
    noPanic(t);
  },
);

scenario('kill -9 of the tool in the middle of a roll: the next run finishes it', async (t) => {
  writeInventory('v3.5.30', true);
  let child: { kill: (signal: NodeJS.Signals) => boolean } | undefined;
  const background = deployInBackground(['-i', INVENTORY], (_output, spawned) => {
    child ??= spawned;
  });
  // Killed once the first member runs the new version, before the last does.
  let mixed: Record<string, string> = {};
  for (let waited = 0; waited < 600; waited++) {
    // Awaited, not slept: the run's output (and with it the child to kill) arrives on this event loop.
    await delay(1000);
    mixed = versions();
    if (Object.values(mixed).includes('3.5.30')) break;
  }
  child?.kill('SIGKILL');
  const killed = await background;
  t.is(killed.signal, 'SIGKILL', killed.output.slice(-2000));
  t.log(`killed with ${JSON.stringify(mixed)}`);
  t.true(Object.values(mixed).includes('3.5.16'), 'killed before the last member moved');

  const next = deployed(t);
  t.is(next.status, 0);
  t.deepEqual(versions(), { 'etcd-1': '3.5.30', 'etcd-2': '3.5.30', 'etcd-3': '3.5.30' });
  hashesAtOneRevision(t);
  const again = deployed(t);
  t.is(again.status, 0);
  t.deepEqual(changed(again), []);
});

/** Each member's etcd member ID, from etcd's own list. */
function memberIds(): Record<string, string> {
  const list = JSON.parse(etcdctl(ALL, rootIdentity, ['member', 'list', '-w', 'json']).stdout) as {
    members: { ID: number; name: string }[];
  };
  return Object.fromEntries(list.members.map((m) => [m.name, BigInt(m.ID).toString(16)]));
}

/** The image a member's OS disk is layered on: its backing file's name, as libvirt has it. */
const backingImage = (member: string) =>
  /<backingStore>[\s\S]*?<path>[^<]*\/([^/<]+)<\/path>/.exec(
    virsh(['vol-dumpxml', '--pool', 'etcd-lab', `${member}-os.qcow2`]).stdout,
  )?.[1];

scenario(
  'a new base image: every member rebuilt on it one at a time, leader last, data, member IDs and host keys kept, no write lost',
  async (t) => {
    // On whatever version the scenarios before left: this one changes the image only.
    const version = `v${versions()['etcd-1']}`;
    writeInventory(version, true, LAB.secondBaseVolume);
    const idsBefore = memberIds();
    t.is(etcdctl(ALL, rootIdentity, ['put', '/image/before', 'kept']).status, 0);
    for (const member of MEMBERS) t.is(backingImage(member), LAB.baseVolume, member);
    const { leader } = leaderAndFollowers();

    const dry = deployed(t, ['--dry-run']);
    t.is(dry.status, 0);
    for (const member of MEMBERS)
      t.regex(
        dry.output,
        new RegExp(`rebuild ${member} on ${LAB.pools.images}/${LAB.secondBaseVolume} \\(built from ${LAB.baseVolume}\\)`),
      );
    for (const member of MEMBERS) t.is(backingImage(member), LAB.baseVolume, `${member} untouched by the dry-run`);

    const run = await rolled(t, '/w-image/');
    t.is(run.status, 0);
    const rebuilt = run.report.results.filter((r) => r.step === 'rebuild' && r.status === 'changed').map((r) => r.host);
    t.is(rebuilt.length, 3, JSON.stringify(rebuilt));
    t.is(rebuilt.at(-1), leader, `rebuilt in the order ${rebuilt.join(', ')}; the leader was ${leader}`);
    for (const member of MEMBERS) {
      t.is(backingImage(member), LAB.secondBaseVolume, member);
      // Over SSH with the state directory's known_hosts, strictly: the member kept its host key.
      t.is(memberSsh(member, `cat ${LAB.secondImageMark.path}`).stdout.trim(), LAB.secondImageMark.line, member);
      t.is(memberSsh(member, 'jq --version').status, 0, `${member} has the new image's jq`);
    }
    t.deepEqual(memberIds(), idsBefore);
    t.is(etcdctl(ALL, rootIdentity, ['get', '/image/before', '--print-value-only']).stdout.trim(), 'kept');
    t.deepEqual(versions(), Object.fromEntries(MEMBERS.map((m) => [m, version.slice(1)])));
    hashesAtOneRevision(t);
    usersWork(t, 'after-image');

    const again = deployed(t);
    t.is(again.status, 0);
    t.deepEqual(changed(again), []);
  },
);
