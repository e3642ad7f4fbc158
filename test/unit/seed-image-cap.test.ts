import test from 'ava';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SEED_IMAGE_CAP, TiB } from '../../tasks/core/limits.ts';
import { seedDigest, seedImageSize } from '../../tasks/libvirt/cloud-init-iso.ts';
import type { RenderedFile } from '../../tasks/render/member.ts';

/** The seed image is built in memory at the size the hypervisor reports for its volume: that size is capped. */

const files: RenderedFile[] = ['user-data', 'meta-data', 'network-config'].map((name) => ({
  name,
  content: `${name}\n`,
  display: `${name}\n`,
  containsSecrets: false,
}));

test('a seed volume the hypervisor says is larger than the cap is refused, naming the cap, before the padded image is allocated', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-seed-cap-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const memo = join(dir, 'etcd-1.json');
  t.is(seedImageSize(300 * 1024, SEED_IMAGE_CAP.bytes), SEED_IMAGE_CAP.bytes, 'up to the cap, padded as before');
  for (const capacity of [SEED_IMAGE_CAP.bytes + 1, TiB]) {
    await t.throwsAsync(seedDigest(memo, files, capacity), {
      message: `the cloud-init seed image for a volume of ${capacity} bytes (its capacity, as the hypervisor reports it) exceeded 64 MiB (cap seed-image): a seed ISO is a few hundred KiB and its volume is created at the size of the ISO: check that volume`,
    });
  }
});
