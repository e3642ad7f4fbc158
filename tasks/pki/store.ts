import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { InputError } from '../core/errors.ts';
import { PRIVATE_FILE_MODE, PUBLIC_FILE_MODE, readIfExists, writeFileAtomic } from '../core/files.ts';
import { ENCRYPTION_RECORD, isSealed, unlockStateDirectory, writeEncryptionRecord, type StateCipher } from './state-encryption.ts';

/** A certificate or SSH identity the tool keeps: its id names its files under the state directory. */
export type MaterialId =
  | 'ca'
  | 'intermediate'
  | 'peer-ca'
  /** A rotation's new CA and peer CA (pki/ca-rotation.ts), beside the ones in place until the rotation ends. */
  | 'ca-next'
  | 'peer-ca-next'
  /** With pki.intermediate: the intermediate the new CA signs, which signs leaves from the rotation's clients-new on. */
  | 'intermediate-next'
  | `member/${string}`
  | `peer/${string}`
  | `client/${string}`
  | 'ssh/admin'
  | `ssh-host/${string}`;

export interface StoredPair {
  /** Certificate PEM, or the OpenSSH public key line for SSH identities. */
  public?: string;
  privateKey?: string;
}

function filesOf(id: MaterialId): { public: string; privateKey: string } {
  if (id === 'ssh/admin') return { public: 'ssh/admin.pub', privateKey: 'ssh/admin.key' };
  if (id.startsWith('ssh-host/'))
    return { public: `ssh/hosts/${id.slice('ssh-host/'.length)}.pub`, privateKey: `ssh/hosts/${id.slice('ssh-host/'.length)}.key` };
  const [kind, name] = !id.includes('/') ? ['', id] : id.split('/');
  const dir = kind === 'member' ? 'pki/members' : kind === 'peer' ? 'pki/peers' : kind === 'client' ? 'pki/clients' : 'pki';
  return { public: `${dir}/${name}.crt`, privateKey: `${dir}/${name}.key` };
}

/** Every file under `dir` whose name ends in .key, as paths relative to `root`. */
function keyFilesUnder(root: string, dir: string): string[] {
  let entries: import('node:fs').Dirent[];
  try {
    entries = readdirSync(join(root, dir), { withFileTypes: true });
  } catch {
    return [];
  }
  return entries
    .flatMap((entry) =>
      entry.isDirectory() ? keyFilesUnder(root, join(dir, entry.name)) : entry.name.endsWith('.key') ? [join(dir, entry.name)] : [],
    )
    .sort();
}

/**
 * PKI material in the state directory: directories 0700, private keys 0600. With a cipher (an
 * encrypted state directory) every private key is sealed on write and opened in memory on read. A
 * key still plain while a conversion is under way (one that was stopped) is read as it is, and the
 * pki step seals it; once every key is sealed, a plain one is refused (exit 2): sealing it then
 * would vouch for a key anyone able to write the directory could have put there.
 */
export class PkiStore {
  #cipher: StateCipher | undefined;

  constructor(
    readonly stateDir: string,
    cipher?: StateCipher,
  ) {
    this.#cipher = cipher;
  }

  get cipher(): StateCipher | undefined {
    return this.#cipher;
  }

  /**
   * The store of a state directory, unlocked with its passphrase when it is encrypted (exit 2 when
   * wrong or missing, or when a plain key is found where every key is sealed).
   */
  static async open(stateDir: string): Promise<PkiStore> {
    const store = new PkiStore(stateDir, await unlockStateDirectory(stateDir));
    store.plainKeyFiles();
    return store;
  }

