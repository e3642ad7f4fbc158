import { readFileSync, rmSync } from 'node:fs';
import { cpus } from 'node:os';
import { $ } from 'zx';
import { LAB } from './lab/config.ts';
import { argument } from './bench/cli.ts';
import { freshLabCluster, labEtcdctl, restartToHealthy, writeReleaseInventory } from './bench/lab-cluster.ts';
import { endpoint, MEMBER_IPS, type LabMember } from '../test/helpers/lab-names.ts';
import { leaderEndpoint, parseEndpointStatuses, valuesUnder } from '../test/helpers/etcdctl-json.ts';
import { DEFRAG_RECORD_PREFIX } from '../tasks/status/defrag-records.ts';
import { longestGap, startWriter } from '../test/helpers/lab-writer.ts';

/**
 * What a client sees during each day-2 operation (issue 50), on the local lab, in one sitting: a writer of its own
 * (test/helpers/writer.ts: a new key every 200 ms through any member, a 3 s deadline per attempt, the next
 * member after an error, as a client library fails over) runs through every operation, one deploy or command each
 * (the scheduled defragmentation: the agents' ticks, once a deploy turned it on and the databases were fragmented),
 * on one cluster deployed fresh from the lab's release server. Per operation: the writes acknowledged, those lost
 * (not readable after), the attempts retried through another member, and the longest time without an acknowledged
 * write, against the lower bounds measured first in the same sitting (the leader's etcd restarted by hand, and a
 * follower's: the median of three each).
 *
 *   npm run bench:availability [-- --only follower-by-hand,leader-by-hand,...]
 *
 * `npm run lab:up` first; it removes the lab's members and state, as the e2e tests do. Operations run in the order
 * below whatever --only says (each needs the versions the ones before left); the by-hand restarts always run.
 */

const INVENTORY = 'inventories/.bench-availability.yaml';
const MEMBERS = Object.keys(MEMBER_IPS) as LabMember[];
const ALL = MEMBERS.map(endpoint);
/** How long the writer runs before and after each operation: its connections up first, and what follows seen. */
const SETTLE_MS = 5_000;

$.verbose = false;
const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
const load = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

interface InventoryWanted {
  version: string;
  stage?: string;
  quota?: number;
  image?: string;
  /** The inventory's `maintenance` section instead of the lab's. */
  maintenance?: Record<string, unknown>;
}

const writeInventory = ({ version, stage, quota, image, maintenance }: InventoryWanted) =>
  writeReleaseInventory(
    INVENTORY,
    version,
    { ...(stage ? { stage_version: stage } : {}), ...(quota ? { space_quota: quota } : {}) },
    image ?? LAB.baseVolume,
    maintenance,
  );

/** A command of the tool (`deploy`, `maintain`), run through tsx from the sources; it must succeed. */
async function tool(command: string, args: string[]): Promise<void> {
  const result = await $`${process.execPath} bin/etcd-kvm.mjs ${command} -i ${INVENTORY} ${args}`.nothrow();
  if (result.exitCode !== 0)
    throw new Error(`${command} ${args.join(' ')} failed (exit ${result.exitCode}):\n${result.stdout.slice(-3000)}\n${result.stderr}`);
}

async function leader(): Promise<LabMember> {
  const leading = leaderEndpoint(parseEndpointStatuses((await labEtcdctl(ALL, ['endpoint', 'status', '-w', 'json'])).stdout));
  const name = MEMBERS.find((member) => endpoint(member) === leading);
  if (!name) throw new Error('no member says it leads');
  return name;
}

const follower = async () => {
  const leading = await leader();
  return MEMBERS.find((member) => member !== leading)!;
};

interface Measured {
  operation: string;
  acknowledged: number;
  lost: number;
  retries: string[];
  gapMs: number;
  tookMs: number;
  load: string;
}

