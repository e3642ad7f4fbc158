#!/usr/bin/env -S npx tsx
import { withOptionalValues } from '../cli/optional-value.ts';
import { runTool } from '../cli/tool.ts';
import { restoreDrill } from '../drill/run.ts';
import { BACKUP_RECORD_KEYS } from '../backup/runs.ts';
import { briefError, EXIT, InputError } from '../core/errors.ts';
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
} from '../backup/format.ts';
import { manifestObjectName, renderManifest } from '../backup/manifest.ts';
import { pruneSnapshots } from '../backup/prune.ts';
import { SnapshotBucket } from '../backup/s3.ts';
import { SnapshotFile } from '../backup/snapshot-file.ts';
import { SnapshotSource, snapshotCap } from '../backup/source.ts';
import { capStream } from '../core/limits.ts';
import type { ISnapshotResponse } from 'etcd3';
import type { EtcdClients } from '../etcd/client.ts';
import { hashKV } from '../etcd/hash-kv.ts';
import { withClusterSession } from '../etcd/session.ts';
import { camelCase } from '../inventory/camel.ts';
import { loadInventory } from '../inventory/load.ts';
import { readIdentity } from '../pki/identity.ts';
import { createHash } from 'node:crypto';
import type { Inventory, Member } from '../inventory/model.ts';

/**
 * npx tsx tasks/commands/backup.ts -i INVENTORY: a snapshot of the running cluster, uploaded where
 * restore.s3 points, in etcd-backup's format (encrypted when restore.encryption_key is set), so
 * the deploy's restore (and etcd-backup's own tooling) can read it back.
 */

const HELP = `Usage: etcd-kvm backup -i INVENTORY [--member NAME] [--keep N]
       etcd-kvm backup -i INVENTORY --verify [TIMESTAMP] [--member NAME]

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
      --verify [T]       a restore drill instead of a backup: the latest of this cluster's backups (or the
                         one taken at RFC 3339 time T) is downloaded and checked here (its manifest, seal
                         and SHA-256), restored by one member (--member, or the first follower; only while
                         the cluster is healthy, never on the leader) into a scratch directory on its data
                         disk with the etcd it runs, started there on loopback at a low CPU and I/O weight,
                         and read: its revision, its keys, and its HashKV at the manifest's revision, which
                         must equal the one recorded at backup time. The scratch copy is removed either way,
                         the members' own etcd is not touched, and the result is recorded in etcd, where
                         status shows the last verified backup.
  -h, --help             this text

Exit: 0 uploaded (and pruned), or verified; 1 failed, or the drill found the backup wanting or was
refused; 2 bad input.`;

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
  const { s3, encryptionKey: key } = inventory.restore;
  const missing = [
    ...(['endpoint', 'bucket', 'object_prefix'] as const)
      .filter((field) => !s3[camelCase(field)])
      .map((field) => `restore.s3.${field} is empty`),
    ...(s3.accessKey.isEmpty ? ['restore.s3.access_key is empty'] : []),
    ...(s3.secretKey.isEmpty ? ['restore.s3.secret_key is empty'] : []),
    ...(key.isEmpty ? ['restore.encryption_key is empty: every backup is sealed and authenticated with it'] : []),
  ];
  if (missing.length > 0)
    throw new InputError(
      'backup writes where restore reads: set restore.s3 (endpoint, bucket, ' +
        'object_prefix, access_key, secret_key) and restore.encryption_key under defaults',
      missing,
    );
  const clusterId = readIdentity(inventory.stateDir, inventory.cluster.name)?.id;
  if (!clusterId)
    throw new InputError(
      `the state directory (${inventory.stateDir}) has no cluster ID yet: ` +
        `deploy the cluster first; a backup is bound to the cluster it was taken of`,
    );
  return { clusterId, masterKey: masterKeyFromHex(key.reveal()) };
}

