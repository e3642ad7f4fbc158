import { createHash, createHmac } from 'node:crypto';
import { appendFileSync } from 'node:fs';
import { readIfExists } from '../core/files.ts';

/**
 * OpenSSH known_hosts: which key a host must present. Hosts on a port other than 22 are written
 * "[host]:port"; hashed entries ("|1|salt|hash", HashKnownHosts) are matched with HMAC-SHA1.
 * A key on a "@revoked" line is refused from every host; "@cert-authority" lines are not used
 * (the tool pins keys, not host certificates).
 */

export function hostPattern(host: string, port: number): string {
  return port === 22 ? host : `[${host}]:${port}`;
}

function matchesHost(field: string, pattern: string): boolean {
  if (field.startsWith('|1|')) {
    const [, , salt, hash] = field.split('|');
    if (!salt || !hash) return false;
    return createHmac('sha1', Buffer.from(salt, 'base64')).update(pattern).digest('base64') === hash;
  }
  return field.split(',').includes(pattern);
}

export interface KnownKey {
  type: string;
  /** The key blob as sent in the SSH protocol. */
  blob: Buffer;
}

export function knownKeysFor(knownHostsText: string, host: string, port: number): KnownKey[] {
  const pattern = hostPattern(host, port);
  const keys: KnownKey[] = [];
  for (const line of knownHostsText.split('\n')) {
    const fields = line.trim().split(/\s+/);
    if (fields.length < 3 || fields[0]!.startsWith('#') || fields[0]!.startsWith('@')) continue;
    if (matchesHost(fields[0]!, pattern)) keys.push({ type: fields[1]!, blob: Buffer.from(fields[2]!, 'base64') });
  }
  return keys;
}

/**
 * The keys on "@revoked" lines, whatever their host patterns: a revoked key is compromised for every
 * host, and this file's matching has no wildcards, so the usual "@revoked * ..." would match nothing.
 */
export function revokedKeys(knownHostsText: string): KnownKey[] {
  return knownHostsText.split('\n').flatMap((line) => {
    const [marker, , type, key] = line.trim().split(/\s+/);
    return marker === '@revoked' && type && key ? [{ type, blob: Buffer.from(key, 'base64') }] : [];
  });
}

/** As ssh shows a key: SHA256:<base64 without padding>. */
export const fingerprintOf = (blob: Buffer): string => `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;

export type HostKeyVerdict = { ok: true; recorded?: boolean } | { ok: false; reason: string };

/**
 * Decides whether a presented host key is acceptable. Unknown host: refused unless trust-on-first-use,
 * in which case the key is appended to the file. Known host with a different key: always refused.
 */
export function verifyHostKey(
  knownHostsPath: string,
  host: string,
  port: number,
  presented: Buffer,
  trustOnFirstUse: boolean,
): HostKeyVerdict {
  const text = readIfExists(knownHostsPath) ?? '';
  const pattern = hostPattern(host, port);
  // Before anything else: a revoked key is refused even where a line also pins it, and never recorded.
  if (revokedKeys(text).some((key) => key.blob.equals(presented))) {
    return {
      ok: false,
      reason:
        `${pattern} presented the host key ${fingerprintOf(presented)}, ` +
        `which ${knownHostsPath} marks @revoked: refused (a revoked key is never accepted, nor recorded)`,
    };
  }
  const known = knownKeysFor(text, host, port);
  if (known.some((key) => key.blob.equals(presented))) return { ok: true };
  if (known.length > 0) {
    return {
      ok: false,
      reason:
        `the host key of ${pattern} CHANGED: it does not match ${knownHostsPath}; ` +
        `if the host was really reinstalled, remove its line there and run again`,
    };
  }
  if (!trustOnFirstUse) {
    return {
      ok: false,
      reason:
        `${pattern} is not in ${knownHostsPath}; add its key (ssh-keyscan ` +
        `-p ${port} ${host} >> ${knownHostsPath}) or set trust_on_first_use: true`,
    };
  }
  const type = presented.subarray(4, 4 + presented.readUInt32BE(0)).toString();
  appendFileSync(knownHostsPath, `${pattern} ${type} ${presented.toString('base64')}\n`, { mode: 0o600 });
  return { ok: true, recorded: true };
}
