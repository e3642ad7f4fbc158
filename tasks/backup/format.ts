import { xchacha20poly1305 } from '@noble/ciphers/chacha';
import { randomBytes, type Hash } from 'node:crypto';

/**
 * The snapshot format of the etcd-backup utility, which the seed module restores from:
 * - objects `<object_prefix>-<RFC 3339 UTC timestamp>.dump`, plus `<same>.key` when encrypted;
 * - encryption with XChaCha20-Poly1305 and no additional data: a random 32-byte data key per
 *   backup, stored in the .key object sealed by the master key as nonce(24) ‖ ciphertext+tag;
 *   the snapshot sealed in 1 MiB plaintext chunks, each written as nonce(24) ‖ ciphertext+tag.
 */

export const CHUNK_BYTES = 1024 * 1024;
const NONCE_BYTES = 24;
const TAG_BYTES = 16;
const KEY_BYTES = 32;

export class BackupFormatError extends Error {}

export function masterKeyFromHex(hex: string): Uint8Array {
  if (!/^[0-9a-fA-F]{64}$/.test(hex)) throw new BackupFormatError('the master key is not 32 bytes of hex');
  return Uint8Array.from(Buffer.from(hex, 'hex'));
}

function seal(key: Uint8Array, plaintext: Uint8Array): Buffer {
  const nonce = randomBytes(NONCE_BYTES);
  return Buffer.concat([nonce, xchacha20poly1305(key, nonce).encrypt(plaintext)]);
}

function open(key: Uint8Array, sealed: Uint8Array, what: string): Uint8Array {
  if (sealed.length < NONCE_BYTES + TAG_BYTES)
    throw new BackupFormatError(`${what} is too short to be sealed data (${sealed.length} bytes)`);
  try {
    return xchacha20poly1305(key, sealed.subarray(0, NONCE_BYTES)).decrypt(sealed.subarray(NONCE_BYTES));
  } catch {
    throw new BackupFormatError(`${what} does not decrypt: wrong key, or the object is damaged`);
  }
}

/** The data key inside a .key object, opened with the master key. */
export function openDataKey(sealedKey: Uint8Array, masterKey: Uint8Array): Uint8Array {
  const dataKey = open(masterKey, sealedKey, 'the .key object');
  if (dataKey.length !== KEY_BYTES) throw new BackupFormatError(`the .key object holds ${dataKey.length} bytes, not a 32-byte key`);
  return dataKey;
}

const SEALED_CHUNK_BYTES = NONCE_BYTES + CHUNK_BYTES + TAG_BYTES;

// Streams, so that a snapshot of gigabytes passes through with about one chunk in memory at a time.

/** A byte stream cut into pieces of exactly `size` bytes (the last one may be shorter). */
export async function* rechunk(source: AsyncIterable<Uint8Array>, size: number): AsyncGenerator<Buffer> {
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  for await (const piece of source) {
    pending.push(Buffer.from(piece.buffer, piece.byteOffset, piece.byteLength));
    pendingBytes += piece.byteLength;
    while (pendingBytes >= size) {
      const joined = Buffer.concat(pending, pendingBytes);
      yield joined.subarray(0, size);
      pending = [joined.subarray(size)];
      pendingBytes -= size;
    }
  }
  if (pendingBytes > 0) yield Buffer.concat(pending, pendingBytes);
}

/** A stream passed through as it is, each piece added to `hash` on the way (a manifest's SHA-256 of a sealed object). */
export async function* hashedAlong<T extends Uint8Array>(source: AsyncIterable<T>, hash: Hash): AsyncGenerator<T> {
  for await (const piece of source) {
    hash.update(piece);
    yield piece;
  }
}

/** A new backup's data key, and the .key object that carries it sealed by the master key. */
export function newDataKey(masterKey: Uint8Array): { dataKey: Uint8Array; sealedKey: Buffer } {
  const dataKey = randomBytes(KEY_BYTES);
  return { dataKey, sealedKey: seal(masterKey, dataKey) };
}

/** The sealed size of a snapshot of `plainBytes`: each 1 MiB chunk gains a nonce and a tag. */
export const sealedSize = (plainBytes: number) => plainBytes + Math.ceil(plainBytes / CHUNK_BYTES) * (NONCE_BYTES + TAG_BYTES);

/** The snapshot sealed chunk by chunk: each 1 MiB of it as nonce(24) ‖ ciphertext+tag. */
export async function* sealStream(snapshot: AsyncIterable<Uint8Array>, dataKey: Uint8Array): AsyncGenerator<Buffer> {
  for await (const chunk of rechunk(snapshot, CHUNK_BYTES)) yield seal(dataKey, chunk);
}

/** A sealed dump opened chunk by chunk; a damaged chunk or a wrong key stops it with the chunk's index. */
export async function* openStream(dump: AsyncIterable<Uint8Array>, dataKey: Uint8Array): AsyncGenerator<Uint8Array> {
  let index = 0;
  for await (const sealed of rechunk(dump, SEALED_CHUNK_BYTES)) yield open(dataKey, sealed, `chunk ${index++} of the snapshot`);
}

/** RFC 3339 UTC to the second, as etcd-backup names its objects. */
export const backupTimestamp = (date: Date) => date.toISOString().replace(/\.\d{3}Z$/, 'Z');

export const dumpObjectName = (prefix: string, timestamp: string) => `${prefix}-${timestamp}.dump`;
export const keyObjectName = (dumpName: string) => dumpName.replace(/\.dump$/, '.key');

export interface NamedSnapshot {
  name: string;
  /** The time in its name, RFC 3339 UTC. */
  time: string;
}

/** The bucket's snapshots under a prefix, by the time in their names, oldest first. Names that do not parse are not snapshots. */
export function snapshotsIn(names: readonly string[], prefix: string): NamedSnapshot[] {
  const pattern = new RegExp(
    `^${prefix.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}-(\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(?:\\.\\d+)?Z)\\.dump$`,
  );
  return names
    .map((name) => ({ name, time: pattern.exec(name)?.[1] }))
    .filter((entry): entry is NamedSnapshot => entry.time !== undefined && !Number.isNaN(Date.parse(entry.time)))
    .sort((a, b) => Date.parse(a.time) - Date.parse(b.time));
}
