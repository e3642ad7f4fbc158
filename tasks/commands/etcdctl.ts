#!/usr/bin/env -S npx tsx
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runTool } from '../cli/tool.ts';
import { EXIT, InputError } from '../core/errors.ts';
import { revealSecret } from '../core/secret.ts';
import { PRIVATE_FILE_MODE } from '../core/files.ts';
import { withClusterSession } from '../etcd/session.ts';
import { loadInventory } from '../inventory/load.ts';
import { memberNamed } from '../inventory/member-named.ts';

const HELP = `Usage: etcd-kvm etcdctl -i INVENTORY [--member NAME] -- ARGUMENTS…

This machine's etcdctl (on PATH) against the cluster as root, through each member's hypervisor as the tool
reaches it: the endpoints are the tool's own tunnels; root's key is a file in a private directory under
/dev/shm (memory) for etcdctl's run only, removed after it, and root's password (password mode) is in
etcdctl's environment, never on a command line: an encrypted state directory stays encrypted on disk. Every
member's endpoint by default; --member NAME for one.

  -- ARGUMENTS…          etcdctl's own: get app/greeting, endpoint status -w table, member list…
      --member NAME      that member's endpoint only
  -i, --inventory FILE   the inventory (required)
  -h, --help             this text

Exit: etcdctl's own; 1 when the cluster could not be reached or etcdctl is not installed (Debian: etcd-client),
2 bad input.`;

/**
 * Where etcdctl's run keeps root's key: etcdctl reads it again at every TLS handshake, so a pipe will not do.
 * /dev/shm is memory (tmpfs): a key read decrypted from an encrypted state directory never reaches a disk.
 */
const KEY_ROOM = existsSync('/dev/shm') ? '/dev/shm' : tmpdir();

process.exitCode = await runTool({
  help: HELP,
  options: { member: { type: 'string' } },
  positionals: true,
  failure: 'etcdctl failed',
  async run(values, path, words) {
    if (words.length === 0) throw new InputError(`give etcdctl's arguments after --, e.g. -- get --prefix app/\n\n${HELP}`);
    const inventory = loadInventory(path);
    const named = values.member as string | undefined;
    const members = named === undefined ? inventory.members : [memberNamed(inventory, named, `--member ${named}`)];
    return withClusterSession(inventory, async ({ clients, root }) => {
      const certMode = inventory.etcd.clientCertAuth;
      if (certMode ? !root.cert || !root.key || root.key.isEmpty : !root.user || root.user.password.isEmpty)
        throw new Error(
          `no root ${certMode ? 'client certificate' : 'password'} in ${inventory.stateDir} or the inventory: run the deploy first`,
        );
      const endpoints = await Promise.all(members.map((member) => clients.endpoint(member)));
      // A private directory for etcdctl's run, removed after it: the CA and root's certificate, and root's key.
      const work = mkdtempSync(join(KEY_ROOM, 'etcd-kvm-etcdctl-'));
      try {
        const file = (name: string, content: string) => {
          writeFileSync(join(work, name), content, { mode: PRIVATE_FILE_MODE });
          return join(work, name);
        };
        const args = [
          `--endpoints=${endpoints.map(({ host, port }) => `https://${host}:${port}`).join(',')}`,
          `--cacert=${file('ca.crt', root.caCert)}`,
          ...(certMode && root.cert && root.key
            ? [`--cert=${file('root.crt', root.cert)}`, `--key=${file('root.key', revealSecret(root.key))}`]
            : []),
          ...(root.user ? [`--user=${root.user.name}`] : []),
          ...words,
        ];
        // The password as etcdctl reads its flag from the environment: never on a command line others can list.
        const env = { ...process.env, ETCDCTL_API: '3', ...(root.user ? { ETCDCTL_PASSWORD: revealSecret(root.user.password) } : {}) };
        const child = spawn('etcdctl', args, { stdio: 'inherit', env });
        // Interrupted, etcdctl (in the same process group) stops too; its files go with this process.
        process.once('SIGINT', () => undefined);
        const exited = new Promise<number>((resolve, reject) => {
          child.once('error', reject);
          child.once('close', (code) => resolve(code ?? EXIT.failed));
        });
        const code = await exited.catch((error: NodeJS.ErrnoException) => {
          if (error.code === 'ENOENT') throw new Error("etcdctl is not on this machine's PATH (Debian: apt install etcd-client)");
          throw error;
        });
        return code;
      } finally {
        rmSync(work, { recursive: true, force: true });
      }
    });
  },
});
