#!/usr/bin/env -S npx tsx
import { writeFileSync } from 'node:fs';
import { runTool } from '../cli/tool.ts';
import { EXIT, InputError } from '../core/errors.ts';
import { RunLock } from '../core/lock.ts';
import { onLockLoss, takeClusterRunLock } from '../etcd/run-lock.ts';
import { withClusterSession } from '../etcd/session.ts';
import { loadInventory } from '../inventory/load.ts';
import { FAULT_KINDS, faultsNamed, holdFor, type FaultDefinition } from '../faults/plan.ts';
import type { Inventory } from '../inventory/model.ts';
import { faultDrillLines, faultDrillMarkdown } from '../faults/report.ts';
import { faultDrillSvg } from '../faults/timeline.ts';
import { drillRefusal, faultDrill, type DrillTiming } from '../faults/run.ts';

const HELP = `Usage: etcd-kvm drill -i INVENTORY [--faults LIST] [--hold SECONDS] [--dry-run] [--json] [--report FILE] [--svg FILE]

A fault drill: real faults, one at a time, on a cluster you are about to trust, while the drill's own
clients write and read through every member; then a check that every acknowledged write is still there
and every read was linearizable. Only on a healthy cluster of three voting members or more that verify
passes, under the cluster's run lock; each fault is undone (whatever happened) and the cluster must be
healthy again, and verify pass, before the next. What it wrote (under etcd-kvm/drill/) is deleted.

Faults, in this order unless --faults names some:
  pause        a follower frozen (virsh suspend), then resumed
  link         a follower's network link cut (virsh domif-setlink), then restored
  kill         etcd killed with SIGKILL in a follower; systemd starts it again
  leader-link  the leader's link cut: the others elect a new one; then restored
  reset        a follower reset (virsh reset: no shutdown); it boots and rejoins
  slow-disk    a follower's etcd disk slowed to 20 operations a second, then unthrottled

      --faults LIST      which faults, comma-separated (${FAULT_KINDS.join(',')})
      --hold SECONDS     how long each fault is held before it is undone (default 15)
      --dry-run          check that the drill may run and print its plan; change nothing
      --json             print the report as JSON (every client operation included)
      --report FILE      also write the report as Markdown to FILE
      --svg FILE         also draw it to FILE: a row per member, each fault and each failed client operation
  -i, --inventory FILE   the inventory (required)
  -h, --help             this text

Exit: 0 passed, 1 a fault went wrong, a write was lost, a read was stale, or verify failed after a fault
(or the drill was refused), 2 bad input, 130 interrupted (the fault in place is undone first).`;

function holdMs(value: unknown): number {
  if (value === undefined) return 15_000;
  const seconds = Number(value);
  if (!Number.isInteger(seconds) || seconds < 1 || seconds > 600)
    throw new InputError(`--hold: ${JSON.stringify(value)} is not a whole number of seconds from 1 to 600\n\n${HELP}`);
  return seconds * 1000;
}

function planLines(inventory: Inventory, faults: readonly FaultDefinition[], timing: DrillTiming): string {
  return [
    `plan: ${faults.length} fault(s), one at a time, each held, then undone; ` +
      `the cluster healthy again and verify passing (within ${timing.settleMs / 1000} s) before the next:`,
    ...faults.map(
      (fault, i) =>
        `  ${i + 1}. ${fault.kind} on ${fault.target === 'leader' ? 'the leader' : 'a follower (in turn)'}, ` +
        `held ${holdFor(fault, inventory, timing.holdMs) / 1000} s: ${fault.says}`,
    ),
  ].join('\n');
}

process.exitCode = await runTool({
  help: HELP,
  options: {
    faults: { type: 'string' },
    hold: { type: 'string' },
    'dry-run': { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
    report: { type: 'string' },
    svg: { type: 'string' },
  },
  failure: 'drill failed',
  async run(values, path) {
    const chosen = faultsNamed(typeof values.faults === 'string' ? values.faults.split(',').map((name) => name.trim()) : undefined);
    if ('refused' in chosen) throw new InputError(`${chosen.refused}\n\n${HELP}`);
    const inventory = loadInventory(path);
    const timing: DrillTiming = { quietMs: 5_000, holdMs: holdMs(values.hold), settleMs: inventory.cluster.healthTimeout * 1000 };
    // With --json, standard output is the report alone: what happens as it happens goes to standard error.
    const say = values.json ? (line: string) => console.error(line) : (line: string) => console.log(line);
    say(planLines(inventory, chosen.faults, timing));
    const dryRun = values['dry-run'] === true;
    const lock = dryRun ? undefined : RunLock.acquire(inventory.stateDir);
    let interrupted = false;
    const stop = () => {
      interrupted = true;
      console.error('interrupted: the fault in place is undone and the drill stops');
    };
    process.on('SIGINT', stop).on('SIGTERM', stop);
    try {
      return await withClusterSession(inventory, async (session) => {
        const refused = await drillRefusal(inventory, session);
        if (refused) {
          say(`refused: ${refused}`);
          return EXIT.failed;
        }
        if (dryRun) {
          say('dry-run: the cluster may take the drill; nothing was done');
          return EXIT.ok;
        }
        const clusterLock = await takeClusterRunLock(
          inventory,
          { connections: session.connections, identity: () => session.root, clients: session.clients },
          {
            command: ['drill', ...process.argv.slice(2)].join(' '),
            say,
            onLost: onLockLoss({ interrupt: stop }).onLost,
          },
        );
        try {
          const report = await faultDrill(inventory, session, chosen.faults, timing, say, () => interrupted);
          console.log(values.json ? JSON.stringify(report, null, 2) : faultDrillLines(report));
          if (typeof values.report === 'string') writeFileSync(values.report, faultDrillMarkdown(report, inventory.cluster.name));
          if (typeof values.svg === 'string')
            writeFileSync(
              values.svg,
              faultDrillSvg(
                report,
                inventory.members.map((member) => member.name),
              ),
            );
          if (interrupted) return 130;
          return report.passed ? EXIT.ok : EXIT.failed;
        } finally {
          await clusterLock?.release();
        }
      });
    } finally {
      process.off('SIGINT', stop).off('SIGTERM', stop);
      lock?.release();
    }
  },
});
