import test from 'ava';
import { spawnSync } from 'node:child_process';
import { commandLine, quote } from '../../tasks/core/shell.ts';

/** Runs a command line in the real /bin/sh (dash on Debian) and returns the arguments it received. */
function argvSeenBySh(line: string): string[] {
  const result = spawnSync('/bin/sh', ['-c', `${line}`], { encoding: 'utf8' });
  if (result.status !== 0) throw new Error(result.stderr);
  return result.stdout.split('\0').slice(0, -1);
}

const printArgs = ['printf', '%s\\0'];

test('plain words stay unquoted, everything else is single-quoted', (t) => {
  t.is(quote('virsh'), 'virsh');
  t.is(quote('etcd-1-os.qcow2'), 'etcd-1-os.qcow2');
  t.is(quote(''), "''");
  t.is(quote('a b'), "'a b'");
  t.is(quote("it's"), "'it'\\''s'");
});

test('the real sh receives every argument exactly, whatever it contains', (t) => {
  const nasty = [
    '',
    ' ',
    "it's",
    '"double"',
    '$(touch /tmp/pwned)',
    '`id`',
    '$HOME',
    '*',
    'a\nb',
    '\\',
    ';',
    '&&',
    '|',
    '>',
    '~',
    '!',
    '#comment',
    '--flag=x y',
    'üñï',
  ];
  t.deepEqual(argvSeenBySh(commandLine([...printArgs, ...nasty])), nasty);
});

test('a command line needs at least the program', (t) => {
  t.throws(() => commandLine([]));
});
