import { join } from 'node:path';
import { PRIVATE_FILE_MODE, readIfExists, writeFileAtomic } from '../core/files.ts';

/**
 * The digests of guest files a probe has read, each under the file's identity as stat tells it
 * (inode, size, modification and change times to the nanosecond), so a run reads again only the files
 * whose identity changed. Any write, chmod or chown sets a file's change time (ctime), and nothing in
 * user space can set it back: the rule git's index and rsync rely on. Like git's "racy" entries, a
 * file changed less than RACY_NS before it was read is not remembered: the kernel stamps times from a
 * coarse clock, so a second write in the same tick could keep the identity.
 *
 * Kept in the state directory (guest-files.json, 0600) by runs that may write, not by dry-runs; a state
 * directory may be committed, so the digests of secrets (keys) are never kept: those are read on every
 * run. A lost or foreign file only costs the next run its reads.
 */

export const RACY_NS = 2_000_000_000n;
const FILE = 'guest-files.json';

type Remembered = Record<string, Record<string, { identity: string; digest: string }>>;

export class DigestMemory {
  #changed = false;

  private constructor(
    readonly path: string | undefined,
    readonly entries: Remembered,
  ) {}

  static load(stateDir: string): DigestMemory {
    const path = join(stateDir, FILE);
    let parsed: unknown;
    try {
      parsed = JSON.parse(readIfExists(path) ?? '{}');
    } catch {
      // Unreadable: forgotten, every file is read again.
    }
    return new DigestMemory(path, wellFormed(parsed));
  }

  /** Nothing remembered and nothing kept (tests, benches). */
  static empty(): DigestMemory {
    return new DigestMemory(undefined, {});
  }

  /** The digest read when the file last had this identity, if it was remembered then. */
  recall(member: string, path: string, identity: string): string | undefined {
    const entry = this.entries[member]?.[path];
    return entry?.identity === identity ? entry.digest : undefined;
  }

  /**
   * Remembers a digest just read, unless the file changed too close to `guestNowNs` (the guest's clock
   * when it was read) to trust its identity; a file no longer remembered is forgotten.
   */
  remember(member: string, path: string, identity: string, changedAtNs: bigint, guestNowNs: bigint, digest: string): void {
    const trusted = guestNowNs - changedAtNs > RACY_NS;
    const known = this.entries[member]?.[path];
    if (trusted && known?.identity === identity && known.digest === digest) return;
    if (!trusted && !known) return;
    const forMember = filesOf(this.entries, member);
    if (trusted) forMember[path] = { identity, digest };
    else delete forMember[path];
    this.#changed = true;
  }

  /**
   * Writes what changed (a run that may write calls it once, at its end); why not, if it could not:
   * a cache, whose loss costs the next run its reads, so it never fails the run.
   */
  save(): string | undefined {
    if (!this.#changed || this.path === undefined) return undefined;
    try {
      writeFileAtomic(this.path, `${JSON.stringify(this.entries)}\n`, PRIVATE_FILE_MODE);
      this.#changed = false;
      return undefined;
    } catch (error) {
      return (
        `could not keep the guests' file digests in ${this.path} ` +
        `(${(error as NodeJS.ErrnoException).code ?? error}): the next run reads every file again`
      );
    }
  }
}

/** A member's entries, made empty the first time. */
function filesOf(entries: Remembered, member: string): Remembered[string] {
  entries[member] ??= {};
  return entries[member];
}

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/** The entries of a parsed file that have the expected shape; anything else is forgotten. */
function wellFormed(parsed: unknown): Remembered {
  const entries: Remembered = {};
  if (!isRecord(parsed)) return entries;
  for (const [member, files] of Object.entries(parsed)) {
    if (!isRecord(files)) continue;
    for (const [path, entry] of Object.entries(files))
      if (isRecord(entry) && typeof entry.identity === 'string' && typeof entry.digest === 'string')
        filesOf(entries, member)[path] = { identity: entry.identity, digest: entry.digest };
  }
  return entries;
}
