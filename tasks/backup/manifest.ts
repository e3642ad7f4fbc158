import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * A backup's manifest: `<prefix>-<timestamp>.manifest` beside its .dump and .key, binding the cluster
 * it was taken of (the state directory's cluster ID), the object's name, the revision and the SHA-256
 * of the sealed .dump and .key objects, under an HMAC keyed from the master key. Whoever can only
 * write to the bucket cannot make one: a planted, renamed, replayed or foreign object has no manifest
 * that verifies here, and the restore and pruning pass it over (trust.ts).
 *
 * The .dump and .key stay in etcd-backup's format, so the seed module's tooling still reads them.
 * The agent in the members writes the same text (templates/etcd-kvm-agent.py, `manifest_text`): one
 * field a line, in this order, then `mac <hex>` over every line before it.
 */

export const MANIFEST_VERSION = 'etcd-kvm backup manifest 1';

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

export const manifestObjectName = (dumpName: string) => dumpName.replace(/\.dump$/, '.manifest');

/** The MAC's key: derived from the master key, so the one secret the members already hold serves both. */
const macKey = (masterKey: Uint8Array) => createHmac('sha256', masterKey).update(MANIFEST_VERSION).digest();

const macOf = (body: string, masterKey: Uint8Array) => createHmac('sha256', macKey(masterKey)).update(body, 'utf8').digest();

export function renderManifest(manifest: BackupManifest, masterKey: Uint8Array): string {
  for (const [field] of FIELDS)
    if (/[\r\n]/.test(String(manifest[field]))) throw new Error(`a backup manifest's ${field} must be one line`);
  const body = `${[MANIFEST_VERSION, ...FIELDS.map(([field, label]) => `${label} ${manifest[field]}`)].join('\n')}\n`;
  return `${body}mac ${macOf(body, masterKey).toString('hex')}\n`;
}

/** The manifest's fields when its MAC verifies with this master key and every field is there; undefined otherwise. */
export function verifyManifest(text: string, masterKey: Uint8Array): BackupManifest | undefined {
  const match = /^([\s\S]*\n)mac ([0-9a-f]{64})\n$/.exec(text);
  if (!match) return undefined;
  const [, body, mac] = match as unknown as [string, string, string];
  if (!timingSafeEqual(macOf(body, masterKey), Buffer.from(mac, 'hex'))) return undefined;
  const lines = body.slice(0, -1).split('\n');
  if (lines[0] !== MANIFEST_VERSION || lines.length !== FIELDS.length + 1) return undefined;
  const values = new Map<string, string>();
  for (const line of lines.slice(1)) {
    const space = line.indexOf(' ');
    values.set(line.slice(0, space), line.slice(space + 1));
  }
  const value = (label: string) => values.get(label) ?? '';
  const revision = Number(value('revision'));
  if (!Number.isSafeInteger(revision) || revision < 0) return undefined;
  return {
    cluster: value('cluster'),
    object: value('object'),
    revision,
    dumpSha256: value('dump-sha256'),
    keySha256: value('key-sha256'),
    taken: value('taken'),
    by: value('by'),
  };
}
