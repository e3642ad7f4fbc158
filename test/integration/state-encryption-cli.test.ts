import test from 'ava';
import { chmodSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { run } from '../helpers/exec.ts';

/**
 * An encrypted state directory on the CLI, render-only (nothing remote): a plain key put there is
 * exit 2 naming it, `tasks/commands/state.ts --encrypt` seals it when the operator means it, and the
 * passphrase file must be private.
 */

function labCopy(): { dir: string; inventory: string; stateDir: string } {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-sealed-cli-'));
  const doc = parse(readFileSync('inventories/lab.yaml', 'utf8')) as { defaults: Record<string, unknown> };
  doc.defaults.admin_user_password = 'console-only-Pa55word';
  const inventory = join(dir, 'lab.yaml');
  writeFileSync(inventory, stringify(doc));
  return { dir, inventory, stateDir: join(dir, '.etcd-kvm', 'lab') };
}

function tool(script: string, inventory: string, args: string[], env: Record<string, string>) {
  const clean = { ...process.env };
  delete clean.ETCD_KVM_PASSPHRASE;
  delete clean.ETCD_KVM_PASSPHRASE_FILE;
  return run(process.execPath, ['--import', 'tsx', `tasks/commands/${script}.ts`, '-i', inventory, ...args], { env: { ...clean, ...env } });
}

const PLANTED = '-----BEGIN PRIVATE KEY-----\nPLANTED\n-----END PRIVATE KEY-----\n';

test('a plain key put into an encrypted state directory is exit 2 naming it and the command that seals it; sealed on purpose, the run goes on', (t) => {
  const { dir, inventory, stateDir } = labCopy();
  const passphrase = { ETCD_KVM_PASSPHRASE: 'cli-seal-pass' };
  t.is(tool('deploy', inventory, ['--render-only', join(dir, 'rendered')], {}).status, 0);
  const encrypted = tool('state', inventory, ['--encrypt'], passphrase);
  t.is(encrypted.status, 0, encrypted.stderr);

  const clients = join(stateDir, 'pki', 'clients');
  const planted = join(clients, 'intruder.key');
  writeFileSync(planted, PLANTED, { mode: 0o600 });
  const refused = tool('deploy', inventory, ['--render-only', join(dir, 'rendered-again')], passphrase);
  t.is(refused.status, 2, refused.stderr);
  t.true(refused.stderr.includes(`${planted}: not encrypted, in a state directory whose every private key is sealed`), refused.stderr);
  t.true(refused.stderr.includes('etcd-kvm state -i <inventory> --encrypt'), refused.stderr);
  t.false(readdirSync(dir).includes('rendered-again'), 'nothing rendered');
  t.is(readFileSync(planted, 'utf8'), PLANTED, 'left as it was');

  const sealed = tool('state', inventory, ['--encrypt'], passphrase);
  t.is(sealed.status, 0, sealed.stderr);
  t.regex(sealed.stdout, /encrypted 1 private key file\(s\)/);
  t.false(readFileSync(planted, 'utf8').includes('PRIVATE KEY'));
  const again = tool('deploy', inventory, ['--render-only', join(dir, 'rendered-again')], passphrase);
  t.is(again.status, 0, again.stderr);
});

test('a passphrase file others can read is exit 2 with the chmod that fixes it; made private, it opens the directory', (t) => {
  const { dir, inventory } = labCopy();
  const file = join(dir, 'passphrase');
  writeFileSync(file, 'cli-file-pass\n');
  chmodSync(file, 0o644);
  const refused = tool('state', inventory, ['--encrypt'], { ETCD_KVM_PASSPHRASE_FILE: file });
  t.is(refused.status, 2, refused.stderr);
  t.true(refused.stderr.includes(`${file} is open to group or others (mode 0644); make it private: chmod 600 ${file}`), refused.stderr);
  t.false(refused.stderr.includes('cli-file-pass'));
  chmodSync(file, 0o600);
  const encrypted = tool('state', inventory, ['--encrypt'], { ETCD_KVM_PASSPHRASE_FILE: file });
  t.is(encrypted.status, 0, encrypted.stderr);
});
