// `npm run build` (and `prepare`, which `npm ci` runs): bundles tasks/ into dist/ for the installed
// `etcd-kvm` command, which then starts without transpiling (bin/etcd-kvm.mjs). Plain JS, so it runs
// before anything else is set up. An install without the dev packages (no esbuild) builds nothing:
// the command runs the sources through tsx then. Type checking is `npm run typecheck`'s (tsc).
//
// Bundled, not compiled file by file: node resolves, reads and compiles each module of a run on every
// start, and a no-op loads ~600 of them (ours and the packages'); a bundle of a few chunks starts in
// about half the time (measured: `deploy --help` ~0.2 s against ~0.4 s, docs/benchmarks.md). Each
// command script is an entry (tasks/cli/main.ts imports dist/tasks/<command>.js by path), code they
// share goes into chunks, and a dynamic import stays a chunk loaded only when the run needs it.
import { readdirSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../', import.meta.url));
let esbuild;
try {
  esbuild = await import('esbuild');
} catch {
  console.log('build: esbuild is not installed (an install without dev packages): etcd-kvm runs its sources through tsx');
  process.exit(0);
}

/**
 * Left to node_modules, loaded as they are: etcd3 reads its .proto files from beside its own code (and
 * cockatiel is its policies' package: the tool hands etcd3 a policy, which must be of the instance etcd3
 * loads), ssh2 has optional native bindings, and the S3 client (backups and restores only) is large and
 * loaded lazily anyway.
 */
const EXTERNAL = ['etcd3', 'cockatiel', 'ssh2', '@aws-sdk/*', '@smithy/*'];

// The commands (tasks/*.ts: each runs itself when imported) and the dispatcher.
const entryPoints = [
  'tasks/cli/main.ts',
  ...readdirSync(`${root}tasks`)
    .filter((name) => name.endsWith('.ts'))
    .map((name) => `tasks/${name}`),
];

// A source removed since the last build must not linger as a module that still loads.
rmSync(`${root}dist`, { recursive: true, force: true });
const { metafile } = await esbuild.build({
  absWorkingDir: root,
  metafile: true,
  entryPoints,
  outbase: '.',
  outdir: 'dist',
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  external: EXTERNAL,
  // Packages written as CommonJS call require(); in an ES module it is made from the chunk's own URL.
  banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" },
  logLevel: 'warning',
});
// A dynamic import() of a CommonJS module gets only a default export from esbuild, where node gives it
// named ones too: `const { x } = await import('pkg')` would be undefined in the bundle alone. Refused.
const cjsImportedLazily = Object.entries(metafile.inputs).flatMap(([from, input]) =>
  input.imports
    .filter((imported) => imported.kind === 'dynamic-import' && metafile.inputs[imported.path]?.format === 'cjs')
    .map((imported) => `${imported.original ?? imported.path} (from ${from})`),
);
if (cjsImportedLazily.length > 0) {
  console.error(
    `build: dynamic import() of CommonJS modules, which the bundle would give no named exports:\n  ${cjsImportedLazily.join('\n  ')}\nimport them statically, or add them to EXTERNAL in scripts/build.mjs`,
  );
  process.exit(1);
}
// Written last: the command trusts dist/ only when this is newer than every source (bin/etcd-kvm.mjs).
writeFileSync(`${root}dist/.built`, `${new Date().toISOString()}\n`);
