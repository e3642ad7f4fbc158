import test from 'ava';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { InputError } from '../../tasks/core/errors.ts';
import { PASSPHRASE_ENV, PASSPHRASE_FILE_ENV, readPassphrase } from '../../tasks/core/passphrase.ts';

/** The passphrase's sources: gone from the environment once read (children never see it), and a file others can read refused. */

// Tests here share this worker's environment and the module's memory: one after the other, each
// starting with neither variable set.
const serial = test.serial;
test.beforeEach(() => {
  delete process.env[PASSPHRASE_ENV];
  delete process.env[PASSPHRASE_FILE_ENV];
});

const childEnvironment = (): string => spawnSync('env', { encoding: 'utf8' }).stdout;

function passphraseFile(text: string, mode: number): string {
  const path = join(mkdtempSync(join(tmpdir(), 'etcd-kvm-passphrase-')), 'passphrase');
  writeFileSync(path, text);
  chmodSync(path, mode);
  return path;
}

serial(
  'a passphrase from the environment leaves it once read: a child process does not inherit it; later reads get it from memory',
  async (t) => {
    process.env[PASSPHRASE_ENV] = 'env-pass-7f3a';
    t.true(childEnvironment().includes('env-pass-7f3a'), 'a child inherits it before it is read');
    t.is((await readPassphrase('passphrase'))?.reveal(), 'env-pass-7f3a');
    t.false(PASSPHRASE_ENV in process.env);
    t.false(childEnvironment().includes('env-pass-7f3a'));
    t.is((await readPassphrase('passphrase'))?.reveal(), 'env-pass-7f3a', 'still known to this process');
  },
);

serial(
  'a passphrase file named by the environment: the variable leaves it once read; a newline at its end is not part of it',
  async (t) => {
    const path = passphraseFile('file-pass-91c2\n', 0o600);
    process.env[PASSPHRASE_FILE_ENV] = path;
    t.is((await readPassphrase('passphrase'))?.reveal(), 'file-pass-91c2');
    t.false(PASSPHRASE_FILE_ENV in process.env);
    t.false(childEnvironment().includes(path));
  },
);

const octal = (mode: number) => mode.toString(8).padStart(4, '0');

for (const mode of [0o600, 0o400]) {
  serial(`a passphrase file with mode ${octal(mode)} (its owner's alone) is read`, async (t) => {
    process.env[PASSPHRASE_FILE_ENV] = passphraseFile('mode-pass-4d1e\n', mode);
    t.is((await readPassphrase('passphrase'))?.reveal(), 'mode-pass-4d1e');
  });
}

for (const mode of [0o640, 0o644, 0o604, 0o660, 0o606, 0o620]) {
  serial(`a passphrase file with mode ${octal(mode)} (open to group or others) is refused, with the chmod that fixes it`, async (t) => {
    const path = passphraseFile('mode-pass-4d1e\n', mode);
    process.env[PASSPHRASE_FILE_ENV] = path;
    const error = await t.throwsAsync(readPassphrase('passphrase'), { instanceOf: InputError });
    t.is(
      error!.message,
      `${PASSPHRASE_FILE_ENV}: ${path} is open to group or others (mode ${octal(mode)}); make it private: chmod 600 ${path}`,
    );
  });
}
