import test from 'ava';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import { SnapshotFile } from '../../tasks/backup/snapshot-file.ts';

/** A snapshot on the control node's disk: private, checked against etcd's trailing SHA-256, removed. */

async function* piecesOf(bytes: Buffer, size: number): AsyncGenerator<Buffer> {
  for (let offset = 0; offset < bytes.length; offset += size) yield bytes.subarray(offset, offset + size);
}

/** A snapshot as etcd streams one: the database, then its SHA-256. */
const etcdSnapshot = (database: Buffer) => Buffer.concat([database, createHash('sha256').update(database).digest()]);

test('a streamed snapshot lands in a private file, verifies, reads back, and goes with its directory', async (t) => {
  const snapshot = etcdSnapshot(randomBytes(3 * 1024 * 1024 + 17));
  const file = new SnapshotFile('test');
  t.is(await file.write(piecesOf(snapshot, 65_536)), snapshot.length);
  t.is(statSync(file.path).mode & 0o777, 0o600);
  t.is(statSync(dirname(file.path)).mode & 0o777, 0o700);
  t.is(file.size, snapshot.length);
  await t.notThrowsAsync(() => file.verify('the test snapshot'));
  const back: Buffer[] = [];
  for await (const piece of file.read()) back.push(piece as Buffer);
  t.true(Buffer.concat(back).equals(snapshot));
  file.remove();
  t.false(existsSync(dirname(file.path)));
});

test('a damaged or cut snapshot is refused, naming where it came from', async (t) => {
  const snapshot = etcdSnapshot(randomBytes(100_000));
  const damaged = Buffer.from(snapshot);
  damaged[5_000] = damaged[5_000]! ^ 1;
  for (const [what, bytes] of [
    ['damaged', damaged],
    ['cut', snapshot.subarray(0, 90_000)],
    ['tiny', snapshot.subarray(0, 20)],
  ] as const) {
    const file = new SnapshotFile('test');
    await file.write(piecesOf(bytes, 4096));
    await t.throwsAsync(() => file.verify(`the ${what} one`), {
      message: `the ${what} one is not an intact etcd snapshot (its trailing SHA-256 does not match)`,
    });
    file.remove();
  }
});
