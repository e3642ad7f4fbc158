import test from 'ava';
import { existsSync } from 'node:fs';
import { COMMANDS, type Command } from '../../tasks/cli/commands.ts';
import { dispatch, helpText, scriptPath, type Dispatch } from '../../tasks/cli/main.ts';
import { deployExitCode, parseDeployOptions } from '../../tasks/cli/options.ts';

/** The etcd-kvm dispatcher's decisions, without running anything: what each command line asks for. */

const VERSION = () => '9.9.9';
function named(name: string): Command {
  const found = COMMANDS.find((candidate) => candidate.name === name);
  if (!found) throw new Error(`no command ${name} in the table`);
  return found;
}
const deploy = named('deploy');
/** Every name the dispatcher takes, in the order its messages list them. */
const NAMES =
  'deploy, doctor, status, verify, drill, maintain, backup, recover, client, monitoring, logs, ssh, etcdctl, state, completion, help, version';

{
  const rows: { argv: string[]; expect: Dispatch }[] = [
    { argv: ['deploy', '-i', 'inv.yaml', '--dry-run'], expect: { run: deploy, rest: ['-i', 'inv.yaml', '--dry-run'] } },
    { argv: ['deploy', '--help'], expect: { run: deploy, rest: ['--help'] } },
    { argv: ['--help'], expect: { exit: 0, stdout: helpText() } },
    { argv: ['-h', 'deploy'], expect: { exit: 0, stdout: helpText() } },
    { argv: ['--version'], expect: { exit: 0, stdout: '9.9.9' } },
    { argv: ['version'], expect: { exit: 0, stdout: '9.9.9' } },
    { argv: ['help'], expect: { exit: 0, stdout: helpText() } },
    { argv: ['help', 'deploy'], expect: { run: deploy, rest: ['--help'] } },
    {
      argv: ['help', 'frob'],
      expect: {
        exit: 2,
        stderr: `error: help takes one command; commands are ${NAMES}`,
      },
    },
    {
      argv: ['help', 'deploy', 'status'],
      expect: {
        exit: 2,
        stderr: `error: help takes one command; commands are ${NAMES}`,
      },
    },
    { argv: [], expect: { exit: 2, stderr: `error: name a command\n\n${helpText()}` } },
  ];
  for (const { argv, expect } of rows) test(`dispatch ${JSON.stringify(argv)}`, (t) => t.deepEqual(dispatch(argv, VERSION), expect));
}

test('an unknown command (or a flag before any command) is named, with the commands', (t) => {
  for (const name of ['frob', 'Deploy', '-i', '--inventory']) {
    const plan = dispatch([name, 'x'], VERSION);
    t.like(plan, { exit: 2, stderr: `error: unknown command ${name}; commands are ${NAMES} (etcd-kvm --help says what each does)` });
  }
});

test('completion: bash, zsh or fish, else exit 2', (t) => {
  for (const shell of ['bash', 'zsh', 'fish'] as const) t.deepEqual(dispatch(['completion', shell], VERSION), { completion: shell });
  for (const rest of [[], ['tcsh'], ['bash', 'extra']]) t.like(dispatch(['completion', ...rest], VERSION), { exit: 2 });
});

test('the table: unique names, an existing script each, one-line summaries, long flags with --help', (t) => {
  t.is(new Set(COMMANDS.map((command) => command.name)).size, COMMANDS.length);
  for (const command of COMMANDS) {
    t.true(existsSync(scriptPath(command)), scriptPath(command));
    t.regex(scriptPath(command), new RegExp(`/tasks/commands/${command.module}\\.ts$`));
    t.notRegex(command.summary, /\n/);
    t.true(command.summary.length <= 100, command.name);
    t.true(
      command.flags.every((flag) => /^--[a-z][a-z-]*$/.test(flag)),
      command.name,
    );
    t.is(new Set(command.flags).size, command.flags.length, command.name);
    t.true(command.flags.includes('--help'), command.name);
  }
});

test("deploy's short flags, as Ansible's hands type them: -l, -t, -C, -D mean --limit, --tags, --check, --diff", (t) => {
  const short = parseDeployOptions(['-i', 'inv.yaml', '-l', 'etcd-1,etcd-2', '-t', 'guest', '-C', '-D']);
  const long = parseDeployOptions(['-i', 'inv.yaml', '--limit', 'etcd-1,etcd-2', '--tags', 'guest', '--check', '--diff']);
  t.deepEqual(short, long);
  t.like(short, { limit: ['etcd-1', 'etcd-2'], tags: ['guest'], dryRun: true, diff: true });
  t.throws(() => parseDeployOptions(['-i', 'inv.yaml', '-x']), { message: /Unknown option '-x'; see --help/ });
});

test('help lists help and version beside the commands', (t) => {
  t.regex(helpText(), /^ {2}help +this text, or a command's own: etcd-kvm help COMMAND$/m);
  t.regex(helpText(), /^ {2}version +print the version$/m);
});

test('--detailed-exitcode: 3 when a run changed something (or a dry-run would), 0 when nothing was to do; failures and bad input keep theirs', (t) => {
  const run = { lockLost: false, interrupted: false, failed: false, changed: false };
  const rows: [Partial<typeof run>, boolean, number][] = [
    [{}, true, 0],
    [{ changed: true }, true, 3],
    [{ changed: true }, false, 0],
    [{ changed: true, failed: true }, true, 1],
    [{ changed: true, lockLost: true }, true, 1],
    [{ changed: true, interrupted: true, failed: true }, true, 130],
  ];
  for (const [over, detailed, exit] of rows) t.is(deployExitCode({ ...run, ...over }, detailed), exit, JSON.stringify({ over, detailed }));
  t.true(parseDeployOptions(['-i', 'inv.yaml', '-C', '--detailed-exitcode']).detailedExitcode);
  t.false(parseDeployOptions(['-i', 'inv.yaml']).detailedExitcode);
  t.throws(() => parseDeployOptions(['-i', 'inv.yaml', '--list-phases', '--detailed-exitcode']), {
    message: /^--detailed-exitcode says whether a run or a dry-run changes anything; --list-phases lists phases, not changes$/,
  });
  t.throws(() => parseDeployOptions(['-i', 'inv.yaml', '--render-only', 'out', '--detailed-exitcode']), {
    message: /--render-only renders files/,
  });
});
