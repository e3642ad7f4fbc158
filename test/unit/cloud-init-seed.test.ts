import test from 'ava';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { seedDigest, seedImage, seedImageSize } from '../../tasks/libvirt/cloud-init-iso.ts';
import type { RenderedFile } from '../../tasks/render/member.ts';

/** The seed image: the ISO padded to its volume's size, so a smaller ISO can be written over a larger volume in place. */

const iso = (bytes: Buffer) => ({ bytes, sha256: createHash('sha256').update(bytes).digest('hex') });
const sha = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

test('the image is the ISO, then zeros up to the volume; never cut below the ISO', (t) => {
  const seed = iso(Buffer.from('ISO-CONTENT'));
  t.is(seedImageSize(11, 0), 11, 'no volume yet: the ISO as it is');
  t.is(seedImageSize(11, 16), 16, 'a larger volume: padded');
  t.is(seedImageSize(11, 8), 11, 'a smaller volume: grown to the ISO');
  t.deepEqual(seedImage(seed, 16), Buffer.concat([Buffer.from('ISO-CONTENT'), Buffer.alloc(5)]));
  t.is(seedImage(seed, 11), seed.bytes);
});

test("the digest comes from the memo when the files are unchanged: the ISO's own for its size, the image's for the size it was written at", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-seed-memo-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const files: RenderedFile[] = ['user-data', 'meta-data', 'network-config'].map((name) => ({
    name,
    content: `${name}\n`,
    display: `${name}\n`,
    containsSecrets: false,
  }));
  const memo = join(dir, 'etcd-1.json');
  const inputs = createHash('sha256')
    .update(JSON.stringify(files.map((file) => [file.name, file.content])))
    .digest('hex');
  const padded = Buffer.alloc(4096, 0);
  writeFileSync(memo, JSON.stringify({ inputs, sha256: 'a'.repeat(64), size: 1024, image: { size: 4096, sha256: sha(padded) } }));
  t.deepEqual(await seedDigest(memo, files, 0), { sha256: 'a'.repeat(64), size: 1024, imageSize: 1024 });
  t.deepEqual(await seedDigest(memo, files, 1024), { sha256: 'a'.repeat(64), size: 1024, imageSize: 1024 });
  t.deepEqual(await seedDigest(memo, files, 4096), { sha256: sha(padded), size: 1024, imageSize: 4096 });
});
