import { readFileSync, rmSync } from 'node:fs';
import { cpus } from 'node:os';
import { $ } from 'zx';
import { argument, median } from './bench/cli.ts';
import { freshLabCluster, inMember, restartToHealthy, writeReleaseInventory } from './bench/lab-cluster.ts';
import { MEMBER_IPS } from '../test/helpers/lab-names.ts';
import { COMMAND_TIMES_HEADING } from '../tasks/remote/command-times.ts';

/**
 * What an etcd upgrade costs per member, against its lower bound (issue 26: ≤ 1.2×), on the local lab
 * (`npm run lab:up` first; it removes the lab's members and state, as the e2e tests do):
 *
 * - a cluster deployed with `binaries: release` on the lab's 3.5.16, then rolled to 3.5.30 and back by
 *   the tool N times (a patch step either way, which the pre-flight allows while the cluster version
 *   stays 3.5), each time in two ways: first with 3.5.30 staged ahead (a run with etcd.stage_version,
 *   timed apart), then with its directory removed from every member by hand, so the roll installs it;
 *   the roll back finds 3.5.16 kept in every member. Each roll's wall time, and its guest step's (the
 *   roll itself), per member;
 * - the lower bound, without the tool: on each member in turn, `systemctl restart etcd` over SSH until
 *   etcd answers healthy again (the swap of a binary already in place costs nothing more).
 *
 *   npx tsx scripts/bench-upgrade.ts [--rolls N]   (default 1: each way once)
 */

const INVENTORY = 'inventories/.bench-upgrade.yaml';
const REPORT = '/tmp/etcd-kvm-bench-upgrade.json';
const VERSIONS = ['v3.5.16', 'v3.5.30'] as const;

const rolls = Number(argument('--rolls', '1'));

/** How the release a roll goes to got into the members. */
type RollWay = 'staged' | 'installs' | 'back';
const WAYS: Record<RollWay, string> = {
  staged: `to ${VERSIONS[1]}, staged ahead`,
  installs: `to ${VERSIONS[1]}, installed by the roll`,
  back: `back to ${VERSIONS[0]} (kept in the members)`,
};

$.verbose = false;
const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

const writeInventory = (version: string, stageVersion?: string) =>
  writeReleaseInventory(INVENTORY, version, stageVersion ? { stage_version: stageVersion } : {});

interface Report {
  results: { step: string; host: string; status: string; durationMs: number }[];
}

async function deployed(): Promise<{ ms: number; report: Report; commands: string[] }> {
  const started = performance.now();
  const result = await $`npx tsx tasks/deploy.ts -i ${INVENTORY} --json ${REPORT} --profile`.nothrow();
  const ms = performance.now() - started;
  if (result.exitCode !== 0) throw new Error(`deploy failed:\n${result.stdout.slice(-3000)}\n${result.stderr}`);
  // --profile's slowest commands in members: where each member's turn spends its time.
  const lines = result.stdout.split('\n');
  const from = lines.findIndex((line) => line.startsWith(COMMAND_TIMES_HEADING));
  const commands = from < 0 ? [] : lines.slice(from + 1).filter((line) => line.startsWith('  '));
  return { ms, report: JSON.parse(readFileSync(REPORT, 'utf8')) as Report, commands };
}

async function main(): Promise<void> {
  await freshLabCluster();
  writeInventory(VERSIONS[0]);
  await deployed();
  console.error(`deployed on ${VERSIONS[0]}`);

  const perMemberRun: Record<RollWay, number[]> = { staged: [], installs: [], back: [] };
  const perMemberRoll: Record<RollWay, number[]> = { staged: [], installs: [], back: [] };
  const staging: number[] = [];
  const bounds: number[] = [];
  const roll = async (way: RollWay, to: string) => {
    writeInventory(to);
    const run = await deployed();
    const rolled = run.report.results.filter((r) => r.step === 'guest' && r.status === 'changed');
    if (rolled.length !== 3) throw new Error(`the roll to ${to} changed ${rolled.length} members, not 3`);
    const members = rolled.length;
    perMemberRun[way].push(run.ms / members);
    perMemberRoll[way].push(Math.max(...rolled.map((r) => r.durationMs)) / members);
    // The floor under the same load: each member restarted by hand, one after another.
    for (const ip of Object.values(MEMBER_IPS)) bounds.push(await restartToHealthy(ip));
    console.error(
      `roll to ${to} (${way}): ${seconds(run.ms)} (${seconds(run.ms / members)} per member); restarts by hand: ${bounds.slice(-3).map(seconds).join(', ')}`,
    );
    console.error(`  its slowest commands in members:\n${run.commands.join('\n')}`);
  };
  for (let i = 0; i < rolls; i++) {
    writeInventory(VERSIONS[0], VERSIONS[1]);
    const staged = await deployed();
    staging.push(staged.ms);
    console.error(`staged ${VERSIONS[1]} in every member: ${seconds(staged.ms)}`);
    await roll('staged', VERSIONS[1]);
    await roll('back', VERSIONS[0]);
    // The release the roll goes to is not in the members: the roll installs it.
    for (const ip of Object.values(MEMBER_IPS)) await inMember(ip, `sudo rm -rf /opt/etcd-kvm/etcd-${VERSIONS[1]}-linux-amd64`);
    await roll('installs', VERSIONS[1]);
    await roll('back', VERSIONS[0]);
  }
  rmSync(INVENTORY, { force: true });
  const load = (await $`cat /proc/loadavg`).stdout.split(' ').slice(0, 3).join(' ');
  const bound = median(bounds);
  console.log(
    `Measured ${new Date().toISOString().slice(0, 10)} on ${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}, QEMU TCG (no KVM), 3 members, ${VERSIONS.join(' ⇄ ')}.\n`,
  );
  console.log('| per member | median | runs |');
  console.log('|---|---|---|');
  console.log(
    `| staging ${VERSIONS[1]} ahead (etcd.stage_version), the whole run ÷ members | ${seconds(median(staging) / 3)} | ${staging.map((ms) => seconds(ms / 3)).join(', ')} |`,
  );
  for (const way of ['staged', 'installs', 'back'] as const) {
    console.log(
      `| ${WAYS[way]}: the whole run ÷ members | ${seconds(median(perMemberRun[way]))} | ${perMemberRun[way].map(seconds).join(', ')} |`,
    );
    console.log(
      `| ${WAYS[way]}: the roll (the guest step) ÷ members | ${seconds(median(perMemberRoll[way]))} | ${perMemberRoll[way].map(seconds).join(', ')} |`,
    );
  }
  console.log(`| lower bound: systemctl restart etcd → healthy, by hand | ${seconds(bound)} | ${bounds.map(seconds).join(', ')} |`);
  console.log('');
  for (const way of ['staged', 'installs', 'back'] as const) {
    const ratio = median(perMemberRoll[way]) / bound;
    console.log(
      `${WAYS[way]}: the roll per member against the lower bound ${ratio.toFixed(2)} × (target ≤ 1.2: ${ratio <= 1.2 ? 'met' : 'NOT met'}).`,
    );
  }
  console.log(`Load average at the end: ${load}.`);
}

await main();
