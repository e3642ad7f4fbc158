import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream, existsSync, renameSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { ensurePrivateDir, PUBLIC_FILE_MODE, readIfExists, writeFileAtomic } from '../core/files.ts';
import { releaseTag, type EtcdVersion } from './version.ts';

/**
 * etcd's release tarballs on the control node: downloaded once per version into the state directory,
 * verified against the release's SHA256SUMS (or a digest the inventory pins, which wins), and checked
 * again whenever the file is not the one verified (its identity: device, inode, size, modification and
 * change times, as git's index tells a file unchanged; a write changes the change time, which no one can
 * set), so a member only ever receives the bits the release published, and a run with a kept, unchanged
 * archive reads none of its bytes. The members never need the internet for etcd: the tool pushes the
 * archive to them.
 */

/** etcd's GitHub releases; a mirror keeps the same layout (`<base>/vX.Y.Z/<archive>`, `<base>/vX.Y.Z/SHA256SUMS`). */
export const ETCD_RELEASES = 'https://github.com/etcd-io/etcd/releases/download';

export interface ReleaseSource {
  /** `etcd.release_url`: the directory that holds one folder per release tag. */
  baseUrl: string;
  version: EtcdVersion;
  /** `etcd.sha256`: the archive's digest as the operator pinned it; the release's SHA256SUMS is then not asked. */
  pinnedSha256?: string;
}

export interface Release {
  version: EtcdVersion;
  /** `etcd-v3.5.16-linux-amd64`: the archive's top directory, and its name without `.tar.gz`. */
  name: string;
  archivePath: string;
  sha256: string;
  /** Where the digest came from, for the run's output. */
  verifiedBy: 'pinned digest' | 'SHA256SUMS';
}

export class ReleaseError extends Error {}

const DOWNLOAD_TIMEOUT_MS = 300_000;

export function releaseNames(source: ReleaseSource) {
  const tag = releaseTag(source.version);
  const name = `etcd-${tag}-linux-amd64`;
  const folder = `${source.baseUrl.replace(/\/+$/, '')}/${tag}`;
  return { tag, name, archive: `${name}.tar.gz`, archiveUrl: `${folder}/${name}.tar.gz`, sumsUrl: `${folder}/SHA256SUMS` };
}

/** The digest SHA256SUMS gives `file` (`<hex>  <file>` lines, as sha256sum writes them). */
export function digestListed(sums: string, file: string): string | undefined {
  for (const line of sums.split('\n')) {
    const match = /^([0-9a-f]{64})\s+\*?(\S+)$/i.exec(line.trim());
    if (match && match[2] === file) return match[1]!.toLowerCase();
  }
  return undefined;
}

async function get(url: string): Promise<Response> {
  let response: Response;
  try {
    response = await fetch(url, { signal: AbortSignal.timeout(DOWNLOAD_TIMEOUT_MS), redirect: 'follow' });
  } catch (error) {
    throw new ReleaseError(
      `cannot download ${url}: ${(error as Error).message} (check etcd.release_url, and that this machine reaches it)`,
    );
  }
  if (!response.ok) {
    throw new ReleaseError(
      `cannot download ${url}: HTTP ${response.status} (check etcd.version and ` +
        `etcd.release_url: a mirror keeps etcd's layout <base>/vX.Y.Z/<archive>)`,
    );
  }
  return response;
}

/** Reads a whole file for its digest: what a run with a kept, unchanged archive must not do. */
export type FileHasher = (path: string) => Promise<string>;

async function sha256Of(path: string): Promise<string> {
  const hash = createHash('sha256');
  await pipeline(createReadStream(path), hash);
  return hash.digest('hex');
}

/** Downloads to a temporary name, hashing on the way; the caller renames it once the digest is right. */
async function download(url: string, path: string): Promise<string> {
  const response = await get(url);
  if (!response.body) throw new ReleaseError(`cannot download ${url}: an empty answer`);
  const hash = createHash('sha256');
  const hashing = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      hash.update(chunk);
      done(null, chunk);
    },
  });
  await pipeline(
    Readable.fromWeb(response.body as WebReadableStream<Uint8Array>),
    hashing,
    createWriteStream(path, { mode: PUBLIC_FILE_MODE }),
  );
  return hash.digest('hex');
}

