import test from 'ava';
import { mkdtempSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { InputError } from '../../tasks/core/errors.ts';
import { Secret } from '../../tasks/core/secret.ts';
import { isSealed, StateCipher } from '../../tasks/pki/state-encryption.ts';
import { PkiStore } from '../../tasks/pki/store.ts';

/** Private keys at rest: sealed and opened again, bound to their file, refused with a wrong passphrase. */

const created = await StateCipher.create(new Secret('correct horse battery staple'));
const KEY = '-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n';

test('a sealed key opens with the same passphrase, and only under its own file name', async (t) => {
  const sealed = created.cipher.seal(KEY, 'pki/ca.key');
  t.true(isSealed(sealed));
  t.false(sealed.includes('PRIVATE KEY'));
  t.not(created.cipher.seal(KEY, 'pki/ca.key'), sealed, 'a fresh nonce every time');
  const again = await StateCipher.unlock(created.record, new Secret('correct horse battery staple'), '/state');
  t.is(again.open(sealed, 'pki/ca.key'), KEY);
  t.throws(() => again.open(sealed, 'pki/clients/root.key'), { message: /pki\/clients\/root.key does not open with this state directory's key/ });
  const tampered = sealed.replace(/.(=*\n)$/, (end) => (end.startsWith('A') ? 'B' : 'A') + end.slice(1));
  t.throws(() => again.open(tampered, 'pki/ca.key'));
});

test('a wrong passphrase is bad input, found from the record alone', async (t) => {
  await t.throwsAsync(StateCipher.unlock(created.record, new Secret('wrong'), '/state'), { instanceOf: InputError, message: 'wrong passphrase for the state directory /state; nothing was read or changed' });
  await t.throwsAsync(StateCipher.unlock('{"version": 9}', new Secret('x'), '/state'), { instanceOf: InputError, message: /not a state encryption record/ });
  const record = JSON.parse(created.record) as { kdf: { name: string; N: number; r: number; p: number } };
  t.deepEqual([record.kdf.name, record.kdf.N, record.kdf.r, record.kdf.p], ['scrypt', 2 ** 17, 8, 1]);
});

test('a store with a cipher writes keys sealed, reads them opened, finds keys left plain, and converts either way', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-sealed-'));
  const sealedStore = new PkiStore(dir, created.cipher);
  sealedStore.write('member/etcd-1', { public: 'CERT\n', privateKey: KEY });
  t.true(isSealed(readFileSync(join(dir, 'pki/members/etcd-1.key'), 'utf8')));
  t.is(readFileSync(join(dir, 'pki/members/etcd-1.crt'), 'utf8'), 'CERT\n', 'certificates stay plain');
  t.deepEqual(sealedStore.read('member/etcd-1'), { public: 'CERT\n', privateKey: KEY });

  // A plain store cannot read a sealed key, and says what is missing.
  t.throws(() => new PkiStore(dir).read('member/etcd-1'), { message: /is encrypted, but the state directory has no state-encryption.json/ });

  // A key written plain (a stopped conversion) is read as it is and found by plainKeyFiles.
  new PkiStore(dir).write('ssh/admin', { public: 'ssh-ed25519 AAAA\n', privateKey: KEY });
  t.is(sealedStore.read('ssh/admin').privateKey, KEY);
  t.deepEqual(sealedStore.plainKeyFiles(), ['ssh/admin.key']);
  t.deepEqual(sealedStore.convertKeys('sealed'), ['ssh/admin.key']);
  t.deepEqual(sealedStore.plainKeyFiles(), []);
  t.deepEqual(sealedStore.convertKeys('plain').sort(), ['pki/members/etcd-1.key', 'ssh/admin.key']);
  t.is(readFileSync(join(dir, 'ssh/admin.key'), 'utf8'), KEY);

  // A sealed key moved to another member's name does not open.
  sealedStore.convertKeys('sealed');
  renameSync(join(dir, 'pki/members/etcd-1.key'), join(dir, 'pki/members/etcd-2.key'));
  writeFileSync(join(dir, 'pki/members/etcd-2.crt'), 'CERT\n');
  t.throws(() => sealedStore.read('member/etcd-2'), { message: /pki\/members\/etcd-2.key does not open/ });
});
