import test from 'ava';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
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
    t.true(result.stderr.startsWith(`error: unknown command ${name}; commands are deploy, doctor, status, `), result.stderr);
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
function bashComplete(script: string, words: string[]): string[] {
  const asked = `COMP_WORDS=(${words.map((word) => `'${word}'`).join(' ')}); COMP_CWORD=${words.length - 1}`;
  const body = `${script}\n${asked}; _etcd_kvm; printf '%s\\n' "\${COMPREPLY[@]}"`;
  return lines(run('bash', ['-c', body]));
}

/**
 * zsh's side of the script, with zsh's matching stood in for: compadd prints the candidates that start with the
 * word (after what compset -P moved aside, printed before each), _files says "<files>". The script's own logic
 * (which candidates, after which word) runs in a real zsh; zsh's menu is not driven.
 */
const ZSH_STANDINS = `compdef() { :; }
_files() { print -r -- '<files>'; }
compset() { if [[ $1 == -P && $PREFIX == *,* ]]; then IPREFIX=\${PREFIX%,*},; PREFIX=\${PREFIX##*,}; fi; }
compadd() { local c; [[ $1 == -- ]] && shift; for c in "$@"; do [[ $c == \${PREFIX}* ]] && print -r -- "$IPREFIX$c"; done; }`;
function zshComplete(script: string, words: string[]): string[] {
  const quoted = words.map((word) => `'${word}'`);
  const asked = `words=(${quoted.join(' ')}); CURRENT=${words.length}; PREFIX=${quoted.at(-1)}; IPREFIX=''`;
  // `; true`: the function's own status is its last test's, false where it offers nothing.
  return lines(run('zsh', ['-f', '-c', `${ZSH_STANDINS}\n${script}\n${asked}; _etcd_kvm; true`]));
}

/** Completes the words as fish does on TAB: `complete -C`, the script sourced; the candidates without their descriptions. */
function fishComplete(script: string, words: string[]): string[] {
  const line = words.map((word) => word.replace(/'/g, "\\'")).join(' ');
  return lines(run('fish', ['--no-config', '-c', `${script}\ncomplete -C '${line}'`])).map((entry) => entry.split('\t')[0]!);
}

function lines(result: { status: number; stdout: string; stderr: string }): string[] {
  if (result.status !== 0) throw new Error(result.stderr);
  return result.stdout.split('\n').filter(Boolean).sort();
}

const LAB_MEMBERS = ['etcd-1', 'etcd-2', 'etcd-3'];
/** What every shell completes, the same: the words typed, the candidates. */
const COMPLETIONS: [words: string[], candidates: string[]][] = [
  [['etcd-kvm', 'help', 'de'], ['deploy']],
  [
    ['etcd-kvm', 'st'],
    ['state', 'status'],
  ],
  [
    ['etcd-kvm', 'deploy', '--re'],
    ['--render-only', '--renew-certs', '--replace'],
  ],
  [['etcd-kvm', 'deploy', '-i', 'inv.yaml', '--dr'], ['--dry-run']],
  [
    ['etcd-kvm', 'backup', '--'],
    ['--help', '--inventory', '--keep', '--member', '--verify'],
  ],
  [
    ['etcd-kvm', 'completion', ''],
    ['bash', 'fish', 'zsh'],
  ],
  // Step names after --tags and --skip-tags, the part after a list's last comma.
  [['etcd-kvm', 'deploy', '--tags', 'gu'], ['guest']],
  [['etcd-kvm', 'deploy', '-t', 'guest,he'], ['guest,health']],
  [['etcd-kvm', 'deploy', '--skip-tags', 'c'], ['cloud-init']],
  // Members of the inventory named by -i, after --limit and as logs' and ssh's first word.
  [['etcd-kvm', 'deploy', '-i', 'inventories/lab.yaml', '--limit', 'etcd-'], LAB_MEMBERS],
  [['etcd-kvm', 'logs', '-i', 'inventories/lab.yaml', ''], LAB_MEMBERS],
  [['etcd-kvm', 'ssh', '--inventory=inventories/lab.yaml', 'etcd-2'], ['etcd-2']],
];
/** Where each shell falls back to its own filename completion, as that shell shows it. */
const FILES = {
  bash: [], // complete -o default: readline's, not in COMPREPLY
  zsh: ['<files>'],
  fish: ['inventories/lab-hypervisors.yaml'],
} as const;
const COMPLETERS = { bash: bashComplete, zsh: zshComplete, fish: fishComplete } as const;

for (const shell of ['bash', 'zsh', 'fish'] as const)
  test(`completion ${shell}: valid ${shell} that completes the commands, their flags, step names and the inventory's members`, (t) => {
    const result = etcdKvm(['completion', shell]);
    t.is(result.status, 0, result.stderr);
    const script = result.stdout;
    // fish -n -c says a syntax error and exits 0; with a file it exits 127.
    const file = join(mkdtempSync(join(tmpdir(), 'etcd-kvm-completion-')), `etcd-kvm.${shell}`);
    writeFileSync(file, script);
    const syntax = run(shell, [shell === 'fish' ? '--no-execute' : '-n', file]);
    t.is(syntax.status, 0, syntax.stderr);
    const complete = (words: string[]) => COMPLETERS[shell](script, words);
    const first = [...COMMANDS.map((command) => command.name), 'completion', 'help', 'version'];
    t.deepEqual(complete(['etcd-kvm', '']), [...first, ...(shell === 'bash' ? ['--help', '--version'] : [])].sort());
    for (const [words, candidates] of COMPLETIONS) t.deepEqual(complete(words), candidates, words.join(' '));
    t.deepEqual(complete(['etcd-kvm', 'deploy', '-i', 'inventories/lab-h']), [...FILES[shell]], 'a value is left to filename completion');
    // A unit's place after logs' member, and members without an inventory: nothing of ours.
    t.deepEqual(complete(['etcd-kvm', 'logs', '-i', 'inventories/lab.yaml', 'etcd-1', 'etcd-']), shell === 'zsh' ? ['<files>'] : []);
    t.deepEqual(complete(['etcd-kvm', 'deploy', '--limit', '']), [], 'no inventory given yet');
  });

test('completion without a shell: exit 2, the shell to name', (t) => {
  const result = etcdKvm(['completion']);
  t.is(result.status, 2);
  t.regex(result.stderr, /etcd-kvm completion bash\|zsh\|fish/);
});