/**
 * `operation` under the writer. The longest gap counts the writer's stop as its last moment: a cluster that stopped
 * acknowledging before the end is not let off by the lack of a next write. Lost: acknowledged, and not readable after.
 */
async function measured(name: string, operation: () => Promise<unknown>): Promise<Measured> {
  const prefix = `bench-availability/${name.replace(/[^a-z0-9-]+/g, '-')}/`;
  const writer = startWriter(prefix, ALL);
  await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
  const started = performance.now();
  let tookMs: number;
  try {
    await operation();
  } catch (error) {
    // The writer is a process of its own in the lab's namespace: left running, it writes on through what follows.
    await writer.stop();
    throw error;
  } finally {
    tookMs = performance.now() - started;
  }
  await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
  const stoppedAt = Date.now();
  const { acked, retries } = await writer.stop();
  if (acked.length < 2) throw new Error(`${name}: the writer had ${acked.length} writes acknowledged`);
  const listed = await labEtcdctl(ALL, ['get', prefix, '--prefix', '--keys-only']);
  if (listed.exitCode !== 0) throw new Error(`${name}: the keys could not be read back: ${listed.stderr}`);
  const keys = new Set(listed.stdout.split('\n').filter(Boolean));
  const result: Measured = {
    operation: name,
    acknowledged: acked.length,
    lost: acked.filter(({ key }) => !keys.has(`${prefix}${key}`)).length,
    retries,
    gapMs: longestGap([...acked.map(({ at }) => at), stoppedAt]),
    tookMs,
    load: load(),
  };
  console.error(
    `${name}: ${result.acknowledged} acknowledged, ${result.lost} lost, ${retries.length} retried, longest gap ${seconds(result.gapMs)} (took ${seconds(tookMs)}; load ${result.load})${retries.map((line) => `\n  ${line}`).join('')}`,
  );
  return result;
}

/**
 * The operations in their order, each leaving the cluster where the next begins: a deploy of an inventory (`wants`)
 * with its flags, or another command. One whose inventory --only leaves out is still deployed, unmeasured. What an
 * operation needs first and what undoes it after (`prepare`, `after`) run outside its measure.
 */
interface Operation {
  name: string;
  wants?: InventoryWanted;
  prepare?: () => Promise<unknown>;
  run: () => Promise<unknown>;
  after?: () => Promise<unknown>;
}
// A guest setting every member's etcd restarts for: the quota, a quarter down, kept from the rolled restart on.
const QUOTA = 402653184;
const deployOf = (name: string, wants: InventoryWanted): Operation => ({
  name,
  wants,
  run: async () => {
    writeInventory(wants);
    await tool('deploy', []);
  },
});
/** Each member's last defragmentation by its agent, as the agents record it in etcd (its end, to the second). */
async function defragRecords(): Promise<Record<string, string>> {
  const listed = await labEtcdctl(ALL, ['get', '--prefix', DEFRAG_RECORD_PREFIX, '-w', 'json']);
  if (listed.exitCode !== 0) throw new Error(`the defragmentation records could not be read: ${listed.stderr}`);
  return valuesUnder(listed.stdout, DEFRAG_RECORD_PREFIX);
}

/**
 * The agents' defragmentation (maintenance.defrag) every half minute, by a rule that 1 MiB written, deleted and
 * compacted away makes hold in every member once, and after its defragmentation no more.
 */
const SCHEDULED_DEFRAG = {
  defrag: { enabled: true, schedule: '*:*:00,30', rule: { free_bytes: 512 * 1024, free_fraction: 0, quota_fraction: 0 } },
};

