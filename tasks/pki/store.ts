import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { PRIVATE_FILE_MODE, PUBLIC_FILE_MODE, readIfExists, writeFileAtomic } from '../core/files.ts';

/** A certificate or SSH identity the tool keeps: its id names its files under the state directory. */
export type MaterialId = 'ca' | 'intermediate' | `member/${string}` | `client/${string}` | 'ssh/admin' | `ssh-host/${string}`;

export interface StoredPair {
  /** Certificate PEM, or the OpenSSH public key line for SSH identities. */
  public?: string;
  privateKey?: string;
}

function filesOf(id: MaterialId): { public: string; privateKey: string } {
  if (id === 'ssh/admin') return { public: 'ssh/admin.pub', privateKey: 'ssh/admin.key' };
  if (id.startsWith('ssh-host/')) return { public: `ssh/hosts/${id.slice('ssh-host/'.length)}.pub`, privateKey: `ssh/hosts/${id.slice('ssh-host/'.length)}.key` };
  const [kind, name] = id === 'ca' || id === 'intermediate' ? ['', id] : id.split('/');
  const dir = kind === 'member' ? 'pki/members' : kind === 'client' ? 'pki/clients' : 'pki';
  return { public: `${dir}/${name}.crt`, privateKey: `${dir}/${name}.key` };
}

/** PKI material in the state directory: directories 0700, private keys 0600. */
export class PkiStore {
  constructor(readonly stateDir: string) {}

  pathsOf(id: MaterialId): { public: string; privateKey: string } {
    const files = filesOf(id);
    return { public: join(this.stateDir, files.public), privateKey: join(this.stateDir, files.privateKey) };
  }

  read(id: MaterialId): StoredPair {
    const paths = this.pathsOf(id);
    const pub = readIfExists(paths.public);
    const privateKey = readIfExists(paths.privateKey);
    return { ...(pub !== undefined ? { public: pub } : {}), ...(privateKey !== undefined ? { privateKey } : {}) };
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

  /** known_hosts pinning every member's host key, for the operator's (and the tool's) SSH to members. */
  get knownHostsPath(): string {
    return join(this.stateDir, 'ssh', 'known_hosts');
  }

  /** Key first: a run killed between the two writes leaves a key without a certificate, which is re-issued. */
  write(id: MaterialId, pair: Required<StoredPair>): void {
    const paths = this.pathsOf(id);
    writeFileAtomic(paths.privateKey, pair.privateKey, PRIVATE_FILE_MODE);
    writeFileAtomic(paths.public, pair.public, PUBLIC_FILE_MODE);
  }
}
