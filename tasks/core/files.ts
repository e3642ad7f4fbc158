import { chmodSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';

/** Private state (keys, state directories): owner-only. */
export const PRIVATE_DIR_MODE = 0o700;
export const PRIVATE_FILE_MODE = 0o600;

const UNREADABLE: Record<string, string> = {
  ENOENT: 'no such file',
  EACCES: 'permission denied',
  EISDIR: 'is a directory, not a file',
  ENOTDIR: 'a part of the path is not a directory',
};

/** Why a file could not be read, in words for an operator (its errno code alone says little). */
export function unreadableReason(error: unknown): string {
  const code = (error as NodeJS.ErrnoException).code ?? '';
  return UNREADABLE[code] ?? (code || String(error));
}
export const PUBLIC_FILE_MODE = 0o644;

export function readIfExists(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

export function ensurePrivateDir(path: string): void {
  mkdirSync(path, { recursive: true, mode: PRIVATE_DIR_MODE });
  chmodSync(path, PRIVATE_DIR_MODE);
}

/**
 * Writes via a temporary file and rename, so a killed run leaves either the old file or the new one,
 * never half of one; the mode is set before the content lands.
 */
export function writeFileAtomic(path: string, content: string, mode: number): void {
  ensurePrivateDir(dirname(path));
  const temporary = `${path}.tmp-${process.pid}`;
  writeFileSync(temporary, content, { mode });
  chmodSync(temporary, mode);
  renameSync(temporary, path);
}
