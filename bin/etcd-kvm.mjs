#!/usr/bin/env node
// The installed `etcd-kvm` command. Plain JS, because node runs a bin as it is. It runs the code
// compiled at install time (dist/, `npm run build`, which `npm ci` runs as `prepare`): no TypeScript is
// transpiled per run. When dist/ is missing or older than a source under tasks/ (a checkout being
// edited), it runs the sources through tsx's loader instead, as `npx tsx tasks/deploy.ts` does.
import { fileURLToPath } from 'node:url';
import { freshBuild } from './fresh-build.mjs';

const root = new URL('../', import.meta.url);
let main;
if (freshBuild(root)) {
  ({ main } = await import(new URL('dist/tasks/cli/main.js', root).href));
} else {
  const { register } = await import('tsx/esm/api');
  // The package's own tsconfig, not whichever one the operator's working directory holds.
  register({ tsconfig: fileURLToPath(new URL('tsconfig.json', root)) });
  ({ main } = await import('../tasks/cli/main.ts'));
}
await main(process.argv.slice(2));
