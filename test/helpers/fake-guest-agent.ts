import { AGENT_PROBE_SCRIPT, MARK } from '../../tasks/guest/facts.ts';
import { VirshSession } from '../../tasks/libvirt/session.ts';
import { FakeVirshSession } from './fake-virsh-session.ts';

/**
 * Guests as their QEMU agents answer through virsh, over an in-memory file system per domain: the
 * cluster's mark, guest-exec of the agent's probe (guest/facts.ts AGENT_PROBE_SCRIPT: its answer
 * printed from the files as the script and stat print it), guest-file-open/-read/-close (reads of
 * `chunk` bytes at most, directories refused as the agent refuses them), guest-get-time. Every agent call is counted per domain and kind, and every
 * path opened is kept, so a test sees what the probe read.
 */

export interface FakeFile {
  content: string;
  /** 0o100644 when not said; a directory is 0o40755. */
  mode?: number;
  owner?: string;
  /** The change time in ns: set when a test writes the file. */
  ctimeNs: bigint;
  inode: number;
}

export class FakeGuests {
  readonly files = new Map<string, Map<string, FakeFile>>();
  readonly opened: { domain: string; path: string }[] = [];
  readonly calls = new Map<string, number>();
  /** Paths whose reads fail with an I/O error (a bad disk block). */
  readonly failingReads = new Set<string>();
  /** Every guest's clock, in ns. */
  nowNs = 1_795_525_000_000_000_000n;
  #handles = new Map<number, { domain: string; path: string; file: FakeFile; at: number }>();
  #nextHandle = 1000;
  #stats = new Map<number, string>();

  constructor(
    readonly clusterId: string,
    readonly chunk = 1 << 20,
  ) {}

  /** Writes a file in a domain's guest, now (its change time moves to the guest's clock). */
  write(domain: string, path: string, content: string, extra: Partial<FakeFile> = {}): void {
    const files = this.files.get(domain) ?? new Map<string, FakeFile>();
    this.files.set(domain, files);
    const inode = files.get(path)?.inode ?? 100 + files.size;
    files.set(path, { content, ctimeNs: this.nowNs, inode, ...extra });
  }

  get openHandles(): number {
    return this.#handles.size;
  }

  session(): VirshSession {
    return new VirshSession(new FakeVirshSession((args) => this.#answer(args)), 'hypervisor lab');
  }

  #count(domain: string, kind: string): void {
    const key = `${domain} ${kind}`;
    this.calls.set(key, (this.calls.get(key) ?? 0) + 1);
  }

  #answer(args: string[]): string {
    if (args[0] === 'metadata') return `<owner cluster="lab" id="${this.clusterId}"/>\n`;
    const [, , , domain, json] = args as [string, string, string, string, string];
    const { execute, arguments: given } = JSON.parse(json) as { execute: string; arguments: Record<string, unknown> };
    this.#count(domain, execute);
    const files = this.files.get(domain) ?? new Map<string, FakeFile>();
    const reply = (value: unknown) => `${JSON.stringify({ return: value })}\n`;
    switch (execute) {
      case 'guest-get-time':
        return `{"return":${this.nowNs}}\n`;
      case 'guest-exec': {
        const pid = this.#nextHandle++;
        const args = given.arg as string[];
        if (given.path !== '/bin/sh' || args[1] !== AGENT_PROBE_SCRIPT) return `error: unexpected program ${given.path}\n`;
        this.#stats.set(pid, this.#probe(files, args.slice(3)));
        return reply({ pid });
      }
      case 'guest-exec-status': {
        const out = this.#stats.get(given.pid as number) ?? '';
        return reply({ exited: true, exitcode: 1, 'out-data': Buffer.from(out).toString('base64') });
      }
      case 'guest-file-open': {
        const path = given.path as string;
        this.opened.push({ domain, path });
        const file = files.get(path);
        if (!file)
          return `error: internal error: unable to execute QEMU agent command 'guest-file-open': failed to open file '${path}' (mode: 'r'): No such file or directory\n`;
        const handle = this.#nextHandle++;
        this.#handles.set(handle, { domain, path, file, at: 0 });
        return reply(handle);
      }
      case 'guest-file-read': {
        const open = this.#handles.get(given.handle as number)!;
        if (this.failingReads.has(open.path))
          return "error: internal error: unable to execute QEMU agent command 'guest-file-read': failed to read file: Input/output error\n";
        if ((open.file.mode ?? 0o100644) >> 12 === 0o4)
          return "error: internal error: unable to execute QEMU agent command 'guest-file-read': failed to read file: Is a directory\n";
        const bytes = Buffer.from(open.file.content);
        const count = Math.min(given.count as number, this.chunk);
        const part = bytes.subarray(open.at, open.at + count);
        open.at += part.length;
        return reply({ count: part.length, 'buf-b64': part.toString('base64'), eof: open.at >= bytes.length });
      }
      case 'guest-file-close':
        this.#handles.delete(given.handle as number);
        return reply({});
      default:
        return `error: unexpected ${execute}\n`;
    }
  }

  /** What AGENT_PROBE_SCRIPT prints, given its arguments: cloud-init's result, each unit's first process, stat's lines. */
  #probe(files: Map<string, FakeFile>, args: string[]): string {
    const [result, ...rest] = args;
    const units = rest.slice(0, rest.indexOf('--'));
    const afterUnits = rest.slice(rest.indexOf('--') + 1);
    const printed = afterUnits.slice(0, afterUnits.indexOf('--'));
    const statArgs = afterUnits.slice(afterUnits.indexOf('--') + 1);
    const paths = statArgs.slice(statArgs.indexOf('--') + 1);
    // A file that cannot be read (failingReads) prints the mark the script prints when its open fails.
    const unreadable = `${MARK}-unreadable`;
    const resultLines = this.failingReads.has(result!)
      ? [unreadable]
      : files.has(result!)
        ? [files.get(result!)!.content.replace(/\n$/, '')]
        : [];
    const lines = [`${MARK} cloud-init-result`, ...resultLines];
    lines.push(`${MARK} units`);
    for (let i = 0; i < units.length; i += 2) {
      const pid = files.get(units[i + 1]!)?.content.split('\n')[0];
      if (pid) lines.push(`${units[i]} ${pid}`);
    }
    for (const path of printed) {
      lines.push(`${MARK} text ${path}`);
      const content = files.get(path)?.content ?? '';
      // Each line, and a mark after a last line without its newline.
      if (this.failingReads.has(path)) lines.push(unreadable);
      else if (content !== '')
        lines.push(...(content.endsWith('\n') ? content.slice(0, -1).split('\n') : [...content.split('\n'), `${MARK}-no-newline`]));
    }
    lines.push(`${MARK} stat`);
    return `${lines.join('\n')}\n${paths.flatMap((path) => this.#statLine(files, path)).join('')}`;
  }

  /** One line as `stat -c '%f %U:%G %.9Y %.9Z %i %s %n'` prints it; nothing for a missing path. */
  #statLine(files: Map<string, FakeFile>, path: string): string[] {
    const file = files.get(path);
    if (!file) return [];
    const time = `${file.ctimeNs / 1_000_000_000n}.${String(file.ctimeNs % 1_000_000_000n).padStart(9, '0')}`;
    const mode = (file.mode ?? 0o100644).toString(16);
    return [`${mode} ${file.owner ?? 'root:root'} ${time} ${time} ${file.inode} ${Buffer.byteLength(file.content)} ${path}\n`];
  }
}