async function fragmentEveryDatabase(): Promise<void> {
  const value = 'x'.repeat(16 * 1024);
  for (let i = 0; i < 64; i++) await labEtcdctl(ALL, ['put', `bench-availability/fragment/${i}`, value]);
  await labEtcdctl(ALL, ['del', '--prefix', 'bench-availability/fragment/']);
  const status = JSON.parse((await labEtcdctl([ALL[0]!], ['endpoint', 'status', '-w', 'json'])).stdout) as {
    Status: { header: { revision: number } };
  }[];
  await labEtcdctl(ALL, ['compact', String(status[0]!.Status.header.revision), '--physical']);
  // Pages a compaction freed count as in use until the backend commits another write.
  await labEtcdctl(ALL, ['put', 'bench-availability/fragment/after-compaction', 'x']);
}

/** Until every member's agent has recorded a defragmentation since `recordsBefore` was read: the ticks, followers first, the leader last. */
async function everyMemberDefragmented(recordsBefore: Record<string, string>): Promise<void> {
  const deadline = performance.now() + 5 * 60_000;
  for (;;) {
    const now = await defragRecords();
    if (MEMBERS.every((member) => now[member] !== undefined && now[member] !== recordsBefore[member])) return;
    if (performance.now() > deadline) throw new Error(`not every member defragmented within 5 min: ${JSON.stringify(now)}`);
    await new Promise((resolve) => setTimeout(resolve, 2_000));
  }
}

/** Turned on by a deploy, the databases fragmented; measured until every member's agent has had its turn; turned off. */
function scheduledDefrag(): Operation {
  let before: Record<string, string> = {};
  return {
    name: 'scheduled-defrag',
    prepare: async () => {
      writeInventory({ version: 'v3.5.30', quota: QUOTA, maintenance: SCHEDULED_DEFRAG });
      await tool('deploy', []);
      before = await defragRecords();
      await fragmentEveryDatabase();
    },
    run: () => everyMemberDefragmented(before),
    after: async () => {
      writeInventory({ version: 'v3.5.30', quota: QUOTA });
      await tool('deploy', []);
    },
  };
}

const OPERATIONS: Operation[] = [
  { name: 'follower-by-hand', run: async () => restartToHealthy(MEMBER_IPS[await follower()]) },
  { name: 'leader-by-hand', run: async () => restartToHealthy(MEMBER_IPS[await leader()]) },
  deployOf('rolled-restart', { version: 'v3.4.23', quota: QUOTA }),
  { name: 'renewal', run: () => tool('deploy', ['--renew-certs']) },
  { name: 'defrag', run: () => tool('maintain', ['--compact', '--defrag']) },
  { name: 'replace-follower', run: async () => tool('deploy', ['--replace', await follower()]) },
  { name: 'replace-leader', run: async () => tool('deploy', ['--replace', await leader()]) },
  deployOf('minor-upgrade', { version: 'v3.5.16', quota: QUOTA }),
  deployOf('staging', { version: 'v3.5.16', stage: 'v3.5.30', quota: QUOTA }),
  deployOf('patch-upgrade', { version: 'v3.5.30', quota: QUOTA }),
  scheduledDefrag(),
  deployOf('image-rebuild', { version: 'v3.5.30', quota: QUOTA, image: LAB.secondBaseVolume }),
];

/** Always measured, each BOUND_SAMPLES times: the lower bound the others are held against. */
const LOWER_BOUNDS = ['follower-by-hand', 'leader-by-hand'];
/**
 * One restart by hand is no bound: the leader's took 0.4-0.6 s in two sittings and 4.0 s in a third (a write in
 * flight while the stopping leader handed over met its 3 s deadline). The median of three, each shown.
 */
const BOUND_SAMPLES = 3;
/** Held to the issue's bound: at most 1.5 × the leader restarted by hand. */
const ROLLED = [
  'rolled-restart',
  'renewal',
  'defrag',
  'replace-leader',
  'minor-upgrade',
  'staging',
  'patch-upgrade',
  'scheduled-defrag',
  'image-rebuild',
];

