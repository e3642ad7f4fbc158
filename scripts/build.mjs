// `npm run build` (and `prepare`, which `npm ci` runs): bundles tasks/ into dist/ for the installed
// `etcd-kvm` command, which then starts without transpiling (bin/etcd-kvm.mjs). Plain JS, so it runs
// before anything else is set up. An install without the dev packages (no esbuild) builds nothing:
// the command runs the sources through tsx then. Type checking is `npm run typecheck`'s (tsc).
//
// Bundled, not compiled file by file: node resolves, reads and compiles each module of a run on every
// start, and a no-op loads ~600 of them (ours and the packages'); a bundle of a few chunks starts in
// a fraction of the time (npm run bench's start-up column: 0.34 s against 1.15 s through node --import tsx,
// which also transpiles). Each command script is an entry (tasks/cli/main.ts imports
// dist/tasks/commands/<command>.js by path), code they share goes into chunks, and a dynamic import stays a
// chunk loaded only when the run needs it.
import { readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
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
 * Left to node_modules, loaded as they are: ssh2 has optional native bindings, and the S3 client
 * (backups and restores only) is large and loaded lazily anyway.
 */
const EXTERNAL = ['ssh2', '@aws-sdk/*', '@smithy/*'];

/**
 * etcd3, bundled with etcd's protocol parsed here, once. etcd3 parses its rpc.proto (and the files it
 * imports) from beside its own code when it is loaded: ~50 ms of a run's main thread, and a bundle has
 * no "beside". Its connection pool's one call to proto-loader's loadSync is replaced by fromJSON of the
 * same definitions, read now with the same protobufjs and options; the build stops if that call is not
 * found as written (another etcd3 release), or if the two ways do not give the same services and types.
 */
function etcdProtocolAtBuild() {
  const fromEtcd3 = createRequire(createRequire(`${root}package.json`).resolve('etcd3'));
  const protoLoader = fromEtcd3('@grpc/proto-loader');
  const protobuf = createRequire(fromEtcd3.resolve('@grpc/proto-loader'))('protobufjs');
  const rpcProto = fromEtcd3.resolve('../proto/rpc.proto');
  const call = /\(0, proto_loader_1\.loadSync\)\(`\$\{__dirname\}\/\.\.\/proto\/rpc\.proto`, (\{[^}]*\})\)/;
  return {
    name: 'etcd-protocol-at-build',
    setup(build) {
      build.onLoad({ filter: /[\\/]etcd3[\\/]lib[\\/]connection-pool\.js$/ }, ({ path }) => {
        const source = readFileSync(path, 'utf8');
        const found = call.exec(source);
        if (!found) throw new Error(`${path}: etcd3 no longer loads rpc.proto with loadSync as this build expects`);
        const options = Function(`return ${found[1]}`)();
        const parsed = new protobuf.Root();
        parsed.loadSync(rpcProto, { keepCase: options.keepCase });
        const json = parsed.toJSON();
        const names = (definition) => JSON.stringify(Object.keys(definition).sort());
        if (names(protoLoader.loadSync(rpcProto, options)) !== names(protoLoader.fromJSON(json, options)))
          throw new Error(`${path}: etcd's protocol read from JSON differs from rpc.proto`);
        // A function, not a string: `$` in the JSON must not be read as a replacement pattern.
        const contents = source.replace(call, (_whole, options) => `(0, proto_loader_1.fromJSON)(${JSON.stringify(json)}, ${options})`);
        return { contents, loader: 'js' };
      });
    },
  };
}

// The commands (tasks/commands/*.ts: each runs itself when imported) and the dispatcher.
const entryPoints = [
  'tasks/cli/main.ts',
  ...readdirSync(`${root}tasks/commands`)
    .filter((name) => name.endsWith('.ts'))
    .map((name) => `tasks/commands/${name}`),
];

// Built beside dist/ and swapped in whole at the end: a command running while it builds (an e2e run beside
// `npm pack`'s prepare, an operator's deploy beside `npm run build`) loads its lazy chunks from a complete
// dist/, never from one half written or removed; the build is deterministic, so a chunk's name is the same in
// both. A fresh folder also means a source removed since the last build does not linger as a module that loads.
const next = `dist.next-${process.pid}`;
rmSync(`${root}${next}`, { recursive: true, force: true });
const { metafile } = await esbuild.build({
  absWorkingDir: root,
  metafile: true,
  entryPoints,
  outbase: '.',
  outdir: next,
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  external: EXTERNAL,
  plugins: [etcdProtocolAtBuild()],
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
  rmSync(`${root}${next}`, { recursive: true, force: true });
  process.exit(1);
}
// Written last: the command trusts dist/ only when this is newer than every source (bin/etcd-kvm.mjs).
writeFileSync(`${root}${next}/.built`, `${new Date().toISOString()}\n`);
swapIn(next);

/** `next` becomes dist/; dist/ is gone only between two renames. Another build that swapped in first wins. */
function swapIn(built) {
  const old = `${root}dist.old-${process.pid}`;
  try {
    renameSync(`${root}dist`, old);
  } catch (error) {
    if (error.code !== 'ENOENT') throw error;
  }
  try {
    renameSync(`${root}${built}`, `${root}dist`);
  } catch (error) {
    if (error.code !== 'ENOTEMPTY' && error.code !== 'EEXIST') throw error;
    rmSync(`${root}${built}`, { recursive: true, force: true });
  }
  rmSync(old, { recursive: true, force: true });
}
