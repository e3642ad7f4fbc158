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
 *
 * The record is not authenticated as a whole, so what it says is either bounded (the KDF's costs,
 * before any derivation) or sealed: a conversion under way (keys still plain, which are then read
 * as they are and sealed by the next run) is said by a sealed marker nobody can add without the key.
 * Without it every key is sealed, and a plain key file is refused: sealing it would vouch for
 * whatever was put there.
 */

interface Primitives {
  aead: typeof import('@noble/ciphers/chacha').xchacha20poly1305;
  scrypt: typeof import('@noble/hashes/scrypt').scrypt;
}
let primitives: Promise<Primitives> | undefined;
const loadPrimitives = () =>
  (primitives ??= Promise.all([import('@noble/ciphers/chacha'), import('@noble/hashes/scrypt')]).then(([chacha, hashes]) => ({
    aead: chacha.xchacha20poly1305,
    scrypt: hashes.scrypt,
  })));

export const ENCRYPTION_RECORD = 'state-encryption.json';
const SEALED_PREFIX = 'etcd-kvm-sealed:v1:';
const CHECK_LABEL = 'passphrase check';
const CHECK_TEXT = 'etcd-kvm state directory';
const CONVERTING_LABEL = 'conversion under way';
const CONVERTING_TEXT = 'some private keys may still be plain';
const NONCE_BYTES = 24;

interface Kdf {
  name: 'scrypt';
  N: number;
  r: number;
  p: number;
  salt: string;
}

interface EncryptionRecord {
  version: 1;
  kdf: Kdf;
  check: string;
  /** Sealed CONVERTING_TEXT while keys are being converted; absent once every key is sealed. */
  converting?: string;
}

/** What this tool makes: OWASP's scrypt setting (2^17 · 8 · 1), the least work a record may ask for. */
const KDF_CREATED = { N: 2 ** 17, r: 8, p: 1 } as const;
/** Bounds on a record's KDF: below, a passphrase is cheap to guess; above, a run would hang or run out of memory. */
export const KDF_BOUNDS = { minWork: 2 ** 20, maxWork: 2 ** 24, minN: 2 ** 14, maxMemoryBytes: 2 ** 30, minSaltBytes: 16 } as const;

/** Why the record's KDF parameters are refused, or undefined when they are within bounds. */
export function kdfProblem(kdf: Pick<Kdf, 'N' | 'r' | 'p' | 'salt'>): string | undefined {
  const { N, r, p } = kdf;
  if (![N, r, p].every((value) => Number.isSafeInteger(value) && value >= 1)) return 'N, r and p must be positive integers';
  if (!Number.isInteger(Math.log2(N))) return `N=${N} is not a power of two`;
  // noble's own measure of the memory scrypt takes.
  const memory = 128 * r * (N + p);
  if (memory > KDF_BOUNDS.maxMemoryBytes)
    return `too costly: N=${N}, r=${r}, p=${p} needs ${Math.round(memory / 2 ** 20)} MiB (at most ${KDF_BOUNDS.maxMemoryBytes / 2 ** 20})`;
  if (N * r * p > KDF_BOUNDS.maxWork)
    return (
      `too costly: N·r·p = 2^${Math.log2(N * r * p).toFixed(1)} (at most ` +
      `2^${Math.log2(KDF_BOUNDS.maxWork)}, 16 times what this tool makes)`
    );
  if (N < KDF_BOUNDS.minN || N * r * p < KDF_BOUNDS.minWork)
    return (
      `too weak: N=${N}, r=${r}, p=${p} (at least N=2^${Math.log2(KDF_BOUNDS.minN)} ` +
      `and N·r·p = 2^${Math.log2(KDF_BOUNDS.minWork)}, what this tool makes)`
    );
  if (typeof kdf.salt !== 'string' || Buffer.from(kdf.salt, 'base64').length < KDF_BOUNDS.minSaltBytes)
    return `too weak: the salt is shorter than ${KDF_BOUNDS.minSaltBytes} bytes`;
  return undefined;
}

export const isSealed = (text: string): boolean => text.startsWith(SEALED_PREFIX);

