#!/usr/bin/env -S npx tsx
import { runTool } from './cli/tool.ts';
import { EXIT, InputError } from './core/errors.ts';
import { Readable } from 'node:stream';
import {
  backupTimestamp,
  dumpObjectName,
  hashedAlong,
  keyObjectName,
  masterKeyFromHex,
  newDataKey,
  sealedSize,
  sealStream,
} from './backup/format.ts';
import { manifestObjectName, renderManifest } from './backup/manifest.ts';
import { pruneSnapshots } from './backup/prune.ts';
import { SnapshotBucket } from './backup/s3.ts';
import { SnapshotFile } from './backup/snapshot-file.ts';
import { snapshotCap } from './backup/source.ts';
import { capStream } from './core/limits.ts';
import type { ISnapshotResponse } from 'etcd3';
import type { EtcdClients } from './etcd/client.ts';
import { withClusterSession } from './etcd/session.ts';
import { loadInventory } from './inventory/load.ts';
import { readIdentity } from './pki/identity.ts';
import { createHash } from 'node:crypto';
import type { Inventory, Member } from './inventory/model.ts';

/**
 * npx tsx tasks/backup.ts -i INVENTORY: a snapshot of the running cluster, uploaded where
 * restore.s3 points, in etcd-backup's format (encrypted when restore.encryption_key is set), so
 * the deploy's restore (and etcd-backup's own tooling) can read it back.
 */

const HELP = `Usage: npx tsx tasks/backup.ts -i INVENTORY [--member NAME] [--keep N]

Takes an etcd snapshot from the first member that answers (or --member) as root, and uploads it
as <restore.s3.object_prefix>-<RFC 3339 UTC>.dump to restore.s3, sealed with XChaCha20-Poly1305
and restore.encryption_key, with its .key object (the etcd-backup format) and a .manifest that
binds it to this cluster (the state directory's cluster ID), its name and its content.

  -i, --inventory FILE   the inventory (required)
      --member NAME      snapshot this member
      --keep N           after the upload, keep the N newest of this cluster's snapshots under the
                         prefix (N >= 1; and none older than backup.max_age_hours but the newest)
                         and delete the older ones with their .key and .manifest; objects that are
                         not this cluster's are never deleted, and are named; nothing is deleted
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

/** The settings a backup needs, each missing one named; and the cluster's ID, which the manifest binds. */
function backupSettings(inventory: Inventory): { clusterId: string; masterKey: Uint8Array } {
  const { s3, encryption_key: key } = inventory.restore;
  const missing = [
    ...(['endpoint', 'bucket', 'object_prefix'] as const).filter((field) => !s3[field]).map((field) => `restore.s3.${field} is empty`),
    ...(s3.access_key.isEmpty ? ['restore.s3.access_key is empty'] : []),
    ...(s3.secret_key.isEmpty ? ['restore.s3.secret_key is empty'] : []),
    ...(key.isEmpty ? ['restore.encryption_key is empty: every backup is sealed and authenticated with it'] : []),
  ];
  if (missing.length > 0)
    throw new InputError(
      'backup writes where restore reads: set restore.s3 (endpoint, bucket, object_prefix, access_key, secret_key) and restore.encryption_key under defaults',
      missing,
    );
  const clusterId = readIdentity(inventory.stateDir, inventory.cluster.name)?.id;
  if (!clusterId)
    throw new InputError(
      `the state directory (${inventory.stateDir}) has no cluster ID yet: deploy the cluster first; a backup is bound to the cluster it was taken of`,
    );
  return { clusterId, masterKey: masterKeyFromHex(key.reveal()) };
}

async function backup(inventory: Inventory, only: string | undefined, keep: number | undefined): Promise<string[]> {
  const { s3 } = inventory.restore;
  const { clusterId, masterKey } = backupSettings(inventory);
  const candidates = only ? inventory.members.filter((member) => member.name === only) : inventory.members;
  if (candidates.length === 0) throw new InputError(`--member ${only} is not in the inventory`);
  const bucket = new SnapshotBucket(s3);
  let file: SnapshotFile | undefined;
  try {
    return await withClusterSession(inventory, async ({ clients }) => {
      let size: number | undefined;
      let from: Member | undefined;
      let revision = 0;
      const failures: string[] = [];
      for (const member of candidates) {
        file?.remove();
        file = new SnapshotFile('backup');
        try {
          // The revision as the snapshot begins: the snapshot holds at least it.
          revision = Number((await (await clients.for(member)).maintenance.status({})).header.revision);
          size = await snapshotInto(file, clients, member, inventory.etcd.space_quota);
          from = member;
          break;
        } catch (error) {
          failures.push(`${member.name}: ${(error as Error).message.split('\n')[0]}`);
        }
      }
      if (size === undefined || !file || !from) throw new Error(`no member gave a snapshot: ${failures.join('; ')}`);
      await file.verify(`the snapshot from ${from.name}`);
      const taken = backupTimestamp(new Date());
      const name = dumpObjectName(s3.object_prefix, taken);
      const { dataKey, sealedKey } = newDataKey(masterKey);
      // The key first: whoever sees the .dump can already open it. The manifest last: until it is there, the
      // backup is not this cluster's (a run that stops half-way leaves objects the restore passes over).
      await bucket.put(keyObjectName(name), sealedKey);
      const dumpHash = createHash('sha256');
      await bucket.put(name, Readable.from(hashedAlong(sealStream(file.read(), dataKey), dumpHash)), sealedSize(size));
      const manifest = {
        cluster: clusterId,
        object: name,
        revision,
        dumpSha256: dumpHash.digest('hex'),
        keySha256: createHash('sha256').update(sealedKey).digest('hex'),
        taken,
        by: 'the control node',
      };
      await bucket.put(manifestObjectName(name), Buffer.from(renderManifest(manifest, masterKey)));
      const lines = [`backed up ${size} bytes from ${from.name} to ${bucket.where} as ${name} (encrypted, with its manifest)`];
      if (keep !== undefined) {
        const context = { prefix: s3.object_prefix, clusterId, masterKey, now: new Date() };
        const pruned = await pruneSnapshots(bucket, context, { keep, maxAgeSeconds: inventory.backup.max_age_hours * 3600 }, name);
        lines.push(
          `kept ${pruned.kept.length} snapshot(s) (newest ${pruned.kept.at(-1)}); deleted ${pruned.deleted.length} object(s)${pruned.deleted.length ? `: ${pruned.deleted.join(', ')}` : ''}`,
          ...pruned.ignored.map((object) => `ignored ${object.name}: ${object.why}`),
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
