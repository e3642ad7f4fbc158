import { InputError } from '../core/errors.ts';

/** What `etcd-kvm logs` asks of a member's journal. */
export interface JournalRequest {
  unit: string;
  lines: number;
  follow: boolean;
  since?: string;
}

// A unit's name as systemd writes them: no option (a leading '-'), no shell or path characters.
const UNIT = /^[A-Za-z0-9][A-Za-z0-9@._:\\-]*$/;
const MAX_LINES = 100_000;

/** The request from the command line's words and flags; bad input is an InputError naming the part. */
export function journalRequest(
  unit: string | undefined,
  lines: string | undefined,
  follow: boolean,
  since: string | undefined,
): JournalRequest {
  const name = unit ?? 'etcd';
  if (!UNIT.test(name))
    throw new InputError(`UNIT ${JSON.stringify(name)} is not a systemd unit's name (etcd, etcd-kvm-backup.timer, chrony…)`);
  const count = lines === undefined ? 100 : Number(lines);
  if (!Number.isInteger(count) || count < 1 || count > MAX_LINES)
    throw new InputError(`--lines ${JSON.stringify(lines)} is not a whole number from 1 to ${MAX_LINES}`);
  if (since !== undefined && (since.trim() === '' || /[\n\r]/.test(since)))
    throw new InputError('--since takes one line of time, as journalctl reads it ("10 min ago", "2026-11-29 10:00")');
  return { unit: name.includes('.') ? name : `${name}.service`, lines: count, follow, ...(since !== undefined ? { since } : {}) };
}

/** journalctl's argument array in the member (as root: the admin user reads the system journal through sudo). */
export function journalCommand(request: JournalRequest): string[] {
  return [
    'sudo',
    'journalctl',
    '--no-pager',
    '--output=short-iso',
    `--unit=${request.unit}`,
    `--lines=${request.lines}`,
    ...(request.since !== undefined ? [`--since=${request.since}`] : []),
    ...(request.follow ? ['--follow'] : []),
  ];
}
