import test from 'ava';
import { copyFileSync, existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { run } from '../helpers/exec.ts';

/**
 * The package as an operator installs it: `npm pack`, then `npm install -g` of the tarball into a prefix of its
 * own (npm's cache first, which `npm ci` filled; the registry for what it lacks), and `etcd-kvm` from that prefix's bin/, outside the
 * checkout. The build (dist/, made by `prepare` as the tarball is packed) is in it, so no TypeScript runs.
 */
test('npm pack, then npm install -g of the tarball: etcd-kvm on PATH runs the compiled build, renders an inventory', async (t) => {
  const work = mkdtempSync(join(tmpdir(), 'etcd-kvm-package-'));
  const packed = run('npm', ['pack', '--json', '--pack-destination', work], { timeoutMs: 180_000 });
  t.is(packed.status, 0, packed.stderr);
  const [{ filename, files }] = JSON.parse(packed.stdout) as [{ filename: string; files: { path: string }[] }];
  const paths = files.map((file) => file.path);
  t.true(paths.includes('dist/tasks/cli/main.js') && paths.includes('dist/.built'), 'the compiled build is packed');
  t.true(paths.includes('agent/etcd-kvm-agent.py'));
  t.false(
    paths.some((path) => path.startsWith('test/') || path.startsWith('.etcd-kvm') || path.startsWith('scripts/')),
    'no tests, state or lab scripts',
  );

  const prefix = join(work, 'prefix');
  const installed = run('npm', ['install', '-g', '--prefix', prefix, '--prefer-offline', '--no-audit', '--no-fund', join(work, filename)], {
    timeoutMs: 300_000,
  });
  t.is(installed.status, 0, installed.stderr);
  const etcdKvm = join(prefix, 'bin', 'etcd-kvm');
  // What the command decides at every start (bin/fresh-build.mjs): the installed build is fresh, so tsx is never loaded.
  const home = join(prefix, 'lib', 'node_modules', 'etcd-kvm');
  const { freshBuild } = (await import(pathToFileURL(join(home, 'bin', 'fresh-build.mjs')).href)) as { freshBuild: (root: URL) => boolean };
  t.true(freshBuild(pathToFileURL(`${home}/`)), 'the installed command runs dist/');
  const version = run(etcdKvm, ['--version'], { cwd: work });
  t.is(version.status, 0, version.stderr);
  t.is(version.stdout.trim(), (JSON.parse(readFileSync('package.json', 'utf8')) as { version: string }).version);
  t.regex(run(etcdKvm, ['--help'], { cwd: work }).stdout, /^ {2}deploy /m);

  // The shipped example inventory, rendered by the installed command (its templates and schema come with it).
  const example = join(home, 'inventories', 'examples', 'libvirt-network.yaml');
  t.true(existsSync(example), example);
  // Copied out first: the render's state directory is made beside the inventory, never inside the package.
  const inventory = join(work, 'cluster.yaml');
  copyFileSync(example, inventory);
  const rendered = run(etcdKvm, ['deploy', '-i', inventory, '--render-only', join(work, 'rendered')], { cwd: work, timeoutMs: 120_000 });
  t.is(rendered.status, 0, rendered.stderr + rendered.stdout);
  t.true(existsSync(join(work, 'rendered')));
});
