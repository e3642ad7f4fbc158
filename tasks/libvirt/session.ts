import type { Duplex } from 'node:stream';
import { commandLine } from '../core/shell.ts';
import type { Hypervisor } from '../inventory/model.ts';
import type { HypervisorConnections } from '../remote/hypervisors.ts';

/**
 * One virsh per hypervisor for the whole run, in its interactive mode: commands written to its stdin,
 * answers read as they come, over one SSH channel. An ask then costs a libvirt round trip (~5-10 ms)
 * instead of a virsh process (~30-50 ms of the hypervisor's CPU): polling three guest agents with a
 * process per ask took more CPU than the emulated guests could spare while they ran the probe.
 *
 * The interactive mode is made for people: it prints a welcome, a prompt, and echoes each line it
 * reads (or part of it, depending on TERM). So each command is framed by two
 * echoes whose output (`@@etcd-kvm-session@@ 3 begin`) is not their echoed input
 * (`'@@etcd-kvm-session@@' 3 begin`), and the answer is what lies between them.
 */

export interface VirshReply {
  /** False when virsh said `error: …` (a failed command, its words in output). */
  ok: boolean;
  output: string;
}

/** What asks virsh: a session, or a stand-in in tests. */
export interface VirshAsker {
  /** The commands' replies, in order; rejects when virsh cannot answer at all (ended, hung). */
  ask(commands: readonly (readonly string[])[], options?: { urgent?: boolean }): Promise<VirshReply[]>;
}

const MARK = '@@etcd-kvm-session@@';
/** How long one batch of asks may take before the session is taken for hung (libvirtd stuck, connection half-dead). */
const ASK_TIMEOUT_MS = 30_000;

/** One command as a line of virsh's interactive mode, framed by its markers. Words are quoted as for sh, which virsh's parser reads alike. */
export function sessionLine(seq: number, args: readonly string[]): string {
  // A newline would end the line early: virsh would run the rest as another command.
  if (args.some((arg) => /[\r\n]/.test(arg))) throw new Error(`a virsh argument holds a line break: ${args[0]}`);
  return `echo '${MARK}' ${seq} begin ; ${commandLine(args)} ; echo '${MARK}' ${seq} end\n`;
}

/** The replies complete in what virsh has written so far, by sequence number, and what to keep for later. */
export function takeReplies(buffer: string): { replies: Map<number, VirshReply>; rest: string } {
  const replies = new Map<number, VirshReply>();
  const framed = new RegExp(`${MARK} (\\d+) begin([\\s\\S]*?)${MARK} \\1 end`, 'g');
  let consumed = 0;
  for (const match of buffer.matchAll(framed)) {
    // As in a batch: the marker's newline before, one blank line after the command's own output.
    const output = match[2]!.replace(/^\n/, '').replace(/\n$/, '');
    replies.set(Number(match[1]), { ok: !/^error: /m.test(output), output });
    consumed = match.index + match[0].length;
  }
  return { replies, rest: buffer.slice(consumed) };
}

/** Asks written to virsh's stdin one batch at a time, so that an urgent one can still pass those that wait. */
interface Batch {
  lines: { seq: number; line: string }[];
  urgent: boolean;
  done: (replies: VirshReply[] | Error) => void;
}

export class VirshSession implements VirshAsker {
  #buffer = '';
  #next = 0;
  readonly #waiting = new Map<number, { resolve: (reply: VirshReply) => void; reject: (error: Error) => void }>();
  readonly #queue: Batch[] = [];
  #busy = false;
  #ended: Error | undefined;

