import { createHash } from 'node:crypto';
import { SnapshotSource } from '../../tasks/backup/source.ts';
import { loadInventory } from '../../tasks/inventory/load.ts';

/**
 * The control node's side of a restore, alone: choose the newest snapshot, download and decrypt it
 * into the private file, check it, and read it back as the restore step streams it to each member
 * (here into a hash instead of an SSH channel). Prints the bytes and their SHA-256.
 *   node --import tsx scripts/bench/restore-fetch.ts INVENTORY
 */
const inventory = loadInventory(process.argv[2] ?? '');
const source = new SnapshotSource(inventory.restore);
try {
  const hash = createHash('sha256');
  let bytes = 0;
  for await (const piece of await source.open()) {
    hash.update(piece as Buffer);
    bytes += (piece as Buffer).length;
  }
  console.log(`restore-fetch: ${await source.choose()}: ${bytes} bytes, sha256 ${hash.digest('hex')}`);
} finally {
  await source.close();
}
