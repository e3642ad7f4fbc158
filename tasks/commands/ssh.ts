#!/usr/bin/env -S npx tsx
import type { ClientChannel } from 'ssh2';
import { runTool } from '../cli/tool.ts';
import { EXIT, InputError } from '../core/errors.ts';
import { withClusterSession } from '../etcd/session.ts';
import { loadInventory } from '../inventory/load.ts';
import { memberNamed } from '../inventory/member-named.ts';

const HELP = `Usage: etcd-kvm ssh -i INVENTORY MEMBER [-- COMMAND…]

A shell in a member as its admin user, or one command there, over the tool's own SSH through the member's
hypervisor: the host keys the tool pinned, the state directory's admin key read in memory (an encrypted state
directory stays encrypted), no ssh_config or ProxyCommand to write by hand.

  MEMBER                 a member of the inventory
  -- COMMAND…            run this and exit with its status (its words are quoted for the member's shell);
                         without, an interactive shell (standard input must be a terminal)
  -i, --inventory FILE   the inventory (required)
  -h, --help             this text

Exit: the command's or the shell's own status; 1 when the member could not be reached, 2 bad input.`;

/** Until the channel closes: its exit status, or 1 when it gave none (the connection went). */
const closed = (channel: ClientChannel) =>
  new Promise<number>((resolve) => channel.once('close', (code?: number | null) => resolve(typeof code === 'number' ? code : EXIT.failed)));

/** The operator's terminal wired to the member's: raw keys in, output out, the window's size followed. */
async function attach(channel: ClientChannel): Promise<number> {
  const stdin = process.stdin;
  stdin.setRawMode(true);
  stdin.pipe(channel);
  channel.pipe(process.stdout, { end: false });
  channel.stderr.pipe(process.stderr, { end: false });
  const resize = () => channel.setWindow(process.stdout.rows ?? 24, process.stdout.columns ?? 80, 0, 0);
  process.stdout.on('resize', resize);
  try {
    return await closed(channel);
  } finally {
    process.stdout.off('resize', resize);
    stdin.unpipe(channel);
    stdin.setRawMode(false);
    stdin.pause();
  }
}

process.exitCode = await runTool({
  help: HELP,
  options: {},
  positionals: true,
  failure: 'ssh failed',
  async run(_values, path, words) {
    const [name, ...command] = words;
    if (name === undefined) throw new InputError(`give MEMBER\n\n${HELP}`);
    if (command.length === 0 && !process.stdin.isTTY)
      throw new InputError('an interactive shell needs a terminal on standard input: give a command after --, or run it from one');
    const inventory = loadInventory(path);
    const member = memberNamed(inventory, name);
    return withClusterSession(inventory, async ({ members }) => {
      const ssh = await members.get(member);
      if (command.length === 0)
        return attach(
          await ssh.shell({ rows: process.stdout.rows ?? 24, cols: process.stdout.columns ?? 80, term: process.env.TERM ?? 'xterm' }),
        );
      const channel = await ssh.interactive(command);
      process.stdin.pipe(channel);
      channel.pipe(process.stdout, { end: false });
      channel.stderr.pipe(process.stderr, { end: false });
      const code = await closed(channel);
      process.stdin.unpipe(channel);
      process.stdin.pause();
      return code;
    });
  },
});
