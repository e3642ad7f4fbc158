import { closeSync, fstatSync, openSync, readFileSync } from 'node:fs';
import { InputError } from './errors.ts';
import { Secret } from './secret.ts';

/**
 * The passphrase of an encrypted state directory: from the environment, from a file the environment
 * names, or typed on a terminal without echo. Never a flag's value, which `ps` and shell histories show.
 * Once read, both variables leave this process's environment (the passphrase stays in memory), so
 * no program the tool starts (xorriso, ssh, virsh…) inherits them.
 */

export const PASSPHRASE_ENV = 'ETCD_KVM_PASSPHRASE';
export const PASSPHRASE_FILE_ENV = 'ETCD_KVM_PASSPHRASE_FILE';

export const PASSPHRASE_SOURCES = `${PASSPHRASE_ENV}, a file named by ${PASSPHRASE_FILE_ENV}, or a terminal`;

/** Group or other bits: as ssh refuses a private key others can read, the passphrase file is refused. */
const SHARED_BITS = 0o077;

function fromFile(path: string): Secret {
  let text: string;
  let fd: number | undefined;
  try {
    fd = openSync(path, 'r');
    // The mode of the file opened, not of a name that could change between a check and the read.
    const mode = fstatSync(fd).mode & 0o777;
    if (mode & SHARED_BITS) {
      throw new InputError(
        `${PASSPHRASE_FILE_ENV}: ${path} is open to group or others (mode ` +
          `${mode.toString(8).padStart(4, '0')}); make it private: chmod 600 ${path}`,
      );
    }
    text = readFileSync(fd, 'utf8');
  } catch (error) {
    if (error instanceof InputError) throw error;
    throw new InputError(`${PASSPHRASE_FILE_ENV}: cannot read ${path}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`);
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
  // One trailing newline is the editor's, not the passphrase's.
  return new Secret(text.replace(/\r?\n$/, ''));
}

/** The passphrase the environment gave, kept here once its variables are gone. */
let remembered: Secret | undefined;

/**
 * The environment's passphrase (the variable, or the file it names). Both variables are removed
 * once it is read; later calls get it from memory.
 */
function environmentPassphrase(): Secret | undefined {
  const value = process.env[PASSPHRASE_ENV];
  const file = process.env[PASSPHRASE_FILE_ENV];
  if (value !== undefined) remembered = new Secret(value);
  else if (file) remembered = fromFile(file);
  else return remembered;
  delete process.env[PASSPHRASE_ENV];
  delete process.env[PASSPHRASE_FILE_ENV];
  return remembered;
}

/** Reads one line from the terminal with echo off; Ctrl-C or Ctrl-D cancels. */
function prompt(question: string): Promise<Secret> {
  const input = process.stdin;
  return new Promise((resolve, reject) => {
    let typed = '';
    process.stderr.write(`${question}: `);
    input.setRawMode(true);
    input.resume();
    input.setEncoding('utf8');
    const done = (result: () => void) => {
      input.setRawMode(false);
      input.pause();
      input.off('data', onData);
      process.stderr.write('\n');
      result();
    };
    const onData = (chunk: string) => {
      for (const char of chunk) {
        if (char === '\r' || char === '\n') return done(() => resolve(new Secret(typed)));
        if (char === '\u0003' || char === '\u0004') return done(() => reject(new InputError('no passphrase given (cancelled)')));
        if (char === '\u007f' || char === '\b') typed = typed.slice(0, -1);
        else typed += char;
      }
    };
    input.on('data', onData);
  });
}

/**
 * The passphrase, or undefined when none is given anywhere. `confirm` (choosing a new one on a
 * terminal) asks twice and refuses a mismatch. An empty passphrase is refused.
 */
export async function readPassphrase(question: string, { confirm = false } = {}): Promise<Secret | undefined> {
  let passphrase = environmentPassphrase();
  if (!passphrase && process.stdin.isTTY && process.stderr.isTTY) {
    passphrase = await prompt(question);
    if (confirm && !(await prompt(`${question} (again)`)).equals(passphrase))
      throw new InputError('the two passphrases differ; nothing was changed');
  }
  if (passphrase?.isEmpty) throw new InputError(`the passphrase is empty (${PASSPHRASE_SOURCES})`);
  return passphrase;
}
