import { commandLine } from './shell.ts';

/**
 * Caps on what the control node reads from machines it does not wholly trust: hypervisors, and the
 * guests behind them (a compromised member writes into its guest agent's answers, into what SSH
 * commands print on it, into the bucket its backups go to). Without them one such machine could make
 * the control node hold gigabytes and fail the run for every cluster member. Each cap is set well
 * above what legitimate use reads, and an error that hits one names it, so that an operator who meets
 * a legitimate case knows which number to question.
 */

export const KiB = 1024;
export const MiB = 1024 * KiB;
export const GiB = 1024 * MiB;
export const TiB = 1024 * GiB;

export interface Cap {
  /** The cap's name in errors: `ssh-stdout`. */
  name: string;
  bytes: number;
}

/**
 * What one SSH command prints on stdout. The largest legitimate outputs are virsh batches probing every
 * domain of a hypervisor (domain XML is ~10 KiB a domain) and guest files read back for a diff (a few
 * KiB each): 16 MiB is hundreds of times those.
 */
export const SSH_STDOUT_CAP: Cap = { name: 'ssh-stdout', bytes: 16 * MiB };

/** What one SSH command prints on stderr: only its first lines are ever shown, 1 MiB is plenty. */
export const SSH_STDERR_CAP: Cap = { name: 'ssh-stderr', bytes: 1 * MiB };

/**
 * One answer of the interactive virsh session. The largest a genuine answer can be is a guest-exec-status
 * carrying the most output qemu-ga captures (16 MiB, base64: ~21.4 MiB); the probes' scripts print a
 * few KiB. 32 MiB stays above anything a real agent sends.
 */
export const VIRSH_ANSWER_CAP: Cap = { name: 'virsh-answer', bytes: 32 * MiB };

/**
 * The cloud-init seed image, padded to the capacity the hypervisor reports for its volume. A seed ISO
 * is a few hundred KiB; the volume only ever grows to the largest ISO written to it.
 */
export const SEED_IMAGE_CAP: Cap = { name: 'seed-image', bytes: 64 * MiB };

/** A backup's .key object: 72 bytes (a nonce, a 32-byte data key, a tag). */
export const S3_KEY_OBJECT_CAP: Cap = { name: 's3-key-object', bytes: 4 * KiB };

/** A backup's .manifest object: nine short lines (backup/manifest.ts). */
export const S3_MANIFEST_OBJECT_CAP: Cap = { name: 's3-manifest-object', bytes: 4 * KiB };

/**
 * etcd's documented maximum backend quota (the inventory's etcd.space_quota
 * cannot exceed it): the largest a database, so a snapshot, can be.
 */
export const ETCD_MAX_QUOTA_BYTES = 8 * GiB;

/** A cap's size: 16 MiB, 4 KiB; one that is not a whole number of units exactly, with its rounding: "33555784 bytes (about 32 MiB)". */
export function formatCap(bytes: number): string {
  const units: [number, string][] = [
    [GiB, 'GiB'],
    [MiB, 'MiB'],
    [KiB, 'KiB'],
  ];
  const [size, unit] = units.find(([size]) => bytes >= size) ?? [1, 'bytes'];
  if (bytes % size === 0) return `${bytes / size} ${unit}`;
  return `${bytes} bytes (about ${Number((bytes / size).toFixed(2))} ${unit})`;
}

/** A command as errors name it: its line, cut short (a script passed to `sh -c` can run to pages). */
export function commandInBrief(argv: readonly string[], max = 80): string {
  const line = commandLine(argv);
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

/** A read went past its cap: the message says what was read, the cap's size and its name. */
export class CapExceededError extends Error {
  constructor(
    /** What was read, where from: "hypervisor lab: ssh exec `virsh list`: stdout". */
    readonly what: string,
    readonly cap: Cap,
    hint?: string,
  ) {
    super(`${what} exceeded ${formatCap(cap.bytes)} (cap ${cap.name})${hint ? `: ${hint}` : ''}`);
    this.name = 'CapExceededError';
  }
}

/** Chunks from one source, kept while their total stays within the cap. */
export class CappedChunks {
  readonly #chunks: Buffer[] = [];
  #bytes = 0;

  constructor(
    readonly what: string,
    readonly cap: Cap,
  ) {}

  /** Keeps the chunk, or throws once the total would pass the cap (and keeps nothing of it). */
  push(chunk: Buffer): void {
    if (this.#bytes + chunk.length > this.cap.bytes) throw new CapExceededError(this.what, this.cap);
    this.#bytes += chunk.length;
    this.#chunks.push(chunk);
  }

  toBuffer(): Buffer {
    return Buffer.concat(this.#chunks, this.#bytes);
  }
}

/** The source's pieces as they come, failing once their total passes the cap: for streams too large to hold. */
export async function* capStream(source: AsyncIterable<Uint8Array>, what: string, cap: Cap): AsyncGenerator<Uint8Array> {
  let bytes = 0;
  for await (const piece of source) {
    bytes += piece.byteLength;
    if (bytes > cap.bytes) throw new CapExceededError(what, cap);
    yield piece;
  }
}
