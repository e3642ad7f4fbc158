import { mkdtempSync, rmSync, utimesSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFile } from 'node:child_process';
import { sha256 } from '../core/digest.ts';
import { promisify } from 'node:util';
import { PRIVATE_FILE_MODE, readIfExists, writeFileAtomic } from '../core/files.ts';
import { CapExceededError, SEED_IMAGE_CAP } from '../core/limits.ts';
import type { RenderedFile } from '../render/member.ts';

const execFileAsync = promisify(execFile);

/** The files cloud-init's NoCloud datasource reads from a volume labelled "cidata". */
export const CLOUD_INIT_FILES = ['user-data', 'meta-data', 'network-config'] as const;

export interface CloudInitIso {
  bytes: Buffer;
  sha256: string;
}

/**
 * Builds the NoCloud seed ISO on the control node with xorriso (Rock Ridge + Joliet, so the names are
 * kept). All dates are pinned, so the same rendered files give the same bytes and a re-run can compare
 * digests instead of uploading. The files hold private keys: the scratch directory is 0700 and removed.
 */
export async function buildCloudInitIso(rendered: readonly RenderedFile[]): Promise<CloudInitIso> {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-seed-'));
  try {
    const root = join(dir, 'seed');
    for (const name of CLOUD_INIT_FILES) {
      const file = rendered.find((candidate) => candidate.name === name);
      if (!file) throw new Error(`cloud-init ISO: ${name} was not rendered`);
      writeFileAtomic(join(root, name), file.content, PRIVATE_FILE_MODE);
      utimesSync(join(root, name), 0, 0);
    }
    utimesSync(root, 0, 0);
    const { stdout: bytes } = await execFileAsync(
      'xorriso',
      ['-as', 'mkisofs', '-quiet', '-output', '-', '-volid', 'cidata', '-joliet', '-rock', root],
      {
        encoding: 'buffer',
        // The ISO goes into the seed image: the image's cap bounds it too.
        maxBuffer: SEED_IMAGE_CAP.bytes,
        env: { ...process.env, SOURCE_DATE_EPOCH: '0' },
      },
    );
    return { bytes, sha256: sha256(bytes) };
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') {
      throw new Error('cloud-init ISO: xorriso is not installed on the control node (apt-get install xorriso)');
    }
    throw error;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The seed as its volume holds it: the ISO, then zeros up to the volume's size. The seed is rewritten
 * in place (never deleted and created again), and libvirt cannot shrink a volume below its allocation,
 * so a smaller ISO is padded; ISO 9660 records its own size, and the zeros after it are never read.
 * The image is built in memory, and the volume's size is what the hypervisor says: capped, so that a
 * wrong capacity (or a lying hypervisor) cannot make the control node allocate gigabytes.
 */
export function seedImageSize(isoBytes: number, capacityBytes: number): number {
  const size = Math.max(isoBytes, capacityBytes);
  if (size > SEED_IMAGE_CAP.bytes) {
    throw new CapExceededError(
      `the cloud-init seed image for a volume of ${capacityBytes} bytes (its capacity, as the hypervisor reports it)`,
      SEED_IMAGE_CAP,
      'a seed ISO is a few hundred KiB and its volume is created at the size of the ISO: check that volume',
    );
  }
  return size;
}

export function seedImage(iso: CloudInitIso, size: number): Buffer {
  return size > iso.bytes.length ? Buffer.concat([iso.bytes, Buffer.alloc(size - iso.bytes.length)]) : iso.bytes;
}

export interface SeedDigest {
  /** The digest of the seed image (the ISO padded to `imageSize`). */
  sha256: string;
  /** The ISO's own size. */
  size: number;
  imageSize: number;
}

interface SeedMemo {
  inputs: string;
  /** The ISO's digest and size, and the image's for the size it was last written at. */
  sha256: string;
  size: number;
  image?: { size: number; sha256: string };
}

/**
 * The digest the seed image of these files has on a volume of `capacityBytes` (0: none yet), without
 * building the ISO when the files are unchanged: building costs a process per member (~100 ms each
 * under load), and a run where nothing changed should not pay that. A memo of a pure function (files
 * -> bytes), kept in the state directory: read here (a check never writes), written by
 * rememberSeedDigest when the image is built to be uploaded.
 */
export async function seedDigest(cacheFile: string, rendered: readonly RenderedFile[], capacityBytes: number): Promise<SeedDigest> {
  const cached = readIfExists(cacheFile);
  if (cached) {
    const memo = JSON.parse(cached) as SeedMemo;
    if (memo.inputs === seedInputs(rendered)) {
      const imageSize = seedImageSize(memo.size, capacityBytes);
      if (imageSize === memo.size) return { sha256: memo.sha256, size: memo.size, imageSize };
      if (memo.image?.size === imageSize) return { sha256: memo.image.sha256, size: memo.size, imageSize };
    }
  }
  const iso = await seedIso(rendered);
  const imageSize = seedImageSize(iso.bytes.length, capacityBytes);
  return { sha256: sha256(seedImage(iso, imageSize)), size: iso.bytes.length, imageSize };
}

/** The ISOs built by this process, by their inputs: a new seed is built once, for the check's digest and the upload. */
const builtIsos = new Map<string, Promise<CloudInitIso>>();

/** The seed ISO of these files, built once per process (xorriso costs ~0.1-0.2 s of the control node's CPU per member). */
export function seedIso(rendered: readonly RenderedFile[]): Promise<CloudInitIso> {
  const inputs = seedInputs(rendered);
  let iso = builtIsos.get(inputs);
  if (!iso) {
    iso = buildCloudInitIso(rendered);
    builtIsos.set(inputs, iso);
    // A failed build (xorriso missing) is not remembered: the next ask fails with the same reason, or succeeds.
    iso.catch(() => builtIsos.delete(inputs));
  }
  return iso;
}

export function rememberSeedDigest(cacheFile: string, rendered: readonly RenderedFile[], iso: CloudInitIso, image: Buffer): void {
  const memo: SeedMemo = {
    inputs: seedInputs(rendered),
    sha256: iso.sha256,
    size: iso.bytes.length,
    image: { size: image.length, sha256: sha256(image) },
  };
  writeFileAtomic(cacheFile, `${JSON.stringify(memo)}\n`, PRIVATE_FILE_MODE);
}

const seedInputs = (rendered: readonly RenderedFile[]) =>
  sha256(JSON.stringify(CLOUD_INIT_FILES.map((name) => [name, rendered.find((file) => file.name === name)?.content ?? ''])));
