import { parseArgs } from 'node:util';
import { describeError, EXIT, InputError, reportInputError } from './core/errors.ts';
import { silenceKnownWarnings } from './core/warnings.ts';
import { EtcdClients } from './etcd/client.ts';
import { backupTimestamp, dumpObjectName, encryptSnapshot, keyObjectName, masterKeyFromHex } from './backup/format.ts';
import { SnapshotBucket } from './backup/s3.ts';
import { verifySnapshotHash } from './backup/source.ts';
import { loadInventory } from './inventory/load.ts';
import type { Inventory, Member } from './inventory/model.ts';
import { clientIdentities } from './etcd/identities.ts';
import { PkiStore } from './pki/store.ts';
import { HypervisorConnections } from './remote/hypervisors.ts';

/**
 * npx tsx tasks/backup.ts -i INVENTORY: a snapshot of the running cluster, uploaded where
 * restore.s3 points, in etcd-backup's format (encrypted when restore.encryption_key is set), so
 * the deploy's restore (and etcd-backup's own tooling) can read it back.
 */

const HELP = `Usage: npx tsx tasks/backup.ts -i INVENTORY [--member NAME]

Takes an etcd snapshot from the first member that answers (or --member) as root, and uploads it
as <restore.s3.object_prefix>-<RFC 3339 UTC>.dump to restore.s3, sealed with XChaCha20-Poly1305
and a .key object when restore.encryption_key is set (the etcd-backup format).

  -i, --inventory FILE   the inventory (required)
      --member NAME      snapshot this member
  -h, --help             this text

Exit: 0 uploaded, 1 failed, 2 bad input.`;

async function snapshotOf(clients: EtcdClients, member: Member): Promise<Buffer> {
  const client = await clients.for(member);
  const stream = await client.maintenance.snapshot();
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    stream.on('data', (answer: { blob: Buffer }) => chunks.push(Buffer.from(answer.blob)));
    stream.on('end', () => resolve(Buffer.concat(chunks)));
    stream.on('error', reject);
  });
}

async function backup(inventory: Inventory, only?: string): Promise<string> {
  const settings = inventory.restore;
  const { s3 } = settings;
  const missing = (['endpoint', 'bucket', 'object_prefix'] as const).filter((field) => !s3[field]);
  if (missing.length > 0 || s3.access_key.isEmpty || s3.secret_key.isEmpty) {
    throw new InputError('backup writes where restore reads: set restore.s3 (endpoint, bucket, object_prefix, access_key, secret_key) under defaults', missing.map((field) => `restore.s3.${field} is empty`));
  }
  const candidates = only ? inventory.members.filter((member) => member.name === only) : inventory.members;
  if (candidates.length === 0) throw new InputError(`--member ${only} is not in the inventory`);
  const connections = new HypervisorConnections();
  const clients = new EtcdClients(connections, inventory.etcd.client_port, clientIdentities(inventory, new PkiStore(inventory.stateDir)).root);
  const bucket = new SnapshotBucket(s3);
  try {
    let snapshot: Buffer | undefined;
    let from = '';
    const failures: string[] = [];
    for (const member of candidates) {
      try {
        snapshot = await snapshotOf(clients, member);
        from = member.name;
        break;
      } catch (error) {
        failures.push(`${member.name}: ${(error as Error).message.split('\n')[0]}`);
      }
    }
    if (!snapshot) throw new Error(`no member gave a snapshot: ${failures.join('; ')}`);
    verifySnapshotHash(snapshot, `the snapshot from ${from}`);
    const name = dumpObjectName(s3.object_prefix, backupTimestamp(new Date()));
    if (settings.encryption_key.isEmpty) {
      await bucket.put(name, snapshot);
    } else {
      const sealed = encryptSnapshot(snapshot, masterKeyFromHex(settings.encryption_key.reveal()));
      // The key first: whoever sees the .dump can already open it.
      await bucket.put(keyObjectName(name), sealed.key);
      await bucket.put(name, sealed.dump);
    }
    return `backed up ${snapshot.length} bytes from ${from} to ${bucket.where} as ${name}${settings.encryption_key.isEmpty ? ' (not encrypted: restore.encryption_key is empty)' : ' (encrypted)'}`;
  } finally {
    bucket.close();
    clients.close();
    await connections.closeAll();
  }
}

async function main(): Promise<number> {
  let values: { inventory?: string; member?: string; help?: boolean };
  try {
    ({ values } = parseArgs({ options: { inventory: { type: 'string', short: 'i' }, member: { type: 'string' }, help: { type: 'boolean', short: 'h' } } }));
  } catch (error) {
    return reportInputError(new InputError(`${(error as Error).message}\n\n${HELP}`));
  }
  if (values.help) {
    console.log(HELP);
    return EXIT.ok;
  }
  if (!values.inventory) return reportInputError(new InputError(`-i INVENTORY is required\n\n${HELP}`));
  try {
    console.log(await backup(loadInventory(values.inventory), values.member));
    return EXIT.ok;
  } catch (error) {
    if (error instanceof InputError) return reportInputError(error);
    // S3 and etcd failures are expected here (unlike in deploy, where steps report them): no stack.
    console.error(`error: backup failed: ${describeError(error)}`);
    return EXIT.failed;
  }
}

silenceKnownWarnings();
process.exitCode = await main();
