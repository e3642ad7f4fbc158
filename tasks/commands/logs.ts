#!/usr/bin/env -S npx tsx
import { runTool } from '../cli/tool.ts';
import { EXIT, InputError } from '../core/errors.ts';
import { withClusterSession } from '../etcd/session.ts';
import { journalCommand, journalRequest } from '../guest/journal.ts';
import { loadInventory } from '../inventory/load.ts';
import { memberNamed } from '../inventory/member-named.ts';

const HELP = `Usage: etcd-kvm logs -i INVENTORY MEMBER [UNIT] [-n LINES] [-f] [--since WHEN]

A member's journal for one unit (etcd's by default), read over SSH through its hypervisor with the host keys
the tool pinned and the state directory's admin key (read in memory, never written out): no ssh_config or
ProxyCommand to write by hand.

  MEMBER                 a member of the inventory
  UNIT                   a systemd unit: etcd (the default), etcd-kvm-backup, chrony… (".service" may be left out)
  -n, --lines N          the last N lines (default 100)
  -f, --follow           go on printing new lines until interrupted (Ctrl-C)
      --since WHEN       from this time on, as journalctl reads it ("10 min ago", "2026-11-29 10:00:00")
  -i, --inventory FILE   the inventory (required)
  -h, --help             this text

Exit: 0 when journalctl ended well (or --follow was interrupted), 1 when the member could not be reached or
journalctl failed, 2 bad input.`;

process.exitCode = await runTool({
  help: HELP,
  options: {
    lines: { type: 'string', short: 'n' },
    follow: { type: 'boolean', short: 'f', default: false },
    since: { type: 'string' },
  },
  positionals: true,
  failure: 'logs failed',
  async run(values, path, words) {
    const [name, unit, ...rest] = words;
    if (name === undefined || rest.length > 0) throw new InputError(`give MEMBER [UNIT]\n\n${HELP}`);
    const request = journalRequest(unit, values.lines as string | undefined, values.follow === true, values.since as string | undefined);
    const inventory = loadInventory(path);
    const member = memberNamed(inventory, name);
    return withClusterSession(inventory, async ({ members }) => {
      const channel = await (await members.get(member)).interactive(journalCommand(request));
      // Printed as it comes (nothing held here): a follow runs until the operator interrupts it.
      channel.pipe(process.stdout, { end: false });
      channel.stderr.pipe(process.stderr, { end: false });
      const interrupted = new Promise<number>((resolve) =>
        process.once('SIGINT', () => {
          channel.close();
          resolve(EXIT.ok);
        }),
      );
      const ended = new Promise<number>((resolve) =>
        channel.once('close', (code?: number | null) => resolve(code === 0 ? EXIT.ok : EXIT.failed)),
      );
      return Promise.race([ended, interrupted]);
    });
  },
});
