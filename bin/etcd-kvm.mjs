#!/usr/bin/env node
// The installed `etcd-kvm` command. Plain JS, because node runs a bin as it is: it registers tsx's
// loader, then hands the arguments to the TypeScript dispatcher (tasks/cli/main.ts).
import { fileURLToPath } from 'node:url';
import { register } from 'tsx/esm/api';

// The package's own tsconfig, not whichever one the operator's working directory holds.
register({ tsconfig: fileURLToPath(new URL('../tsconfig.json', import.meta.url)) });
const { main } = await import('../tasks/cli/main.ts');
await main(process.argv.slice(2));