  /** Every key is sealed (an encrypted directory, no conversion under way): a plain one is not trusted. */
  get #allSealed(): boolean {
    return this.#cipher !== undefined && !this.#cipher.converting;
  }

  #refusePlain(files: readonly string[]): InputError {
    return new InputError(
      `${files.map((file) => join(this.stateDir, file)).join(', ')}: not encrypted, in a state directory whose every private ` +
        `key is sealed (no conversion under way); refused, as anyone able to write the directory could have put it there`,
      [
        `if you put it there, seal it: etcd-kvm state -i <inventory> --encrypt`,
        'otherwise restore the sealed file from where the directory came from',
      ],
    );
  }

  pathsOf(id: MaterialId): { public: string; privateKey: string } {
    const files = filesOf(id);
    return { public: join(this.stateDir, files.public), privateKey: join(this.stateDir, files.privateKey) };
  }

  read(id: MaterialId): StoredPair {
    const paths = this.pathsOf(id);
    const pub = readIfExists(paths.public);
    const stored = readIfExists(paths.privateKey);
    const privateKey = stored === undefined ? undefined : this.#opened(stored, filesOf(id).privateKey);
    return { ...(pub !== undefined ? { public: pub } : {}), ...(privateKey !== undefined ? { privateKey } : {}) };
  }

  #opened(stored: string, file: string): string {
    if (!isSealed(stored)) {
      if (this.#allSealed) throw this.#refusePlain([file]);
      return stored;
    }
    if (!this.cipher)
      throw new Error(
        `${join(this.stateDir, file)} is encrypted, but the state directory has ` +
          `no ${ENCRYPTION_RECORD} (restore it from where the directory came from)`,
      );
    return this.cipher.open(stored, file);
  }

  /**
   * Private key files (relative to the state directory) not sealed: all of them in a plain state
   * directory, those a conversion under way has not reached yet; refused (exit 2) where every key is sealed.
   */
  plainKeyFiles(): string[] {
    const plain = [...keyFilesUnder(this.stateDir, 'pki'), ...keyFilesUnder(this.stateDir, 'ssh')].filter(
      (file) => !isSealed(readIfExists(join(this.stateDir, file)) ?? ''),
    );
    if (plain.length > 0 && this.#allSealed) throw this.#refusePlain(plain);
    return plain;
  }

  /**
   * Rewrites every private key sealed (with the cipher) or plain: the conversion either way, one file
   * at a time and atomically, so a stopped one is finished by running it again. The record says a
   * conversion is under way from before the first file to after the last one sealed. Returns the files rewritten.
   */
  convertKeys(to: 'sealed' | 'plain'): string[] {
    if (!this.#cipher) throw new Error("converting keys needs the state directory's passphrase");
    if (to === 'plain') this.#recordConverting(true);
    const cipher = this.#cipher;
    const converted: string[] = [];
    for (const file of [...keyFilesUnder(this.stateDir, 'pki'), ...keyFilesUnder(this.stateDir, 'ssh')]) {
      const stored = readIfExists(join(this.stateDir, file)) ?? '';
      if (isSealed(stored) === (to === 'sealed')) continue;
      writeFileAtomic(
        join(this.stateDir, file),
        to === 'sealed' ? cipher.seal(stored, file) : cipher.open(stored, file),
        PRIVATE_FILE_MODE,
      );
      converted.push(file);
    }
    if (to === 'sealed') this.#recordConverting(false);
    return converted;
  }

  /** Writes the record saying whether a conversion is under way, when it says otherwise now. */
  #recordConverting(converting: boolean): void {
    if (!this.#cipher || this.#cipher.converting === converting) return;
    this.#cipher = this.#cipher.converted(converting);
    writeEncryptionRecord(this.stateDir, this.#cipher.record());
  }

  /** The client certificates (or keys) the state directory holds, by name: root and application users. */
  clientNames(): string[] {
    let files: string[];
    try {
      files = readdirSync(join(this.stateDir, 'pki', 'clients'));
    } catch {
      return [];
    }
    return [...new Set(files.flatMap((file) => /^(.+)\.(crt|key)$/.exec(file)?.[1] ?? []))].sort();
  }

  /** Deletes a pair: the certificate first, so a run killed between the two leaves a key that is deleted next time. */
  remove(id: MaterialId): void {
    const paths = this.pathsOf(id);
    rmSync(paths.public, { force: true });
    rmSync(paths.privateKey, { force: true });
  }

  /**
   * How the tool logs in to members: the admin key (read when a member is first reached, since the pki
   * step may make it in the same run) and the known_hosts file that pins every member's host key.
   */
  get adminSsh(): { privateKey: () => string; knownHostsPath: string } {
    const privateKey = () => {
      const key = this.read('ssh/admin').privateKey;
      if (key === undefined) throw new Error(`the tool's SSH key ${this.pathsOf('ssh/admin').privateKey} is missing`);
      return key;
    };
    return { privateKey, knownHostsPath: this.knownHostsPath };
  }

  /** known_hosts pinning every member's host key, for the operator's (and the tool's) SSH to members. */
  get knownHostsPath(): string {
    return join(this.stateDir, 'ssh', 'known_hosts');
  }

  /** Key first: a run killed between the two writes leaves a key without a certificate, which is re-issued. */
  write(id: MaterialId, pair: Required<StoredPair>): void {
    const paths = this.pathsOf(id);
    const file = filesOf(id).privateKey;
    writeFileAtomic(paths.privateKey, this.#cipher ? this.#cipher.seal(pair.privateKey, file) : pair.privateKey, PRIVATE_FILE_MODE);
    writeFileAtomic(paths.public, pair.public, PUBLIC_FILE_MODE);
  }
}
