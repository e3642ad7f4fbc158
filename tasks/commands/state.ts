#!/usr/bin/env -S npx tsx
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { runTool } from '../cli/tool.ts';
import { EXIT, InputError } from '../core/errors.ts';
import { RunLock } from '../core/lock.ts';
import { PASSPHRASE_SOURCES, readPassphrase } from '../core/passphrase.ts';
import { loadInventory } from '../inventory/load.ts';
import { ENCRYPTION_RECORD, StateCipher, unlockStateDirectory, writeEncryptionRecord } from '../pki/state-encryption.ts';
import { PkiStore } from '../pki/store.ts';

const HELP = `Usage: etcd-kvm state -i INVENTORY (--encrypt | --decrypt)

Converts the state directory's private keys (CA, intermediate, members, clients, SSH keys) between
plain 0600 files and files sealed with a passphrase (scrypt + XChaCha20-Poly1305). Encrypted, the
directory can be committed or copied: every later command (deploy, status, backup, maintain,
client) asks for the passphrase and decrypts in memory only. Certificates stay plain.

The passphrase comes from ${PASSPHRASE_SOURCES}; never from a flag.

  -i, --inventory FILE   the inventory (required)
      --encrypt          seal every private key (choosing the passphrase if the directory is plain)
      --decrypt          write every private key plain again and forget the passphrase
  -h, --help             this text

Either is safe to run again: a conversion that was stopped is finished. Takes the run lock.
Exit: 0 done, 1 another run holds the state directory, 2 bad input (wrong or missing passphrase).`;

process.exitCode = await runTool({
  help: HELP,
  options: { encrypt: { type: 'boolean', default: false }, decrypt: { type: 'boolean', default: false } },
  failure: 'state conversion failed',
  async run(values, path) {
    if (values.encrypt === values.decrypt) throw new InputError(`give exactly one of --encrypt or --decrypt\n\n${HELP}`);
    const inventory = loadInventory(path);
    const dir = inventory.stateDir;
    const lock = RunLock.acquire(dir);
    try {
      let cipher = await unlockStateDirectory(dir);
      if (values.decrypt) {
        if (!cipher) {
          console.log(`${dir} is not encrypted: nothing to do`);
          return EXIT.ok;
        }
        const converted = new PkiStore(dir, cipher).convertKeys('plain');
        // The record goes last: until then a stopped conversion is resumed with the same passphrase.
        rmSync(join(dir, ENCRYPTION_RECORD));
        console.log(`decrypted ${converted.length} private key file(s) in ${dir}; ${ENCRYPTION_RECORD} removed`);
        return EXIT.ok;
      }
      if (!cipher) {
        const passphrase = await readPassphrase(`new passphrase for ${dir}`, { confirm: true });
        if (!passphrase) throw new InputError(`give the new passphrase in ${PASSPHRASE_SOURCES}`);
        const created = await StateCipher.create(passphrase);
        // The record first: from here on every command asks for the passphrase, and reads keys sealed or not.
        writeEncryptionRecord(dir, created.record);
        cipher = created.cipher;
      }
      const converted = new PkiStore(dir, cipher).convertKeys('sealed');
      console.log(`encrypted ${converted.length} private key file(s) in ${dir}`);
      return EXIT.ok;
    } finally {
      lock.release();
    }
  },
});
