import { $ } from 'zx';
import { FactCache } from '../../tasks/core/facts.ts';
import { DeployContext, guestsOf } from '../../tasks/deploy/context.ts';
import { askThroughAgents } from '../../tasks/guest/agent.ts';
import { guestProbeScript, parseGuestProbe } from '../../tasks/guest/facts.ts';
import { loadInventory } from '../../tasks/inventory/load.ts';
import { OWNER_NAMESPACE } from '../../tasks/render/domain.ts';
import { guestQuestions } from '../../tasks/steps/guest.ts';
import { argument, median } from './cli.ts';

/**
 * The guest probe alone, on the deployed lab (`npm run lab:up`, then a deploy): every member's facts
 * asked at once, as a no-op asks them (one process per member, a shell that becomes stat, and the agent's file calls), against the
 * probe as it was before (one script per member through the agent, still the way over SSH). Per
 * round: its wall-clock time, and the guests' CPU above their idle rate (libvirt's cpu.time of each
 * domain, the idle rate measured over 3 s before the round). Prints a Markdown table.
 *
 *   npx tsx scripts/bench/guest-probe.ts [--rounds N] [-i INVENTORY]
 */

const rounds = Number(argument('--rounds', '7'));
const inventory = loadInventory(argument('-i', 'inventories/lab.yaml'));
$.verbose = false;

/** The members' domains' CPU time so far, in ms (libvirt's cpu.time: every thread of each QEMU). */
async function guestCpuMs(): Promise<number> {
  const names = inventory.members.map((member) => member.name);
  const out = (await $`virsh -c qemu:///system domstats --cpu-total ${names}`).stdout;
  return [...out.matchAll(/cpu\.time=(\d+)/g)].reduce((sum, match) => sum + Number(match[1]) / 1e6, 0);
}

/** One round's wall time and the guests' CPU above idle, per member. */
async function measure(round: () => Promise<void>): Promise<{ wallMs: number; cpuPerMemberMs: number }> {
  const idleFrom = await guestCpuMs();
  const idleStart = performance.now();
  await new Promise((resolve) => setTimeout(resolve, 3_000));
  const idleRate = ((await guestCpuMs()) - idleFrom) / (performance.now() - idleStart);
  const from = await guestCpuMs();
  const started = performance.now();
  await round();
  const wallMs = performance.now() - started;
  const used = (await guestCpuMs()) - from;
  return { wallMs, cpuPerMemberMs: (used - idleRate * wallMs) / inventory.members.length };
}

const context = await DeployContext.open(inventory, [], new FactCache());
try {
  const guests = guestsOf(inventory, inventory.members, context.store);
  const questionsOf = (name: string) => guestQuestions(guests.get(name)!);
  const noSsh = () => Promise.reject(new Error('the bench asks through the agents only'));
  const ways: Record<string, () => Promise<void>> = {
    'one process, then file calls for what changed (a no-op now)': async () => {
      await Promise.all(inventory.members.map((member) => context.guestProbe.askNow(member, questionsOf(member.name), noSsh)));
    },
    'one script per member (before; the SSH way)': async () => {
      const hypervisor = inventory.members[0]!.hypervisor;
      const answers = await askThroughAgents(
        await context.remote.sessions.get(hypervisor, 'bench'),
        inventory.members.map((member) => ({ domain: member.name, script: guestProbeScript(questionsOf(member.name)) })),
        { namespace: OWNER_NAMESPACE, id: context.owner().identity.id! },
        30_000,
      );
      answers.forEach((answer, i) => {
        if (!answer.ok) throw new Error(`${inventory.members[i]!.name}: ${answer.reason}`);
        parseGuestProbe(answer.output, questionsOf(inventory.members[i]!.name));
      });
    },
  };
  const rows: string[] = [];
  for (const [way, round] of Object.entries(ways)) {
    const results = [];
    for (let i = 0; i < rounds; i++) results.push(await measure(round));
    const walls = results.map((result) => result.wallMs);
    const cpus = results.map((result) => result.cpuPerMemberMs);
    rows.push(
      `| ${way} | ${(median(walls) / 1000).toFixed(2)} s | ${Math.round(median(cpus))} ms | ${cpus.map((ms) => Math.round(ms)).join(', ')} |`,
    );
  }
  console.log(`\nguest probe of ${inventory.members.length} members, ${rounds} rounds each\n`);
  console.log('| way | wall (median) | guest CPU per member above idle (median) | each round |\n|---|---|---|---|');
  for (const row of rows) console.log(row);
} finally {
  await context.close();
}