/** A backup's time as its object's name carries it. */
const RFC3339_UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;

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
          size = await snapshotInto(file, clients, member, inventory.etcd.spaceQuota);
          from = member;
          break;
        } catch (error) {
          failures.push(`${member.name}: ${(error as Error).message.split('\n')[0]}`);
        }
      }
      if (size === undefined || !file || !from) throw new Error(`no member gave a snapshot: ${failures.join('; ')}`);
      await file.verify(`the snapshot from ${from.name}`);
      // What a restore drill compares the restored data with: the same member's HashKV at the recorded revision.
      // Without it (the member stopped answering) the backup is still one, with a version 1 manifest, said.
      const snapshotted = from.name;
      const recordedHash = await hashKV(await clients.for(from), revision).catch((error: unknown) => {
        console.error(`warning: no HashKV at revision ${revision} from ${snapshotted} (${briefError(error)}): the manifest records none`);
        return undefined;
      });
      const taken = backupTimestamp(new Date());
      const name = dumpObjectName(s3.objectPrefix, taken);
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
        ...(recordedHash ? { hashKV: recordedHash } : {}),
      };
      await bucket.put(manifestObjectName(name), Buffer.from(renderManifest(manifest, masterKey)));
      const lines = [`backed up ${size} bytes from ${from.name} to ${bucket.where} as ${name} (encrypted, with its manifest)`];
      if (keep !== undefined) {
        const context = { prefix: s3.objectPrefix, clusterId, masterKey, now: new Date() };
        const pruned = await pruneSnapshots(bucket, context, { keep, maxAgeSeconds: inventory.backup.maxAgeHours * 3600 }, name);
        lines.push(
          `kept ${pruned.kept.length} snapshot(s) (newest ${pruned.kept.at(-1)}); ` +
            `deleted ${pruned.deleted.length} object(s)${pruned.deleted.length ? `: ${pruned.deleted.join(', ')}` : ''}`,
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

/** A drill of one backup (drill/run.ts): exit 0 only when it verified. */
async function verify(inventory: Inventory, timestamp: string, member: string | undefined): Promise<number> {
  if (timestamp !== '' && !RFC3339_UTC.test(timestamp))
    throw new InputError(
      `--verify ${timestamp}: give a backup's time as its name has it (RFC 3339 UTC, e.g. 2026-11-29T02:30:00Z), or none for the latest`,
    );
  const { clusterId } = backupSettings(inventory);
  const source = new SnapshotSource({ ...inventory.restore, backupTimestamp: timestamp }, inventory.etcd.spaceQuota, () => clusterId);
  try {
    const chosen = await source.choose();
    console.log(`drill: ${chosen.name} in ${source.bucket.where} (${chosen.provenance})`);
    const outcome = await withClusterSession(inventory, (session) => restoreDrill(inventory, session, source, member));
    if ('refused' in outcome) {
      console.log(`refused: ${outcome.refused}`);
      return EXIT.failed;
    }
    const { record, verdict } = outcome;
    for (const finding of verdict.findings) console.log(`  ${finding}`);
    console.log(
      verdict.outcome === 'ok'
        ? `verified: ${record.object} restores on ${record.member} and holds ` +
            `what the cluster held (recorded in ${BACKUP_RECORD_KEYS.lastVerified})`
        : `FAILED: ${record.object} does not prove restorable as this cluster's backup (recorded in ${BACKUP_RECORD_KEYS.lastDrill})`,
    );
    return verdict.outcome === 'ok' ? EXIT.ok : EXIT.failed;
  } finally {
    await source.close();
  }
}

process.exitCode = await runTool(
  {
    help: HELP,
    options: { member: { type: 'string' }, keep: { type: 'string' }, verify: { type: 'string' } },
    failure: 'backup failed',
    async run(values, path) {
      const member = values.member as string | undefined;
      if (values.verify !== undefined) {
        if (values.keep !== undefined) throw new InputError('--verify takes no --keep: a drill deletes no backup');
        return verify(loadInventory(path), String(values.verify), member);
      }
      const keep = parseKeep(values.keep);
      console.log((await backup(loadInventory(path), member, keep)).join('\n'));
      return EXIT.ok;
    },
  },
  withOptionalValues(process.argv.slice(2), ['--verify']),
);
