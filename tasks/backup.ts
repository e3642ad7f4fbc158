#!/usr/bin/env -S npx tsx
import { runTool } from './cli/tool.ts';
import { EXIT, InputError } from './core/errors.ts';
import { Readable } from 'node:stream';
import { backupTimestamp, dumpObjectName, keyObjectName, masterKeyFromHex, newDataKey, sealedSize, sealStream } from './backup/format.ts';
import { pruneSnapshots } from './backup/prune.ts';
import { SnapshotBucket } from './backup/s3.ts';
import { SnapshotFile } from './backup/snapshot-file.ts';
import { snapshotCap } from './backup/source.ts';
import { capStream } from './core/limits.ts';
import type { ISnapshotResponse } from 'etcd3';
import type { EtcdClients } from './etcd/client.ts';
import { withClusterSession } from './etcd/session.ts';
import { loadInventory } from './inventory/load.ts';
import type { Inventory, Member } from './inventory/model.ts';

/**
 * npx tsx tasks/backup.ts -i INVENTORY: a snapshot of the running cluster, uploaded where
 * restore.s3 points, in etcd-backup's format (encrypted when restore.encryption_key is set), so
 * the deploy's restore (and etcd-backup's own tooling) can read it back.
 */

const HELP = `Usage: npx tsx tasks/backup.ts -i INVENTORY [--member NAME] [--keep N]

Takes an etcd snapshot from the first member that answers (or --member) as root, and uploads it
as <restore.s3.object_prefix>-<RFC 3339 UTC>.dump to restore.s3, sealed with XChaCha20-Poly1305
and a .key object when restore.encryption_key is set (the etcd-backup format).

  -i, --inventory FILE   the inventory (required)
      --member NAME      snapshot this member
      --keep N           after the upload, keep the N newest snapshots under the prefix (N >= 1)
                         and delete the older ones with their .key objects; nothing is deleted
                         when the upload or the listing fails
  -h, --help             this text

Exit: 0 uploaded (and pruned), 1 failed, 2 bad input.`;

/** A member's snapshot, streamed from etcd into the file (never whole in memory); its size. */
async function snapshotInto(file: SnapshotFile, clients: EtcdClients, member: Member, quotaBytes: number): Promise<number> {
  const client = await clients.for(member);
  // etcd3 types the answer as an event emitter; it is grpc-js's ClientReadableStream, a Readable, whose
  // async iteration keeps the backpressure (etcd sends no faster than the file takes it).
  const stream = (await client.maintenance.snapshot()) as unknown as AsyncIterable<ISnapshotResponse>;
  const blobs = (async function* () {
    for await (const answer of stream) yield answer.blob;
  })();
  // A member cannot fill the control node's disk: no snapshot is larger than its database's quota allows.
  return file.write(capStream(blobs, `the snapshot from ${member.name}`, snapshotCap(quotaBytes)));
}

function parseKeep(value: unknown): number | undefined {
  if (value === undefined) return undefined;
  const keep = Number(value);
  if (!/^\d+$/.test(String(value)) || keep < 1)
    throw new InputError(`--keep ${String(value)}: give a whole number of at least 1 (the newest snapshot is never deleted)`);
  return keep;
}

async function backup(inventory: Inventory, only: string | undefined, keep: number | undefined): Promise<string[]> {
  const settings = inventory.restore;
  const { s3 } = settings;
  const missing = (['endpoint', 'bucket', 'object_prefix'] as const).filter((field) => !s3[field]);
  if (missing.length > 0 || s3.access_key.isEmpty || s3.secret_key.isEmpty) {
    throw new InputError(
      'backup writes where restore reads: set restore.s3 (endpoint, bucket, object_prefix, access_key, secret_key) under defaults',
      missing.map((field) => `restore.s3.${field} is empty`),
    );
  }
  const candidates = only ? inventory.members.filter((member) => member.name === only) : inventory.members;
  if (candidates.length === 0) throw new InputError(`--member ${only} is not in the inventory`);
  const bucket = new SnapshotBucket(s3);
  let file: SnapshotFile | undefined;
  try {
    return await withClusterSession(inventory, async ({ clients }) => {
      let size: number | undefined;
      let from = '';
      const failures: string[] = [];
      for (const member of candidates) {
        file?.remove();
        file = new SnapshotFile('backup');
        try {
          size = await snapshotInto(file, clients, member, inventory.etcd.space_quota);
          from = member.name;
          break;
        } catch (error) {
          failures.push(`${member.name}: ${(error as Error).message.split('\n')[0]}`);
        }
      }
      if (size === undefined || !file) throw new Error(`no member gave a snapshot: ${failures.join('; ')}`);
      await file.verify(`the snapshot from ${from}`);
      const name = dumpObjectName(s3.object_prefix, backupTimestamp(new Date()));
      if (settings.encryption_key.isEmpty) {
        await bucket.put(name, file.read(), size);
      } else {
        const { dataKey, sealedKey } = newDataKey(masterKeyFromHex(settings.encryption_key.reveal()));
        // The key first: whoever sees the .dump can already open it.
        await bucket.put(keyObjectName(name), sealedKey);
        await bucket.put(name, Readable.from(sealStream(file.read(), dataKey)), sealedSize(size));
      }
      const lines = [
        `backed up ${size} bytes from ${from} to ${bucket.where} as ${name}${settings.encryption_key.isEmpty ? ' (not encrypted: restore.encryption_key is empty)' : ' (encrypted)'}`,
      ];
      if (keep !== undefined) {
        const pruned = await pruneSnapshots(bucket, s3.object_prefix, keep);
        lines.push(
          `kept ${pruned.kept.length} snapshot(s) (newest ${pruned.kept.at(-1)}); deleted ${pruned.deleted.length} object(s)${pruned.deleted.length ? `: ${pruned.deleted.join(', ')}` : ''}`,
        );
      }
      return lines;
    });
  } finally {
    file?.remove();
    bucket.close();
  }
}

process.exitCode = await runTool({
  help: HELP,
  options: { member: { type: 'string' }, keep: { type: 'string' } },
  failure: 'backup failed',
  async run(values, path) {
    const keep = parseKeep(values.keep);
    console.log((await backup(loadInventory(path), values.member as string | undefined, keep)).join('\n'));
    return EXIT.ok;
  },
});
