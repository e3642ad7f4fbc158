import test from 'ava';
import { mkdirSync, mkdtempSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { freshBuild } from '../../bin/fresh-build.mjs';

/** A package folder with one source under tasks/ and, if asked, a build stamp; times in seconds since the epoch. */
function packageWith(times: { source: number; built?: number; lock?: number }): URL {
  const root = mkdtempSync(join(tmpdir(), 'etcd-kvm-build-'));
  mkdirSync(join(root, 'tasks', 'core'), { recursive: true });
  const source = join(root, 'tasks', 'core', 'step.ts');
  writeFileSync(source, '');
  // Folders count as sources too: a file added or removed changes its folder's time.
  for (const path of [source, join(root, 'tasks', 'core')]) utimesSync(path, times.source, times.source);
  if (times.lock !== undefined) {
    writeFileSync(join(root, 'package-lock.json'), '{}');
    utimesSync(join(root, 'package-lock.json'), times.lock, times.lock);
  }
  if (times.built !== undefined) {
    mkdirSync(join(root, 'dist'));
    writeFileSync(join(root, 'dist', '.built'), '');
    utimesSync(join(root, 'dist', '.built'), times.built, times.built);
  }
  return pathToFileURL(`${root}/`);
}

test('the installed command runs dist/ only when its build is not older than every source under tasks/', (t) => {
  t.true(freshBuild(packageWith({ source: 1_000, built: 2_000 })));
  t.true(freshBuild(packageWith({ source: 2_000, built: 2_000 })));
  t.false(freshBuild(packageWith({ source: 3_000, built: 2_000 })), 'a source edited after the build');
  t.false(freshBuild(packageWith({ source: 1_000 })), 'never built (no dist/.built)');
  const added = packageWith({ source: 1_000, built: 2_000 });
  writeFileSync(new URL('tasks/core/new.ts', added), '');
  t.false(freshBuild(added), 'a source added after the build');
});

test('nor when package-lock.json changed after the build: the bundle holds packages (etcd3, gRPC) that an install may have replaced', (t) => {
  t.true(freshBuild(packageWith({ source: 1_000, lock: 1_500, built: 2_000 })));
  t.false(freshBuild(packageWith({ source: 1_000, lock: 3_000, built: 2_000 })));
});
