import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';

/**
 * A snapshot on the control node's disk while it passes through: in a directory of its own (0700)
 * as a file only the tool's user reads (0600), removed afterwards. A snapshot is the cluster's data
 * and can be as large as etcd's quota (8 GiB), far more than the tool should hold in memory.
 */
export class SnapshotFile {
  readonly #dir: string;
  readonly path: string;

  constructor(purpose: string) {
    this.#dir = mkdtempSync(join(tmpdir(), `etcd-kvm-${purpose}-`));
    this.path = join(this.#dir, 'snapshot.db');
  }

  /** Writes the stream to the file (created now, 0600); the number of bytes written. */
  async write(source: AsyncIterable<Uint8Array>): Promise<number> {
    let bytes = 0;
    const counted = async function* () {
      for await (const piece of source) {
        bytes += piece.byteLength;
        yield piece;
      }
    };
    await pipeline(Readable.from(counted()), createWriteStream(this.path, { mode: 0o600, flags: 'wx' }));
    return bytes;
  }

  get size(): number {
    return statSync(this.path).size;
  }

  read(): Readable {
    return createReadStream(this.path, { highWaterMark: 1024 * 1024 });
  }

  /**
   * etcd appends the SHA-256 of the database to every snapshot it streams (etcdctl's restore checks
   * it too): read the file once, hashing all but those last 32 bytes.
   */
  async verify(where: string): Promise<void> {
    const size = this.size;
    const damaged = new Error(`${where} is not an intact etcd snapshot (its trailing SHA-256 does not match)`);
    if (size <= 32) throw damaged;
    const hash = createHash('sha256');
    for await (const piece of createReadStream(this.path, { start: 0, end: size - 33, highWaterMark: 1024 * 1024 }))
      hash.update(piece as Buffer);
    const trailer: Buffer[] = [];
    for await (const piece of createReadStream(this.path, { start: size - 32 })) trailer.push(piece as Buffer);
    if (!hash.digest().equals(Buffer.concat(trailer))) throw damaged;
  }

  remove(): void {
    rmSync(this.#dir, { recursive: true, force: true });
  }
}
