// `npm run build` (and `prepare`, which `npm ci` runs): compiles tasks/ into dist/ for the installed
// `etcd-kvm` command, which then starts without transpiling (bin/etcd-kvm.mjs). Plain JS, so it runs
// before anything else is set up. An install without the dev packages (no TypeScript) builds nothing:
// the command runs the sources through tsx then.
import { execFileSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../', import.meta.url));
let tsc;
try {
  tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
} catch {
  console.log('build: TypeScript is not installed (an install without dev packages): etcd-kvm runs its sources through tsx');
  process.exit(0);
}
// A source removed since the last build must not linger as a module that still loads.
rmSync(`${root}dist`, { recursive: true, force: true });
execFileSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { cwd: root, stdio: 'inherit' });
// Written last: the command trusts dist/ only when this is newer than every source (bin/etcd-kvm.mjs).
writeFileSync(`${root}dist/.built`, `${new Date().toISOString()}\n`);
