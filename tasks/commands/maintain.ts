#!/usr/bin/env -S npx tsx
import { runTool } from '../cli/tool.ts';
import { EXIT, InputError } from '../core/errors.ts';
import { RunLock } from '../core/lock.ts';
import { formatChanges, formatRecap } from '../core/report.ts';
import { Runner, type Phase } from '../core/runner.ts';
import { formatBytes } from '../etcd/maintenance.ts';
import { handoffNote } from '../etcd/roll.ts';
import { onLockLoss, takeClusterRunLock } from '../etcd/run-lock.ts';
import { withClusterSession } from '../etcd/session.ts';
import { loadInventory } from '../inventory/load.ts';
import { compactStep, defragStep, disarmStep, healthyClusterStep, type DefragRecord } from '../steps/maintenance.ts';

const HELP = `Usage: etcd-kvm maintain -i INVENTORY [--compact] [--defrag] [--disarm] [--dry-run]

etcd's maintenance, on a healthy cluster only, in this order:
      --compact    compact the key-value history up to the current revision (old revisions of
                   keys are dropped, current values stay); frees space for --defrag to return
      --defrag     defragment each member for which maintenance.defrag.rule holds (the rule
                   the agents use), one at a time, followers first and the leader last, each healthy
                   again before the next; prints every database's size before and after
      --disarm     clear a NOSPACE alarm once every database is under 90 % of etcd.space_quota
                   (refused otherwise: free space first)
      --dry-run    check and plan only: print what would be done, change nothing
  -i, --inventory FILE   the inventory (required)
  -h, --help             this text

Exit: 0 done (or nothing to do), 1 a step failed or was refused, 2 bad input.`;

process.exitCode = await runTool({
  help: HELP,
  options: {
    compact: { type: 'boolean', default: false },
    defrag: { type: 'boolean', default: false },
    disarm: { type: 'boolean', default: false },
    'dry-run': { type: 'boolean', default: false },
  },
  failure: 'maintenance failed',
  async run(values, path) {
    if (!values.compact && !values.defrag && !values.disarm)
      throw new InputError(`say what to do: --compact, --defrag and/or --disarm\n\n${HELP}`);
    const dryRun = values['dry-run'] === true;
    const inventory = loadInventory(path);
    const lock = dryRun ? undefined : RunLock.acquire(inventory.stateDir);
    const started = performance.now();
    const runner = new Runner({ dryRun, renderer: process.stdout.isTTY ? 'default' : 'simple' });
    const record: DefragRecord = new Map();
    const lockLoss = onLockLoss(runner);
    try {
      await withClusterSession(inventory, async ({ clients, connections, root }) => {
        // A run that may change the cluster holds its lock in etcd too, beside the state directory's.
        const clusterLock = dryRun
          ? undefined
          : await takeClusterRunLock(
              inventory,
              { connections, identity: () => root, clients },
              { command: ['maintain', ...process.argv.slice(2)].join(' '), say: (line) => console.log(line), onLost: lockLoss.onLost },
            );
        const phase = (title: string, step: Parameters<Runner['runStep']>[0]): Phase => ({ title, run: () => runner.runStep(step) });
        try {
          await runner.runPhases([
            phase('healthy', healthyClusterStep({ inventory, clients })),
            ...(values.compact ? [phase('compact', compactStep({ inventory, clients }))] : []),
            ...(values.defrag ? [phase('defrag', defragStep({ inventory, clients, record }))] : []),
            ...(values.disarm ? [phase('disarm', disarmStep({ inventory, clients }))] : []),
          ]);
        } finally {
          await clusterLock?.release();
        }
      });
    } finally {
      lock?.release();
    }
    const changes = formatChanges(runner.results, { dryRun, diffs: false });
    if (changes) console.log(`\n${changes}`);
    if (record.size > 0) {
      console.log('\ndatabase sizes (before -> after):');
      for (const [name, { before, after, handedOff }] of record)
        console.log(
          `  ${name}: ${formatBytes(before.dbSize)} -> ${formatBytes(after.dbSize)} (in use ${formatBytes(after.dbSizeInUse)})` +
            (handedOff ? `; ${handoffNote(handedOff)}` : ''),
        );
    }
    console.log(`\n${formatRecap(runner.results, dryRun, performance.now() - started)}`);
    return runner.failed || lockLoss.lost ? EXIT.failed : EXIT.ok;
  },
});
