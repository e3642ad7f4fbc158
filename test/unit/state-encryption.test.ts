import test from 'ava';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { InputError } from '../../tasks/core/errors.ts';
import { Secret } from '../../tasks/core/secret.ts';
import { isSealed, StateCipher, writeEncryptionRecord } from '../../tasks/pki/state-encryption.ts';
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
  t.throws(() => again.open(sealed, 'pki/clients/root.key'), {
    message: /pki\/clients\/root.key does not open with this state directory's key/,
  });
  const tampered = sealed.replace(/.(=*\n)$/, (end) => (end.startsWith('A') ? 'B' : 'A') + end.slice(1));
  t.throws(() => again.open(tampered, 'pki/ca.key'));
});

test('a wrong passphrase is bad input, found from the record alone', async (t) => {
  await t.throwsAsync(StateCipher.unlock(created.record, new Secret('wrong'), '/state'), {
    instanceOf: InputError,
    message: 'wrong passphrase for the state directory /state; nothing was read or changed',
  });
  await t.throwsAsync(StateCipher.unlock('{"version": 9}', new Secret('x'), '/state'), {
    instanceOf: InputError,
    message: /not a state encryption record/,
  });
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
  t.throws(() => new PkiStore(dir).read('member/etcd-1'), {
    message: /is encrypted, but the state directory has no state-encryption.json/,
  });

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

/** A record with the KDF parameters given and a check value that opens with `passphrase`: what this tool's format says, built here. */
async function recordWith(passphrase: string, kdf: { N: number; r: number; p: number; salt: Buffer }): Promise<string> {
  const { scrypt } = await import('@noble/hashes/scrypt');
  const { xchacha20poly1305 } = await import('@noble/ciphers/chacha');
  const key = scrypt(passphrase, kdf.salt, { N: kdf.N, r: kdf.r, p: kdf.p, dkLen: 32 });
  const nonce = randomBytes(24);
  const sealed = xchacha20poly1305(key, nonce, Buffer.from('passphrase check')).encrypt(Buffer.from('etcd-kvm state directory'));
  const check = `etcd-kvm-sealed:v1:${Buffer.concat([nonce, sealed]).toString('base64')}\n`;
  return JSON.stringify({ version: 1, kdf: { name: 'scrypt', N: kdf.N, r: kdf.r, p: kdf.p, salt: kdf.salt.toString('base64') }, check });
}

test('KDF parameters too weak are refused before anything is read, even when the passphrase opens the record', async (t) => {
  const weak: [what: string, kdf: { N: number; r: number; p: number; salt: Buffer }][] = [
    ['N=2^4', { N: 2 ** 4, r: 8, p: 1, salt: randomBytes(16) }],
    ['N=2^13 (below the floor, whatever p)', { N: 2 ** 13, r: 8, p: 16, salt: randomBytes(16) }],
    ["N·r·p below this tool's own", { N: 2 ** 16, r: 8, p: 1, salt: randomBytes(16) }],
    ['a salt of 4 bytes', { N: 2 ** 17, r: 8, p: 1, salt: randomBytes(4) }],
  ];
  for (const [what, kdf] of weak) {
    const record = await recordWith('weak-pass', kdf);
    await t.throwsAsync(
      StateCipher.unlock(record, new Secret('weak-pass'), '/state'),
      {
        instanceOf: InputError,
        message: /^\/state\/state-encryption\.json: its scrypt parameters are refused \(too weak: .*\); restore the record/,
      },
      what,
    );
  }
});

test('KDF parameters that would hang the run or exhaust memory are refused at once, without deriving', async (t) => {
  const salt = randomBytes(16).toString('base64');
  const absurd: [what: string, kdf: Record<string, unknown>, reason: RegExp][] = [
    ['N=2^21 (2 GiB)', { N: 2 ** 21, r: 8, p: 1 }, /too costly: N=2097152, r=8, p=1 needs 2048 MiB/],
    ['N=2^40', { N: 2 ** 40, r: 8, p: 1 }, /too costly/],
    ['p=2^20', { N: 2 ** 14, r: 8, p: 2 ** 20 }, /too costly/],
    ['p=64 (minutes of work)', { N: 2 ** 17, r: 8, p: 64 }, /too costly: N·r·p = 2\^26\.0/],
    ['r=1000', { N: 2 ** 14, r: 1000, p: 1 }, /too costly/],
    ['N not a power of two', { N: 100_000, r: 8, p: 1 }, /N=100000 is not a power of two/],
    ['p=0', { N: 2 ** 17, r: 8, p: 0 }, /N, r and p must be positive integers/],
    ['r a string', { N: 2 ** 17, r: '8', p: 1 }, /N, r and p must be positive integers/],
    ['N fractional', { N: 131072.5, r: 8, p: 1 }, /N, r and p must be positive integers/],
  ];
  for (const [what, kdf, reason] of absurd) {
    const record = JSON.stringify({ version: 1, kdf: { name: 'scrypt', salt, ...kdf }, check: 'etcd-kvm-sealed:v1:AAAA' });
    // The check value opens with no key: an error other than the bounds' would mean a derivation was tried.
    const error = await t.throwsAsync(StateCipher.unlock(record, new Secret('any'), '/state'), { instanceOf: InputError }, what);
    t.regex(error!.message, /^\/state\/state-encryption\.json: its scrypt parameters are refused \(/, what);
    t.regex(error!.message, reason, what);
  }
});

/** A state directory converted by `tasks/commands/state.ts --encrypt`: the record written, then every key sealed. */
async function encryptedStateDir(passphrase: string): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-sealed-'));
  new PkiStore(dir).write('member/etcd-1', { public: 'CERT\n', privateKey: KEY });
  new PkiStore(dir).write('ssh/admin', { public: 'ssh-ed25519 AAAA\n', privateKey: KEY });
  const fresh = await StateCipher.create(new Secret(passphrase));
  writeEncryptionRecord(dir, fresh.record);
  new PkiStore(dir, fresh.cipher).convertKeys('sealed');
  return dir;
}

const PLANTED = '-----BEGIN PRIVATE KEY-----\nPLANTED\n-----END PRIVATE KEY-----\n';

test.serial(
  'a plain key put into a state directory whose every key is sealed is refused, naming the file and how to seal it',
  async (t) => {
    const dir = await encryptedStateDir('seal-pass');
    writeFileSync(join(dir, 'pki/members/etcd-1.key'), PLANTED, { mode: 0o600 });
    process.env.ETCD_KVM_PASSPHRASE = 'seal-pass';
    const error = await t.throwsAsync(PkiStore.open(dir), { instanceOf: InputError });
    t.is(
      error!.message,
      `${join(dir, 'pki/members/etcd-1.key')}: not encrypted, in a state directory whose every private key is sealed (no conversion under way); refused, as anyone able to write the directory could have put it there`,
    );
    t.deepEqual(error!.problems, [
      'if you put it there, seal it: etcd-kvm state -i <inventory> --encrypt',
      'otherwise restore the sealed file from where the directory came from',
    ]);

    // Put there after the store was opened: refused when read, and never sealed by the pki step.
    const cipher = await StateCipher.unlock(readFileSync(join(dir, 'state-encryption.json'), 'utf8'), new Secret('seal-pass'), dir);
    t.false(cipher.converting);
    const store = new PkiStore(dir, cipher);
    t.throws(() => store.read('member/etcd-1'), { instanceOf: InputError, message: /etcd-1\.key: not encrypted/ });
    t.throws(() => store.plainKeyFiles(), { instanceOf: InputError, message: /etcd-1\.key: not encrypted/ });

    // The operator who put it there seals it deliberately: tasks/commands/state.ts --encrypt converts what is plain.
    t.deepEqual(store.convertKeys('sealed'), ['pki/members/etcd-1.key']);
    t.is(store.read('member/etcd-1').privateKey, PLANTED);
  },
);

test('a conversion under way (stopped) still reads plain keys and is finished; the record then says every key is sealed', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-sealed-'));
  new PkiStore(dir).write('member/etcd-1', { public: 'CERT\n', privateKey: KEY });
  const fresh = await StateCipher.create(new Secret('convert-pass'));
  // Stopped right after the record: no key sealed yet.
  writeEncryptionRecord(dir, fresh.record);
  const during = await StateCipher.unlock(readFileSync(join(dir, 'state-encryption.json'), 'utf8'), new Secret('convert-pass'), dir);
  t.true(during.converting);
  const store = new PkiStore(dir, during);
  t.is(store.read('member/etcd-1').privateKey, KEY);
  t.deepEqual(store.plainKeyFiles(), ['pki/members/etcd-1.key']);
  t.deepEqual(store.convertKeys('sealed'), ['pki/members/etcd-1.key']);
  const after = await StateCipher.unlock(readFileSync(join(dir, 'state-encryption.json'), 'utf8'), new Secret('convert-pass'), dir);
  t.false(after.converting);

  // Decrypting says a conversion is under way before the first key is written plain: a stopped one reads on.
  new PkiStore(dir, after).convertKeys('plain');
  const decrypting = await StateCipher.unlock(readFileSync(join(dir, 'state-encryption.json'), 'utf8'), new Secret('convert-pass'), dir);
  t.true(decrypting.converting);
  t.is(new PkiStore(dir, decrypting).read('member/etcd-1').privateKey, KEY);
});

test("the conversion marker cannot be forged: removed, or taken from another directory's record, it counts as none", async (t) => {
  const mine = await StateCipher.create(new Secret('correct horse battery staple'));
  // Another directory's record, the same passphrase, another salt.
  const other = created;
  const withMarker = (record: string, marker: string | undefined) =>
    JSON.stringify({ ...(JSON.parse(record) as object), converting: marker });
  const markerOf = (record: string) => (JSON.parse(record) as { converting?: string }).converting;
  t.true((await StateCipher.unlock(mine.record, new Secret('correct horse battery staple'), '/state')).converting);
  t.false((await StateCipher.unlock(withMarker(mine.record, undefined), new Secret('correct horse battery staple'), '/state')).converting);
  t.false(
    (await StateCipher.unlock(withMarker(mine.record, markerOf(other.record)), new Secret('correct horse battery staple'), '/state'))
      .converting,
  );
  t.false(
    (
      await StateCipher.unlock(
        withMarker(mine.record, mine.cipher.seal('some private keys may still be plain', 'passphrase check')),
        new Secret('correct horse battery staple'),
        '/state',
      )
    ).converting,
    'sealed under another label',
  );
});