export class StateCipher {
  readonly #key: Uint8Array;
  readonly #aead: Primitives['aead'];
  readonly #kdf: Kdf;
  /** The record said a conversion is under way (its sealed marker opened): plain keys are expected. */
  readonly converting: boolean;

  private constructor(key: Uint8Array, aead: Primitives['aead'], kdf: Kdf, converting: boolean) {
    this.#key = key;
    this.#aead = aead;
    this.#kdf = kdf;
    this.converting = converting;
  }

  static async #derive(passphrase: Secret, kdf: Kdf): Promise<StateCipher> {
    const { aead, scrypt } = await loadPrimitives();
    return new StateCipher(
      scrypt(passphrase.reveal(), Buffer.from(kdf.salt, 'base64'), {
        N: kdf.N,
        r: kdf.r,
        p: kdf.p,
        dkLen: 32,
        maxmem: KDF_BOUNDS.maxMemoryBytes,
      }),
      aead,
      kdf,
      false,
    );
  }

  /** A new passphrase: a new salt, and the record that opens it again, saying a conversion is under way. */
  static async create(passphrase: Secret): Promise<{ cipher: StateCipher; record: string }> {
    const derived = await StateCipher.#derive(passphrase, {
      name: 'scrypt',
      ...KDF_CREATED,
      salt: randomBytes(KDF_BOUNDS.minSaltBytes).toString('base64'),
    });
    const cipher = derived.converted(true);
    return { cipher, record: cipher.record() };
  }

  /** The same key with a conversion under way or not; the caller writes its `record()`. */
  converted(converting: boolean): StateCipher {
    return new StateCipher(this.#key, this.#aead, this.#kdf, converting);
  }

  /** The record that opens this key again, with the marker when a conversion is under way. */
  record(): string {
    const record: EncryptionRecord = {
      version: 1,
      kdf: this.#kdf,
      check: this.seal(CHECK_TEXT, CHECK_LABEL),
      ...(this.converting ? { converting: this.seal(CONVERTING_TEXT, CONVERTING_LABEL) } : {}),
    };
    return `${JSON.stringify(record, null, 2)}\n`;
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
    // Checked before deriving: the record is not authenticated, and its costs are the derivation's.
    const problem = kdfProblem(record.kdf);
    if (problem)
      throw new InputError(
        `${where}/${ENCRYPTION_RECORD}: its scrypt parameters are refused ` +
          `(${problem}); restore the record from where the directory came from`,
      );
    const cipher = await StateCipher.#derive(passphrase, {
      name: 'scrypt',
      N: record.kdf.N,
      r: record.kdf.r,
      p: record.kdf.p,
      salt: record.kdf.salt,
    });
    if (cipher.#opens(record.check, CHECK_LABEL, CHECK_TEXT)) {
      // A marker that does not open (removed, or copied from elsewhere) counts as none: the stricter reading.
      return cipher.converted(record.converting !== undefined && cipher.#opens(record.converting, CONVERTING_LABEL, CONVERTING_TEXT));
    }
    throw new InputError(`wrong passphrase for the state directory ${where}; nothing was read or changed`);
  }

  #opens(sealed: unknown, label: string, expected: string): boolean {
    try {
      return typeof sealed === 'string' && this.open(sealed, label) === expected;
    } catch {
      // A wrong key or a changed value fails the tag check.
      return false;
    }
  }

  seal(plain: string, label: string): string {
    const nonce = randomBytes(NONCE_BYTES);
    const sealed = this.#aead(this.#key, nonce, Buffer.from(label)).encrypt(Buffer.from(plain));
    return `${SEALED_PREFIX}${Buffer.concat([nonce, sealed]).toString('base64')}\n`;
  }

  open(text: string, label: string): string {
    const bytes = Buffer.from(text.slice(SEALED_PREFIX.length).trim(), 'base64');
    try {
      return Buffer.from(
        this.#aead(this.#key, bytes.subarray(0, NONCE_BYTES), Buffer.from(label)).decrypt(bytes.subarray(NONCE_BYTES)),
      ).toString();
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