async function main(): Promise<void> {
  const only = argument('--only', '')
    .split(',')
    .map((name) => name.trim())
    .filter(Boolean);
  const unknown = only.filter((name) => !OPERATIONS.some((operation) => operation.name === name));
  if (unknown.length > 0) {
    console.error(
      `bench:availability: no operation ${unknown.join(', ')}; the operations: ${OPERATIONS.map(({ name }) => name).join(', ')}`,
    );
    process.exit(2);
  }
  await freshLabCluster();
  writeInventory({ version: 'v3.4.23' });
  await tool('deploy', []);
  console.error(`deployed on v3.4.23 from the lab's release server (load ${load()})`);
  const results: Measured[] = [];
  try {
    for (const operation of OPERATIONS) {
      if (LOWER_BOUNDS.includes(operation.name)) {
        for (let sample = 1; sample <= BOUND_SAMPLES; sample++)
          results.push(await measured(`${operation.name} ${sample}/${BOUND_SAMPLES}`, operation.run));
      } else if (only.length === 0 || only.includes(operation.name)) {
        await operation.prepare?.();
        results.push(await measured(operation.name, operation.run));
        await operation.after?.();
      } else if (operation.wants) await operation.run();
    }
  } finally {
    rmSync(INVENTORY, { force: true });
  }
  report(results);
}

/** The median gap of a lower bound's samples, and the samples, shortest first. */
function boundOf(results: Measured[], name: string): { ms: number; samples: number[] } {
  const samples = results
    .filter(({ operation }) => operation.startsWith(`${name} `))
    .map(({ gapMs }) => gapMs)
    .sort((a, b) => a - b);
  return { ms: samples[Math.floor(samples.length / 2)]!, samples };
}

/**
 * Each operation against both bounds: the leader restarted by hand (issue 50's, what a restart costs without a
 * hand-off) and a follower restarted by hand (the least any restart costs a client that fails over).
 */
function report(results: Measured[]): void {
  const leader = boundOf(results, 'leader-by-hand');
  const follower = boundOf(results, 'follower-by-hand');
  console.log(
    `Measured ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC on ${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}, ` +
      'QEMU TCG (no KVM), 3 members; a write every 200 ms through any member, 3 s deadline.\n',
  );
  for (const [what, bound] of [
    ['the leader', leader],
    ['a follower', follower],
  ] as const)
    console.log(`${what} restarted by hand: the median of ${bound.samples.map(seconds).join(', ')}: ${seconds(bound.ms)}.`);
  console.log('\n| operation | acknowledged | lost | retried | longest gap | ÷ leader by hand | ÷ follower by hand | took | load |');
  console.log('|---|---|---|---|---|---|---|---|---|');
  for (const r of results)
    console.log(
      `| ${r.operation} | ${r.acknowledged} | ${r.lost} | ${r.retries.length} | ${seconds(r.gapMs)} | ${(r.gapMs / leader.ms).toFixed(2)} | ${(r.gapMs / follower.ms).toFixed(2)} | ${seconds(r.tookMs)} | ${r.load} |`,
    );
  console.log('');
  const lost = results.filter(({ lost }) => lost > 0);
  console.log(`Writes lost: ${lost.length === 0 ? 'none' : lost.map(({ operation, lost }) => `${operation} ${lost}`).join(', ')}.`);
  for (const r of results.filter(({ operation }) => ROLLED.includes(operation)))
    console.log(
      `${r.operation}: ${(r.gapMs / leader.ms).toFixed(2)} × the leader restarted by hand (target ≤ 1.5: ${r.gapMs <= 1.5 * leader.ms ? 'met' : 'NOT met'}), ${(r.gapMs / follower.ms).toFixed(2)} × a follower.`,
    );
  const replaced = results.find(({ operation }) => operation === 'replace-follower');
  if (replaced)
    console.log(`replace-follower: longest gap ${seconds(replaced.gapMs)} (target ≤ 1 s: ${replaced.gapMs <= 1000 ? 'met' : 'NOT met'}).`);
}

await main();
