import { SYSTEMCTL_ENABLE } from '../render/guest/systemctl.ts';
import { octal, PREVIOUS_DIR, type GuestAction } from './plan.ts';

/**
 * A member's file changes in a row — files kept for a rollback, written, their owner and mode fixed,
 * a turned-off task's units stopped and files removed, systemd reloaded, a unit enabled — as one
 * `sudo sh` over SSH instead of one each: every process started in an emulated guest costs tenths of a
 * second, sudo most of all. Pure: the script, its arguments and its input; steps/guest.ts runs it.
 */

const FILE_ACTION_KINDS = ['write', 'attributes', 'keep-previous', 'daemon-reload', 'enable', 'stop', 'remove'] as const;

export type FileAction = Extract<GuestAction, { kind: (typeof FILE_ACTION_KINDS)[number] }>;

const BATCHED: ReadonlySet<string> = new Set(FILE_ACTION_KINDS);

export const isFileAction = (action: { kind: string }): action is FileAction => BATCHED.has(action.kind);

/** The batch's exit when its files are done and the service it then starts or restarts fails: a roll's turn rolls back only then. */
export const SERVICE_FAILED_EXIT = 97;

/**
 * Reads its operations from its arguments, in order; each write's content is the next `size` bytes of
 * stdin (GNU head -c reads no further than it is asked, even from a pipe), checked for length, written
 * to a private temporary file beside the target and renamed over it: never a half-written file, never
 * a secret in argv. The first error stops the batch (set -e): what came before it stays done, as when
 * each was its own command.
 */
export const FILE_BATCH_SCRIPT = [
  'set -e; umask 077; previous=$1; shift',
  // A directory a write needs is made as cloud-init's write_files makes it at first boot: 0755, root's. Under the
  // batch's umask it was 0700, and a feature turned on after the first boot (scheduled backups, defragmentation,
  // drills) got /etc/etcd-kvm/agent that its agent, which runs as etcd, could not enter: every tick failed. The
  // files keep their own modes (secrets 0400). A process only for a directory that is not there yet: each costs
  // tenths of a second in an emulated guest.
  'dir() { [ -d "$1" ] || { umask 022; mkdir -p -- "$1"; umask 077; }; }',
  // Where files are kept for a rollback: root's alone.
  'kept_dir() { [ -d "$1" ] || mkdir -p -- "$1"; }',
  'while [ $# -gt 0 ]; do',
  '  case $1 in',
  // biome-ignore lint/suspicious/noTemplateCurlyInString: shell parameter expansions, run by sh in the guest.
  '    keep) kept_dir "$previous${2%/*}"; cp -p -- "$2" "$previous$2"; shift 2 ;;',
  '    write)',
  // biome-ignore lint/suspicious/noTemplateCurlyInString: shell parameter expansions, run by sh in the guest.
  '      dir "${2%/*}"; t="$2.etcd-kvm-new"; head -c "$5" > "$t"',
  '      [ "$(wc -c < "$t")" -eq "$5" ] || { rm -f -- "$t"; echo "$2: the input ended before its $5 bytes" >&2; exit 1; }',
  '      chown -- "$3" "$t"; chmod -- "$4" "$t"; mv -f -- "$t" "$2"; shift 5 ;;',
  '    attributes) chown -- "$3" "$2"; chmod -- "$4" "$2"; shift 4 ;;',
  '    daemon-reload) systemctl daemon-reload; shift ;;',
  `    enable) ${SYSTEMCTL_ENABLE} -- "$2"; shift 2 ;;`,
  '    stop) systemctl stop -- "$2"; shift 2 ;;',
  `    service) systemctl "$2" -- "$3" || exit ${SERVICE_FAILED_EXIT}; shift 3 ;;`,
  '    remove) rm -f -- "$2"; shift 2 ;;',
  '    *) echo "unknown operation: $1" >&2; exit 2 ;;',
  '  esac',
  'done',
].join('\n');

export interface FileBatch {
  /** The arguments after `sh -c FILE_BATCH_SCRIPT sh`. */
  args: string[];
  /** Every written file's content, one after another. */
  stdin: Buffer;
  /** What the batch does, for an error's message. */
  describe: string;
}

/**
 * The batch for these actions, in their order; `previousDir` is where kept files go (PREVIOUS_DIR);
 * `then`, a service started or restarted at the end, in the same command (a roll's turn).
 */
export function fileBatch(actions: readonly FileAction[], previousDir = PREVIOUS_DIR, then?: { verb: string; unit: string }): FileBatch {
  const args: string[] = [previousDir];
  const contents: Buffer[] = [];
  const said: string[] = [];
  for (const action of actions) {
    switch (action.kind) {
      case 'keep-previous':
        for (const path of action.paths) args.push('keep', path);
        said.push(`keep ${action.paths.join(', ')}`);
        break;
      case 'write': {
        const content = Buffer.from(action.file.content, 'utf8');
        args.push('write', action.file.path, action.file.owner, octal(action.file.mode), String(content.length));
        contents.push(content);
        said.push(`write ${action.file.path}`);
        break;
      }
      case 'attributes':
        args.push('attributes', action.file.path, action.file.owner, octal(action.file.mode));
        said.push(`fix ${action.file.path}`);
        break;
      case 'daemon-reload':
        args.push('daemon-reload');
        said.push('systemctl daemon-reload');
        break;
      case 'enable':
        args.push('enable', action.unit);
        said.push(`systemctl enable ${action.unit}`);
        break;
      case 'stop':
        for (const unit of action.units) args.push('stop', unit);
        said.push(`systemctl stop ${action.units.join(' ')}`);
        break;
      case 'remove':
        args.push('remove', action.path);
        said.push(`rm ${action.path}`);
        break;
    }
  }
  if (then) {
    args.push('service', then.verb, then.unit);
    said.push(`systemctl ${then.verb} ${then.unit}`);
  }
  return { args, stdin: Buffer.concat(contents), describe: said.join('; ') };
}

/** The command that runs a batch in a guest, as root (its contents go on stdin). */
export const batchCommand = (batch: FileBatch): string[] => ['sudo', 'sh', '-c', FILE_BATCH_SCRIPT, 'sh', ...batch.args];

/** The actions in order, runs of file actions gathered into one batch each: every other action stands alone. */
export function batched<A extends { kind: string }>(actions: readonly A[]): (Exclude<A, FileAction> | FileAction[])[] {
  const out: (Exclude<A, FileAction> | FileAction[])[] = [];
  for (const action of actions) {
    const last = out.at(-1);
    if (!isFileAction(action)) out.push(action as Exclude<A, FileAction>);
    else if (Array.isArray(last)) last.push(action);
    else out.push([action]);
  }
  return out;
}