/** The digest the archive must have, and who says so; the release's SHA256SUMS is kept beside it for later checks. */
async function expectedDigest(source: ReleaseSource, folder: string): Promise<{ sha256: string; verifiedBy: Release['verifiedBy'] }> {
  if (source.pinnedSha256) return { sha256: source.pinnedSha256.toLowerCase(), verifiedBy: 'pinned digest' };
  const names = releaseNames(source);
  const kept = join(folder, 'SHA256SUMS');
  let sums = readIfExists(kept);
  if (sums === undefined || digestListed(sums, names.archive) === undefined) {
    sums = await (await get(names.sumsUrl)).text();
  }
  const sha256 = digestListed(sums, names.archive);
  if (!sha256)
    throw new ReleaseError(`${names.sumsUrl} lists no digest for ${names.archive}: not a release of etcd's layout, or a partial mirror`);
  writeFileAtomic(kept, sums, PUBLIC_FILE_MODE);
  return { sha256, verifiedBy: 'SHA256SUMS' };
}

/** A file's identity: changed by any write to it, or any replacement of it. */
function identityOf(path: string): string {
  const stat = statSync(path, { bigint: true });
  return [stat.dev, stat.ino, stat.size, stat.mtimeNs, stat.ctimeNs].join(':');
}

/** Beside the archive: the digest it had when verified, and the file's identity then. */
const verifiedRecordOf = (archivePath: string) => `${archivePath}.verified`;

function verifiedUnchanged(archivePath: string, sha256: string): boolean {
  try {
    const record = JSON.parse(readIfExists(verifiedRecordOf(archivePath)) ?? '{}') as { sha256?: unknown; identity?: unknown };
    return record.sha256 === sha256 && record.identity === identityOf(archivePath);
  } catch {
    return false;
  }
}

const rememberVerified = (archivePath: string, sha256: string) =>
  writeFileAtomic(verifiedRecordOf(archivePath), `${JSON.stringify({ sha256, identity: identityOf(archivePath) })}\n`, PUBLIC_FILE_MODE);

/**
 * The release's archive in `<directory>/<tag>/`, downloaded if it is not there yet, and verified
 * either way: a kept archive is hashed again only when it is not the file verified before, one whose
 * digest no longer matches is downloaded again; a download whose digest does not match is deleted and
 * refused. `hashFile`: how a kept archive is read for its digest (the tests count it).
 */
export async function obtainRelease(source: ReleaseSource, directory: string, hashFile: FileHasher = sha256Of): Promise<Release> {
  const names = releaseNames(source);
  const folder = join(directory, names.tag);
  ensurePrivateDir(folder);
  const expected = await expectedDigest(source, folder);
  const archivePath = join(folder, names.archive);
  const release: Release = { version: source.version, name: names.name, archivePath, ...expected };
  if (existsSync(archivePath)) {
    if (verifiedUnchanged(archivePath, expected.sha256)) return release;
    if ((await hashFile(archivePath)) === expected.sha256) {
      rememberVerified(archivePath, expected.sha256);
      return release;
    }
  }
  const partial = `${archivePath}.partial-${process.pid}`;
  try {
    const got = await download(names.archiveUrl, partial);
    if (got !== expected.sha256) {
      throw new ReleaseError(
        `${names.archiveUrl} has digest ${got}, but its ${expected.verifiedBy} says ${expected.sha256}: ` +
          `not installed (a damaged download or a changed release; check etcd.sha256 and the mirror)`,
      );
    }
    renameSync(partial, archivePath);
    // After the rename, which changes the file's change time.
    rememberVerified(archivePath, expected.sha256);
  } finally {
    rmSync(partial, { force: true });
  }
  return release;
}
