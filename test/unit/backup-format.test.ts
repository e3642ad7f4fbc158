import test from 'ava';
import type Sodium from 'libsodium-wrappers';
import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import {
  BackupFormatError,
  CHUNK_BYTES,
  masterKeyFromHex,
  newDataKey,
  openDataKey,
  openStream,
  rechunk,
  sealedSize,
  sealStream,
} from '../../tasks/backup/format.ts';

/**
 * etcd-backup compatibility. The fixture is sealed here with libsodium (a different implementation
 * from ours), following the format description only: a random data key sealed by the master key
 * as nonce(24) ‖ ciphertext+tag; the snapshot in 1 MiB chunks, each nonce(24) ‖ ciphertext+tag.
 */

function libsodiumBackup(snapshot: Uint8Array, masterKey: Uint8Array) {
  const sealWith = (key: Uint8Array, plaintext: Uint8Array) => {
    const nonce = sodium.randombytes_buf(sodium.crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
    const sealed = sodium.crypto_aead_xchacha20poly1305_ietf_encrypt(plaintext, null, null, nonce, key);
    return Buffer.concat([nonce, sealed]);
  };
  const dataKey = sodium.crypto_aead_xchacha20poly1305_ietf_keygen();
  const chunks: Buffer[] = [];
  for (let offset = 0; offset < snapshot.length; offset += 1024 * 1024)
    chunks.push(sealWith(dataKey, snapshot.subarray(offset, offset + 1024 * 1024)));
  return { dump: Buffer.concat(chunks), key: sealWith(masterKey, dataKey) };
}

// libsodium-wrappers' ESM build imports a file its package does not ship (0.7.16): load the CommonJS one.
const sodium = createRequire(import.meta.url)('libsodium-wrappers') as typeof Sodium;

const MASTER_HEX = 'a3'.repeat(32);

/** A buffer as a stream of pieces of `size` bytes, as a socket or a file delivers them. */
async function* piecesOf(bytes: Uint8Array, size: number): AsyncGenerator<Uint8Array> {
  for (let offset = 0; offset < bytes.length; offset += size) yield bytes.subarray(offset, offset + size);
}

async function collect(stream: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const parts: Uint8Array[] = [];
  for await (const part of stream) parts.push(part);
  return Buffer.concat(parts);
}

const decrypt = async (dump: Uint8Array, sealedKey: Uint8Array, master: Uint8Array, pieceBytes = 65_536) =>
  collect(openStream(piecesOf(dump, pieceBytes), openDataKey(sealedKey, master)));

test.before(async () => {
  await sodium.ready;
});

test('a libsodium-sealed backup of several chunks decrypts to the snapshot, whatever pieces the stream comes in', async (t) => {
  const snapshot = randomBytes(2 * CHUNK_BYTES + 12_345);
  const fixture = libsodiumBackup(snapshot, masterKeyFromHex(MASTER_HEX));
  t.is(fixture.dump.length, snapshot.length + 3 * (24 + 16));
  t.is(sealedSize(snapshot.length), fixture.dump.length);
  for (const pieceBytes of [7_777, CHUNK_BYTES, 3 * CHUNK_BYTES]) {
    t.true(
      (await decrypt(fixture.dump, fixture.key, masterKeyFromHex(MASTER_HEX), pieceBytes)).equals(snapshot),
      `pieces of ${pieceBytes}`,
    );
  }
});

test('rechunk cuts a stream into exact pieces whatever it is made of', async (t) => {
  const bytes = randomBytes(10_000);
  for (const pieceBytes of [1, 999, 1000, 1001, 20_000]) {
    const chunks: Buffer[] = [];
    for await (const chunk of rechunk(piecesOf(bytes, pieceBytes), 1000)) chunks.push(chunk);
    t.deepEqual(
      chunks.map((c) => c.length),
      Array(10).fill(1000),
      `pieces of ${pieceBytes}`,
    );
    t.true(Buffer.concat(chunks).equals(bytes));
  }
  const tail: number[] = [];
  for await (const chunk of rechunk(piecesOf(randomBytes(2500), 700), 1000)) tail.push(chunk.length);
  t.deepEqual(tail, [1000, 1000, 500]);
});

test('what we seal, libsodium opens with the format description', async (t) => {
  const snapshot = randomBytes(CHUNK_BYTES + 1);
  const master = masterKeyFromHex(MASTER_HEX);
  const { dataKey: ourKey, sealedKey } = newDataKey(master);
  const ours = { key: sealedKey, dump: await collect(sealStream(piecesOf(snapshot, 50_000), ourKey)) };
  t.is(ours.dump.length, sealedSize(snapshot.length));
  const open = (key: Uint8Array, sealed: Uint8Array) =>
    sodium.crypto_aead_xchacha20poly1305_ietf_decrypt(null, sealed.subarray(24), null, sealed.subarray(0, 24), key);
  const dataKey = open(master, ours.key);
  t.is(dataKey.length, 32);
  const first = open(dataKey, ours.dump.subarray(0, 24 + CHUNK_BYTES + 16));
  const second = open(dataKey, ours.dump.subarray(24 + CHUNK_BYTES + 16));
  t.true(Buffer.concat([first, second]).equals(snapshot));
});

test('a wrong master key or a damaged chunk is an error that says so', async (t) => {
  const fixture = libsodiumBackup(randomBytes(CHUNK_BYTES + 1000), masterKeyFromHex(MASTER_HEX));
  await t.throwsAsync(() => decrypt(fixture.dump, fixture.key, masterKeyFromHex('00'.repeat(32))), {
    instanceOf: BackupFormatError,
    message: /the .key object does not decrypt/,
  });
  const damaged = Buffer.from(fixture.dump);
  damaged[CHUNK_BYTES + 100] = damaged[CHUNK_BYTES + 100]! ^ 1;
  await t.throwsAsync(() => decrypt(damaged, fixture.key, masterKeyFromHex(MASTER_HEX)), {
    instanceOf: BackupFormatError,
    message: /chunk 1 of the snapshot does not decrypt/,
  });
});