  constructor(
    readonly channel: Duplex,
    /** Names the hypervisor in errors. */
    readonly label: string,
    readonly askTimeoutMs = ASK_TIMEOUT_MS,
  ) {
    channel.setEncoding('utf8');
    channel.on('data', (chunk: string) => {
      const { replies, rest } = takeReplies(this.#buffer + chunk);
      this.#buffer = rest;
      for (const [seq, reply] of replies) {
        this.#waiting.get(seq)?.resolve(reply);
        this.#waiting.delete(seq);
      }
    });
    channel.once('close', () => this.#end(new Error(`${label}: virsh ended`)));
    channel.on('error', (error: Error) => this.#end(new Error(`${label}: virsh's channel failed: ${error.message}`)));
  }

  /**
   * The commands' replies, in order. An `urgent` batch goes before the batches still waiting (the
   * guest agents' starts before a prefetch's thirty questions: the guests' scripts are the long pole).
   */
  async ask(commands: readonly (readonly string[])[], { urgent = false } = {}): Promise<VirshReply[]> {
    if (this.#ended) throw this.#ended;
    const lines = commands.map((args) => {
      const seq = this.#next++;
      return { seq, line: sessionLine(seq, args) };
    });
    const answered = await new Promise<VirshReply[] | Error>((done) => {
      const batch = { lines, urgent, done };
      const at = urgent ? this.#queue.findIndex((waiting) => !waiting.urgent) : -1;
      this.#queue.splice(at < 0 ? this.#queue.length : at, 0, batch);
      this.#pump();
    });
    if (answered instanceof Error) throw answered;
    return answered;
  }

  /** Writes the next batch once the one before is answered; a batch not answered in time ends the session. */
  #pump(): void {
    if (this.#busy || this.#ended) return;
    const batch = this.#queue.shift();
    if (!batch) return;
    this.#busy = true;
    const replies = Promise.all(batch.lines.map(({ seq }) => new Promise<VirshReply>((resolve, reject) => this.#waiting.set(seq, { resolve, reject }))));
    const timer = setTimeout(() => this.#end(new Error(`${this.label}: virsh did not answer within ${this.askTimeoutMs / 1000} s`)), this.askTimeoutMs);
    this.channel.write(batch.lines.map(({ line }) => line).join(''));
    replies.then(batch.done, batch.done).finally(() => {
      clearTimeout(timer);
      this.#busy = false;
      this.#pump();
    });
  }

  get ended(): boolean {
    return this.#ended !== undefined;
  }

  /** Every ask in flight or waiting its turn fails with why; later ones fail at once. */
  #end(error: Error): void {
    this.#ended ??= error;
    for (const { reject } of this.#waiting.values()) reject(this.#ended);
    this.#waiting.clear();
    for (const batch of this.#queue.splice(0)) batch.done(this.#ended);
    this.channel.destroy();
  }

  close(): void {
    this.#end(new Error(`${this.label}: the virsh session was closed`));
  }
}

/** The run's sessions, one per hypervisor, opened on first use over its shared connection. */
export class VirshSessions {
  readonly #sessions = new Map<string, Promise<VirshSession>>();

  constructor(readonly connections: HypervisorConnections) {}

  async get(hypervisor: Hypervisor): Promise<VirshSession> {
    let session = this.#sessions.get(hypervisor.name);
    // A session that ended (its virsh hung, or died) is replaced: one bad moment does not fail the rest of the run.
    if (session && (await session.catch(() => undefined))?.ended) session = undefined;
    if (!session) {
      session = this.#open(hypervisor);
      // A session that could not open is not kept: the next asker tries again (and meets the same reason if it stands).
      session.catch(() => this.#sessions.delete(hypervisor.name));
      this.#sessions.set(hypervisor.name, session);
    }
    return session;
  }

  async #open(hypervisor: Hypervisor): Promise<VirshSession> {
    const ssh = await this.connections.get(hypervisor);
    // virsh writes its errors to stderr: merged, they arrive in order with the answers.
    // Without -q, answers read as a batch's do (the probes' parsers were made on those), and `echo` ends its line.
    const channel = await ssh.interactive(['sh', '-c', `exec ${commandLine(['virsh', '-c', hypervisor.libvirt_uri])} 2>&1`]);
    return new VirshSession(channel, `hypervisor ${hypervisor.name}`);
  }

  close(): void {
    for (const session of this.#sessions.values()) void session.then((opened) => opened.close(), () => undefined);
    this.#sessions.clear();
  }
}
