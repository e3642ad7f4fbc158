import test from 'ava';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verifyHostKey } from '../../tasks/remote/known-hosts.ts';

/** known_hosts as the tool reads it: a key on an "@revoked" line is refused, pinned or not, and never recorded. */

/** An ed25519 public key blob as the SSH protocol sends it: string "ssh-ed25519", then the 32-byte key. */
function hostKey(): Buffer {
  const type = Buffer.from('ssh-ed25519');
  const key = randomBytes(32);
  const length = (bytes: Buffer) => Buffer.from([0, 0, 0, bytes.length]);
  return Buffer.concat([length(type), type, length(key), key]);
}

const line = (hosts: string, key: Buffer) => `${hosts} ssh-ed25519 ${key.toString('base64')}\n`;

function knownHosts(text: string): string {
  const path = join(mkdtempSync(join(tmpdir(), 'etcd-kvm-known-hosts-')), 'known_hosts');
  writeFileSync(path, text, { mode: 0o600 });
  return path;
}

const fingerprint = (key: Buffer) => `SHA256:${createHash('sha256').update(key).digest('base64').replace(/=+$/, '')}`;

test('a revoked key from an unknown host is refused even with trust on first use, and not recorded', (t) => {
  const revoked = hostKey();
  const path = knownHosts(`@revoked * ssh-ed25519 ${revoked.toString('base64')}\n`);
  const before = readFileSync(path, 'utf8');
  t.deepEqual(verifyHostKey(path, '192.0.2.10', 22, revoked, true), {
    ok: false,
    reason: `192.0.2.10 presented the host key ${fingerprint(revoked)}, which ${path} marks @revoked: refused (a revoked key is never accepted, nor recorded)`,
  });
  t.is(readFileSync(path, 'utf8'), before, 'nothing recorded');
});

const revokedCases: [host: string, port: number, pinnedAs: string, revokedAs: string][] = [
  ['192.0.2.10', 22, '192.0.2.10', '192.0.2.10'],
  ['hv.example', 2222, '[hv.example]:2222', '[hv.example]:2222'],
  ['hv.example', 22, 'hv.example', 'other.example'],
  ['hv.example', 22, 'hv.example', '*'],
];
for (const [host, port, pinnedAs, revokedAs] of revokedCases) {
  test(`a revoked key is refused even where a line pins it: ${pinnedAs} pinned, revoked as ${revokedAs}`, (t) => {
    const revoked = hostKey();
    const path = knownHosts(`${line(pinnedAs, revoked)}@revoked ${revokedAs} ssh-ed25519 ${revoked.toString('base64')}\n`);
    t.deepEqual(verifyHostKey(path, host, port, revoked, false), {
      ok: false,
      reason: `${pinnedAs} presented the host key ${fingerprint(revoked)}, which ${path} marks @revoked: refused (a revoked key is never accepted, nor recorded)`,
    });
  });
}

test("a revocation names one key: the host's other pinned key is still accepted, and an unknown one still recorded on first use", (t) => {
  const revoked = hostKey();
  const pinned = hostKey();
  const path = knownHosts(`@revoked * ssh-ed25519 ${revoked.toString('base64')}\n${line('192.0.2.10', pinned)}`);
  t.deepEqual(verifyHostKey(path, '192.0.2.10', 22, pinned, false), { ok: true });
  const fresh = hostKey();
  t.deepEqual(verifyHostKey(path, '192.0.2.11', 22, fresh, true), { ok: true, recorded: true });
  t.true(readFileSync(path, 'utf8').endsWith(line('192.0.2.11', fresh)));
});
