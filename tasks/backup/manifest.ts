import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * A backup's manifest: `<prefix>-<timestamp>.manifest` beside its .dump and .key, binding the cluster
 * it was taken of (the state directory's cluster ID), the object's name, the revision and the SHA-256
 * of the sealed .dump and .key objects, under an HMAC keyed from the master key. Whoever can only
 * write to the bucket cannot make one: a planted, renamed, replayed or foreign object has no manifest
 * that verifies here, and the restore and pruning pass it over (trust.ts).
 *
 * The .dump and .key stay in etcd-backup's format, so the seed module's tooling still reads them.
 * The agent in the members writes the same text (agent/etcd-kvm-agent.py, `manifest_text`): one
 * field a line, in this order, then `mac <hex>` over every line before it.
 *
 * Version 2 adds the member's HashKV at the recorded revision, taken as the backup was, so that a
 * restore drill (drill/plan.ts) can show the restored data is the data the cluster held. Version 1
 * manifests (backups made before) still verify, without it.
 */

/** The MAC key's label: version 1's header, kept for version 2 so one derivation serves both. */
export const MANIFEST_VERSION = 'etcd-kvm backup manifest 1';
export const MANIFEST_VERSION_2 = 'etcd-kvm backup manifest 2';

export interface BackupManifest {
  /** The state directory's cluster ID (pki/identity.ts). */
  cluster: string;
  /** The .dump object's name. */
  object: string;
  revision: number;
  /** SHA-256 of the .dump and .key objects as stored (sealed). */
  dumpSha256: string;
  keySha256: string;
  /** When it was taken, RFC 3339 UTC. */
  taken: string;
  /** Which member's agent, or the control node. */
  by: string;
  /** The snapshotted member's HashKV at `revision` (version 2); absent in a version 1 manifest. */
  hashKV?: RecordedHashKV;
}

/** etcd's HashKV answer as a manifest records it: the hash, and the member's compaction when it was taken. */
export interface RecordedHashKV {
  hash: number;
  compactRevision: number;
}

const FIELDS: [keyof BackupManifest, string][] = [
  ['cluster', 'cluster'],
  ['object', 'object'],
  ['revision', 'revision'],
  ['dumpSha256', 'dump-sha256'],
  ['keySha256', 'key-sha256'],
  ['taken', 'taken'],
  ['by', 'by'],
];
const FIELDS_2 = ['hashkv', 'compact-revision'] as const;

export const manifestObjectName = (dumpName: string) => dumpName.replace(/\.dump$/, '.manifest');

/** The MAC's key: derived from the master key, so the one secret the members already hold serves both. */
const macKey = (masterKey: Uint8Array) => createHmac('sha256', masterKey).update(MANIFEST_VERSION).digest();

const macOf = (body: string, masterKey: Uint8Array) => createHmac('sha256', macKey(masterKey)).update(body, 'utf8').digest();

/** Version 2 when the HashKV is known (every backup now records it), version 1 otherwise. */
export function renderManifest(manifest: BackupManifest, masterKey: Uint8Array): string {
  for (const [field] of FIELDS)
    if (/[\r\n]/.test(String(manifest[field]))) throw new Error(`a backup manifest's ${field} must be one line`);
  const { hashKV } = manifest;
  const lines = [
    hashKV ? MANIFEST_VERSION_2 : MANIFEST_VERSION,
    ...FIELDS.map(([field, label]) => `${label} ${manifest[field]}`),
    ...(hashKV ? [`hashkv ${hashKV.hash}`, `compact-revision ${hashKV.compactRevision}`] : []),
  ];
  const body = `${lines.join('\n')}\n`;
  return `${body}mac ${macOf(body, masterKey).toString('hex')}\n`;
}

const wholeNumber = (text: string | undefined) => (text !== undefined && /^\d{1,15}$/.test(text) ? Number(text) : undefined);
/** etcd answers a compact revision of -1 for a store never compacted. */
const compactRevisionIn = (text: string | undefined) => (text !== undefined && /^-?\d{1,15}$/.test(text) ? Number(text) : undefined);

/** The manifest's fields when its MAC verifies with this master key and every field is there; undefined otherwise. */
export function verifyManifest(text: string, masterKey: Uint8Array): BackupManifest | undefined {
  const match = /^([\s\S]*\n)mac ([0-9a-f]{64})\n$/.exec(text);
  if (!match) return undefined;
  const [, body, mac] = match as unknown as [string, string, string];
  if (!timingSafeEqual(macOf(body, masterKey), Buffer.from(mac, 'hex'))) return undefined;
  const lines = body.slice(0, -1).split('\n');
  const labels = lines[0] === MANIFEST_VERSION ? FIELDS.length : lines[0] === MANIFEST_VERSION_2 ? FIELDS.length + FIELDS_2.length : -1;
  if (lines.length !== labels + 1) return undefined;
  const values = new Map<string, string>();
  for (const line of lines.slice(1)) {
    const space = line.indexOf(' ');
    values.set(line.slice(0, space), line.slice(space + 1));
  }
  const value = (label: string) => values.get(label) ?? '';
  const revision = wholeNumber(values.get('revision'));
  if (revision === undefined) return undefined;
  const hash = wholeNumber(values.get('hashkv'));
  const compactRevision = compactRevisionIn(values.get('compact-revision'));
  if (lines[0] === MANIFEST_VERSION_2 && (hash === undefined || compactRevision === undefined)) return undefined;
  return {
    cluster: value('cluster'),
    object: value('object'),
    revision,
    dumpSha256: value('dump-sha256'),
    keySha256: value('key-sha256'),
    taken: value('taken'),
    by: value('by'),
    ...(hash !== undefined && compactRevision !== undefined ? { hashKV: { hash, compactRevision } } : {}),
  };
}
