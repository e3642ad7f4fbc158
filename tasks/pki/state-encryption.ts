import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { InputError } from '../core/errors.ts';
import { PRIVATE_FILE_MODE, readIfExists, writeFileAtomic } from '../core/files.ts';
import { PASSPHRASE_SOURCES, readPassphrase } from '../core/passphrase.ts';
import type { Secret } from '../core/secret.ts';

/**
 * Private keys at rest, sealed with a passphrase, so the state directory can be committed or copied.
 * The key is derived with scrypt (N=2^17, r=8, p=1: OWASP's setting; ~0.4–0.7 s here) and every key
 * file is sealed with XChaCha20-Poly1305, its path inside the state directory as associated data (a
 * sealed file moved to another name does not open). Both from the audited noble libraries. The
 * record (state-encryption.json) holds the KDF's parameters, its salt, and a sealed check value, so
 * a wrong passphrase is known before anything is read or written. Certificates stay plain: they are public.
 * The libraries load only when a state directory is encrypted (~50 ms at every start otherwise).
 */

interface Primitives {
  aead: typeof import('@noble/ciphers/chacha').xchacha20poly1305;
  scrypt: typeof import('@noble/hashes/scrypt').scrypt;
}
let primitives: Promise<Primitives> | undefined;
const loadPrimitives = () =>
  (primitives ??= Promise.all([import('@noble/ciphers/chacha'), import('@noble/hashes/scrypt')]).then(([chacha, hashes]) => ({ aead: chacha.xchacha20poly1305, scrypt: hashes.scrypt })));

export const ENCRYPTION_RECORD = 'state-encryption.json';
const SEALED_PREFIX = 'etcd-kvm-sealed:v1:';
const CHECK_LABEL = 'passphrase check';
const CHECK_TEXT = 'etcd-kvm state directory';
const NONCE_BYTES = 24;

interface EncryptionRecord {
  version: 1;
  kdf: { name: 'scrypt'; N: number; r: number; p: number; salt: string };
  check: string;
}

export const isSealed = (text: string): boolean => text.startsWith(SEALED_PREFIX);

export class StateCipher {
  readonly #key: Uint8Array;
  readonly #aead: Primitives['aead'];

  private constructor(key: Uint8Array, aead: Primitives['aead']) {
    this.#key = key;
    this.#aead = aead;
  }

  static async #derive(passphrase: Secret, kdf: EncryptionRecord['kdf']): Promise<StateCipher> {
    const { aead, scrypt } = await loadPrimitives();
    return new StateCipher(scrypt(passphrase.reveal(), Buffer.from(kdf.salt, 'base64'), { N: kdf.N, r: kdf.r, p: kdf.p, dkLen: 32, maxmem: 2 ** 30 }), aead);
  }

  /** A new passphrase: a new salt, and the record that opens it again. */
  static async create(passphrase: Secret): Promise<{ cipher: StateCipher; record: string }> {
    const kdf = { name: 'scrypt' as const, N: 2 ** 17, r: 8, p: 1, salt: randomBytes(16).toString('base64') };
    const cipher = await StateCipher.#derive(passphrase, kdf);
    const record: EncryptionRecord = { version: 1, kdf, check: cipher.seal(CHECK_TEXT, CHECK_LABEL) };
    return { cipher, record: `${JSON.stringify(record, null, 2)}\n` };
  }

  /** Opens with the record's passphrase; a wrong one is bad input. */
  static async unlock(recordText: string, passphrase: Secret, where: string): Promise<StateCipher> {
    let record: EncryptionRecord;
    try {
      record = JSON.parse(recordText) as EncryptionRecord;
      if (record.version !== 1 || record.kdf?.name !== 'scrypt') throw new Error('unknown version');
    } catch {
      throw new InputError(`${where}/${ENCRYPTION_RECORD} is not a state encryption record this version reads`);
    }
    const cipher = await StateCipher.#derive(passphrase, record.kdf);
    try {
      if (cipher.open(record.check, CHECK_LABEL) === CHECK_TEXT) return cipher;
    } catch {
      // A wrong key fails the tag check: reported below.
    }
    throw new InputError(`wrong passphrase for the state directory ${where}; nothing was read or changed`);
  }

  seal(plain: string, label: string): string {
    const nonce = randomBytes(NONCE_BYTES);
    const sealed = this.#aead(this.#key, nonce, Buffer.from(label)).encrypt(Buffer.from(plain));
    return `${SEALED_PREFIX}${Buffer.concat([nonce, sealed]).toString('base64')}\n`;
  }

  open(text: string, label: string): string {
    const bytes = Buffer.from(text.slice(SEALED_PREFIX.length).trim(), 'base64');
    try {
      return Buffer.from(this.#aead(this.#key, bytes.subarray(0, NONCE_BYTES), Buffer.from(label)).decrypt(bytes.subarray(NONCE_BYTES))).toString();
    } catch {
      throw new Error(`${label} does not open with this state directory's key (changed, or moved from another file)`);
    }
  }
}

export const encryptionRecordOf = (stateDir: string): string | undefined => readIfExists(join(stateDir, ENCRYPTION_RECORD));

export function writeEncryptionRecord(stateDir: string, record: string): void {
  writeFileAtomic(join(stateDir, ENCRYPTION_RECORD), record, PRIVATE_FILE_MODE);
}

/** The cipher of an encrypted state directory (asking for its passphrase), or undefined for a plain one. */
export async function unlockStateDirectory(stateDir: string): Promise<StateCipher | undefined> {
  const record = encryptionRecordOf(stateDir);
  if (record === undefined) return undefined;
  const passphrase = await readPassphrase(`passphrase of ${stateDir}`);
  if (!passphrase) throw new InputError(`the state directory ${stateDir} is encrypted: give its passphrase in ${PASSPHRASE_SOURCES}`);
  return StateCipher.unlock(record, passphrase, stateDir);
}
