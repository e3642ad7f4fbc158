import test from 'ava';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { AGENT_LAUNCHER, AGENT_PATHS } from '../../tasks/render/guest/member-agent.ts';
import { scratchDir } from '../helpers/scratch.ts';

/**
 * The agent's program imports the agent as a module, so Python keeps its bytecode (in the work directory, the only
 * place the units may write) and a tick does not compile 1 250 lines again. Run here with python3, its two
 * directories moved into a scratch directory.
 */

function launcherIn(root: string, workDirOwned: boolean): { launcher: string; workDir: string } {
  const moduleDir = join(root, 'module');
  const workDir = join(root, 'work');
  mkdirSync(moduleDir);
  if (workDirOwned) mkdirSync(workDir);
  writeFileSync(join(moduleDir, 'etcd_kvm_agent.py'), 'import sys\n\ndef main(argv):\n    print("ran", argv[1:])\n    return 3\n');
  const launcher = join(root, 'etcd-kvm-agent');
  writeFileSync(
    launcher,
    AGENT_LAUNCHER.replace('"/var/lib/etcd-kvm-agent"', JSON.stringify(workDir)).replace(
      '"/usr/local/lib/etcd-kvm-agent"',
      JSON.stringify(moduleDir),
    ),
  );
  return { launcher, workDir };
}

/** As the units run it: this machine's environment asks Python to write no bytecode at all. */
const python = (args: string[]) => {
  const { PYTHONDONTWRITEBYTECODE: _unset, ...env } = process.env;
  return spawnSync('python3', args, { encoding: 'utf8', env });
};

const pycFiles = (dir: string): string[] =>
  existsSync(dir) ? readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter((name) => name.endsWith('.pyc')) : [];

test('the launcher runs the module the agent is written to, with its arguments, and exits with its code', (t) => {
  t.is(AGENT_PATHS.module, '/usr/local/lib/etcd-kvm-agent/etcd_kvm_agent.py');
  t.true(AGENT_LAUNCHER.includes('"/usr/local/lib/etcd-kvm-agent"') && AGENT_LAUNCHER.includes('"/var/lib/etcd-kvm-agent"'));
  const { launcher } = launcherIn(scratchDir('launcher'), true);
  const ran = python([launcher, 'defrag']);
  t.is(ran.status, 3, ran.stderr);
  t.is(ran.stdout, "ran ['defrag']\n");
});

test("the agent's bytecode is kept in its work directory for its owner, and nowhere when no such directory is its", (t) => {
  const owned = launcherIn(scratchDir('launcher'), true);
  t.is(python([owned.launcher, 'metrics']).status, 3);
  t.deepEqual(
    pycFiles(join(owned.workDir, 'bytecode')).map((name) => name.split('/').at(-1)),
    [`etcd_kvm_agent.cpython-${pythonTag()}.pyc`],
  );

  // No work directory of its own (the tool's state not yet written, or someone else running it): nothing written.
  const root = scratchDir('launcher');
  const unowned = launcherIn(root, false);
  t.is(python([unowned.launcher, 'metrics']).status, 3);
  t.deepEqual(pycFiles(root), []);
});

function pythonTag(): string {
  return python(['-c', 'import sys; print(sys.implementation.cache_tag.split("-")[1])']).stdout.trim();
}
