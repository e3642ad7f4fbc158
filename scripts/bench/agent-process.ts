import { loadavg } from 'node:os';
import { FactCache } from '../../tasks/core/facts.ts';
import { DeployContext } from '../../tasks/deploy/context.ts';
import { loadInventory } from '../../tasks/inventory/load.ts';
import type { VirshAsker } from '../../tasks/libvirt/session.ts';
import { argument, median } from './cli.ts';

/**
 * What the guest probe cannot go below, on the deployed lab (`npm run lab:up`, then a deploy): one
 * member's agent asked through a virsh session of its own, one question at a time. Per round: an
 * agent round trip (guest-ping, guest-get-time, a file's open, read and close), and a process started
 * with guest-exec and asked with guest-exec-status, without pause, until it has exited (/bin/true,
 * /bin/sh -c :, stat of one file). Prints a Markdown table of the medians.
 *
 *   npx tsx scripts/bench/agent-process.ts [--rounds N] [--member NAME] [-i INVENTORY]
 */

const rounds = Number(argument('--rounds', '5'));
const inventory = loadInventory(argument('-i', 'inventories/lab.yaml'));
const member = inventory.members.find((m) => m.name === argument('--member', inventory.members[0]!.name));
if (!member) throw new Error('no such member in the inventory');

const agent = (execute: string, args: object) => [
  'qemu-agent-command',
  '--timeout',
  '5',
  member.name,
  JSON.stringify({ execute, arguments: args }),
];

/** The agent's `return`, or a throw with virsh's words. */
async function ask(virsh: VirshAsker, execute: string, args: object = {}): Promise<unknown> {
  const [reply] = await virsh.ask([agent(execute, args)]);
  if (!reply?.ok) throw new Error(`${execute}: ${reply?.output ?? 'no answer'}`);
  return (JSON.parse(reply.output) as { return: unknown }).return;
}

async function timed(what: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await what();
  return performance.now() - started;
}

async function runToExit(virsh: VirshAsker, path: string, args: string[]): Promise<void> {
  const { pid } = (await ask(virsh, 'guest-exec', { path, arg: args, 'capture-output': true })) as { pid: number };
  // Asked again at once: how long the process takes to end is what is measured.
  while (!((await ask(virsh, 'guest-exec-status', { pid })) as { exited: boolean }).exited);
}

const context = await DeployContext.open(inventory, [], new FactCache());
try {
  const virsh = await context.remote.sessions.get(member.hypervisor, 'bench');
  const ways: Record<string, () => Promise<unknown>> = {
    'guest-ping': () => ask(virsh, 'guest-ping'),
    'guest-get-time': () => ask(virsh, 'guest-get-time'),
    'a file read whole (open, read, close)': async () => {
      const handle = await ask(virsh, 'guest-file-open', { path: '/etc/hostname', mode: 'r' });
      await ask(virsh, 'guest-file-read', { handle, count: 4096 });
      await ask(virsh, 'guest-file-close', { handle });
    },
    '/bin/true to its exit': () => runToExit(virsh, '/bin/true', []),
    '/bin/sh -c : to its exit': () => runToExit(virsh, '/bin/sh', ['-c', ':']),
    'stat of one file to its exit': () => runToExit(virsh, '/usr/bin/stat', ['-c', '%n %a %U', '/etc/hostname']),
  };
  const times = new Map(Object.keys(ways).map((way) => [way, [] as number[]]));
  for (let round = 0; round < rounds; round++) for (const [way, run] of Object.entries(ways)) times.get(way)!.push(await timed(run));
  console.log(`${member.name}'s agent, ${rounds} rounds, one question at a time; load ${loadavg()[0]!.toFixed(2)}\n`);
  console.log('| what | median | each round |\n|---|---|---|');
  for (const [way, ms] of times) console.log(`| ${way} | ${median(ms).toFixed(0)} ms | ${ms.map((m) => m.toFixed(0)).join(', ')} |`);
} finally {
  await context.close();
}
