#!/usr/bin/env -S npx tsx
import { join } from 'node:path';
import { runTool } from '../cli/tool.ts';
import { EXIT, InputError } from '../core/errors.ts';
import { ensurePrivateDir, writeFileAtomic } from '../core/files.ts';
import { revealSecret } from '../core/secret.ts';
import { loadInventory } from '../inventory/load.ts';
import { clientBundle } from '../pki/bundle.ts';
import { PkiStore } from '../pki/store.ts';

const HELP = `Usage: etcd-kvm client -i INVENTORY --user NAME --out DIR

Writes what a client machine needs to use the cluster as one user, from the state directory:
  DIR/ca.crt           the cluster CA
  DIR/NAME.crt, .key   the user's client certificate and key (certificate mode; the key 0600)
  DIR/etcdctl.env      ETCDCTL_API, ETCDCTL_ENDPOINTS (every member's client URL), ETCDCTL_CACERT,
                       ETCDCTL_CERT and ETCDCTL_KEY, or ETCDCTL_USER in password mode (etcdctl then
                       asks for the password; it is never written)
Use it as: set -a; . DIR/etcdctl.env; set +a; etcdctl get foo

  -i, --inventory FILE   the inventory (required)
      --user NAME        a user of the inventory's users:, or root
      --out DIR          where to write (made 0700 if missing; the files in it are replaced)
  -h, --help             this text

Contacts nothing: run the deploy first, which issues the certificates and creates the users.
Exit: 0 written, 2 bad input (unknown user, no certificate yet).`;

process.exitCode = await runTool({
  help: HELP,
  options: { user: { type: 'string' }, out: { type: 'string' } },
  failure: 'client bundle failed',
  async run(values, path) {
    if (typeof values.user !== 'string' || typeof values.out !== 'string')
      throw new InputError(`--user NAME and --out DIR are required\n\n${HELP}`);
    const inventory = loadInventory(path);
    const files = clientBundle(inventory, await PkiStore.open(inventory.stateDir), values.user, values.out);
    ensurePrivateDir(values.out);
    for (const file of files)
      writeFileAtomic(join(values.out, file.name), typeof file.content === 'string' ? file.content : revealSecret(file.content), file.mode);
    console.log(`wrote ${files.map((file) => join(values.out as string, file.name)).join(', ')}`);
    return EXIT.ok;
  },
});
