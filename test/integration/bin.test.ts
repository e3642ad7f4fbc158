import test from 'ava';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { DEPLOY_HELP } from '../../tasks/cli/options.ts';
import { COMMANDS } from '../../tasks/cli/commands.ts';
import { run } from '../helpers/exec.ts';

/** The installed command as node runs it: bin/etcd-kvm.mjs, plain JS registering tsx itself (no --import tsx). */
const BIN = resolve('bin/etcd-kvm.mjs');
function etcdKvm(args: string[], cwd = process.cwd()): { status: number; stdout: string; stderr: string } {
  const result = spawnSync(process.execPath, [BIN, ...args], { cwd, encoding: 'utf8', timeout: 60_000 });
  if (result.error) throw result.error;
  return { status: result.status ?? -1, stdout: result.stdout, stderr: result.stderr };
}
const STACK_FRAME = /^\s+at /m;

const longFlags = (text: string) => new Set(text.match(/(?<![\w-])--[a-z][a-z-]*/g) ?? []);

test('--version prints package.json version', (t) => {
  const { version } = JSON.parse(readFileSync('package.json', 'utf8')) as { version: string };
  const result = etcdKvm(['--version']);
  t.is(result.status, 0, result.stderr);
  t.is(result.stdout, `${version}\n`);
});

test('--help lists every command with its summary, exit 0', (t) => {
  const result = etcdKvm(['--help']);
  t.is(result.status, 0, result.stderr);
  const lines = result.stdout.split('\n').map((line) => line.trim().split(/ {2,}/));
  for (const command of COMMANDS) {
    t.true(
      lines.some(([name, summary]) => name === command.name && summary === command.summary),
      command.name,
    );
  }
  t.true(lines.some(([name]) => name === 'completion'));
});

test('no command: exit 2, the commands listed on stderr', (t) => {
  const result = etcdKvm([]);
  t.is(result.status, 2);
  t.is(result.stdout, '');
  for (const command of COMMANDS) t.true(result.stderr.includes(command.name));
});

test('an unknown command: exit 2, named on stderr with the commands, no stack trace', (t) => {
  for (const name of ['frob', '--inventory']) {
    const result = etcdKvm([name, '-i', 'inv.yaml']);
    t.is(result.status, 2);
    t.true(result.stderr.startsWith(`error: unknown command ${name}; commands are deploy, status, `), result.stderr);
    t.notRegex(result.stderr, STACK_FRAME);
  }
});

test('deploy --help prints the deploy usage, exit 0', (t) => {
  const result = etcdKvm(['deploy', '--help']);
  t.is(result.status, 0, result.stderr);
  t.is(result.stdout, `${DEPLOY_HELP}\n`);
});

test("every command runs its script, and the table's flags are the ones its --help lists", (t) => {
  for (const command of COMMANDS) {
    const result = etcdKvm([command.name, '--help']);
    t.is(result.status, 0, `${command.name}: ${result.stderr}`);
    t.deepEqual(
      [...command.flags].sort(),
      [...longFlags(result.stdout)].sort(),
      `${command.name}: tasks/cli/commands.ts's flags are stale`,
    );
  }
});

test('the arguments after the command reach the script', (t) => {
  const result = etcdKvm(['status', '-i', '/nonexistent/inventory.yaml']);
  t.is(result.status, 2);
  t.regex(result.stderr, /cannot read inventory \/nonexistent\/inventory\.yaml/);
});

test('works from any working directory, as an installed command is run', (t) => {
  const elsewhere = mkdtempSync(join(tmpdir(), 'etcd-kvm-bin-'));
  t.is(etcdKvm(['--version'], elsewhere).status, 0);
  const result = etcdKvm(['client', '--help'], elsewhere);
  t.is(result.status, 0, result.stderr);
  t.regex(result.stdout, /--user NAME/);
});

/** Completes the words as bash would on TAB, with the script loaded; the candidates, sorted. */
function complete(script: string, words: string[]): string[] {
  const asked = `COMP_WORDS=(${words.map((word) => `'${word}'`).join(' ')}); COMP_CWORD=${words.length - 1}`;
  const body = `${script}\n${asked}; _etcd_kvm; printf '%s\\n' "\${COMPREPLY[@]}"`;
  const result = run('bash', ['-c', body]);
  if (result.status !== 0) throw new Error(result.stderr);
  return result.stdout.split('\n').filter(Boolean).sort();
}

test("completion bash: valid bash that completes the commands, their flags, step names and the inventory's members", (t) => {
  const result = etcdKvm(['completion', 'bash']);
  t.is(result.status, 0, result.stderr);
  const script = result.stdout;
  const syntax = run('bash', ['-n'], { input: script });
  t.is(syntax.status, 0, syntax.stderr);
  for (const command of COMMANDS) t.true(script.includes(`${command.name})`), command.name);
  t.deepEqual(
    complete(script, ['etcd-kvm', '']),
    [...COMMANDS.map((command) => command.name), 'completion', 'help', 'version', '--help', '--version'].sort(),
  );
  t.deepEqual(complete(script, ['etcd-kvm', 'help', 'de']), ['deploy']);
  t.deepEqual(complete(script, ['etcd-kvm', 'st']), ['state', 'status']);
  t.deepEqual(complete(script, ['etcd-kvm', 'deploy', '--re']), ['--render-only', '--renew-certs', '--replace']);
  t.deepEqual(complete(script, ['etcd-kvm', 'deploy', '-i', 'inv.yaml', '--dr']), ['--dry-run']);
  t.deepEqual(complete(script, ['etcd-kvm', 'backup', '--']), ['--help', '--inventory', '--keep', '--member', '--verify']);
  t.deepEqual(complete(script, ['etcd-kvm', 'deploy', '-i', '']), [], 'a value is left to filename completion');
  t.deepEqual(complete(script, ['etcd-kvm', 'completion', '']), ['bash']);
  // Step names after --tags and --skip-tags, the part after a list's last comma.
  t.deepEqual(complete(script, ['etcd-kvm', 'deploy', '--tags', 'gu']), ['guest']);
  t.deepEqual(complete(script, ['etcd-kvm', 'deploy', '-t', 'guest,he']), ['guest,health']);
  t.deepEqual(complete(script, ['etcd-kvm', 'deploy', '--skip-tags', 'c']), ['cloud-init']);
  // Members of the inventory named by -i, after --limit and as logs' and ssh's first word; nothing without one.
  const lab = ['etcd-1', 'etcd-2', 'etcd-3'];
  t.deepEqual(complete(script, ['etcd-kvm', 'deploy', '-i', 'inventories/lab.yaml', '--limit', 'etcd-']), lab);
  t.deepEqual(complete(script, ['etcd-kvm', 'logs', '-i', 'inventories/lab.yaml', '']), lab);
  t.deepEqual(complete(script, ['etcd-kvm', 'ssh', '--inventory=inventories/lab.yaml', 'etcd-2']), ['etcd-2']);
  t.deepEqual(complete(script, ['etcd-kvm', 'logs', '-i', 'inventories/lab.yaml', 'etcd-1', 'etcd-']), [], "a unit's place");
  t.deepEqual(complete(script, ['etcd-kvm', 'deploy', '--limit', '']), [], 'no inventory given yet');
});

test('completion without a shell: exit 2, the shell to name', (t) => {
  const result = etcdKvm(['completion']);
  t.is(result.status, 2);
  t.regex(result.stderr, /etcd-kvm completion bash/);
});
