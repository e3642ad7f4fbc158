import test from 'ava';
import { InputError } from '../../tasks/core/errors.ts';
import { journalCommand, journalRequest } from '../../tasks/guest/journal.ts';

/** `etcd-kvm logs`: the words and flags in, journalctl's argument array (or a refusal) out. */

const rows: { name: string; args: Parameters<typeof journalRequest>; argv?: string[]; refused?: RegExp }[] = [
  {
    name: "etcd's, the last 100 lines, by default",
    args: [undefined, undefined, false, undefined],
    argv: ['sudo', 'journalctl', '--no-pager', '--output=short-iso', '--unit=etcd.service', '--lines=100'],
  },
  {
    name: 'another unit, with a type of its own kept; lines, since and follow',
    args: ['etcd-kvm-backup.timer', '20', true, '10 min ago'],
    argv: [
      'sudo',
      'journalctl',
      '--no-pager',
      '--output=short-iso',
      '--unit=etcd-kvm-backup.timer',
      '--lines=20',
      '--since=10 min ago',
      '--follow',
    ],
  },
  { name: 'a unit that would be an option', args: ['-f', undefined, false, undefined], refused: /UNIT "-f" is not a systemd unit's name/ },
  {
    name: 'a unit with a path or shell characters',
    args: ['etcd;reboot', undefined, false, undefined],
    refused: /is not a systemd unit's name/,
  },
  { name: 'no lines', args: [undefined, '0', false, undefined], refused: /--lines "0" is not a whole number from 1 to 100000/ },
  { name: 'lines that are not a number', args: [undefined, 'all', false, undefined], refused: /--lines "all"/ },
  { name: 'a since of two lines', args: [undefined, undefined, false, 'today\nreboot'], refused: /--since takes one line/ },
];

for (const row of rows)
  test(`logs: ${row.name}`, (t) => {
    if (row.refused) {
      t.regex(t.throws(() => journalRequest(...row.args), { instanceOf: InputError })!.message, row.refused);
      return;
    }
    t.deepEqual(journalCommand(journalRequest(...row.args)), row.argv!);
  });
