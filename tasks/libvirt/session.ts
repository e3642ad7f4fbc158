import { randomBytes } from 'node:crypto';
import type { Duplex } from 'node:stream';
import { CapExceededError, commandInBrief, VIRSH_ANSWER_CAP, type Cap } from '../core/limits.ts';
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
 * echoes whose output (`@@etcd-kvm-<nonce>@@ 3 begin`) is not their echoed input
 * (`'@@etcd-kvm-<nonce>@@' 3 begin`), and the answer is what lies between them.
 *
 * A guest writes into that stream: its agent's answers (and the errors virsh makes of them) come
 * through verbatim. A frame it could imitate would let it end its own answer early and write another
 * member's. So the marker carries a nonce drawn per session that no guest can know: it goes only to
 * virsh's stdin and comes back on its stdout, both on the hypervisor's side of the SSH channel, never
 * to a guest. And only the frames of the batch in flight are read, in the order they were asked.
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

/** How long one batch of asks may take before the session is taken for hung (libvirtd stuck, connection half-dead). */
const ASK_TIMEOUT_MS = 30_000;

/** A session's marker: 128 random bits, out of a guest's reach to guess. Only hex digits, so it needs no quoting care. */
export const sessionMark = (): string => `@@etcd-kvm-${randomBytes(16).toString('hex')}@@`;

/**
 * One command as a line of virsh's interactive mode, framed by its markers. Words are quoted as for sh, which virsh's parser reads alike.
 */
export function sessionLine(mark: string, seq: number, args: readonly string[]): string {
  // A newline would end the line early: virsh would run the rest as another command.
  if (args.some((arg) => /[\r\n]/.test(arg))) throw new Error(`a virsh argument holds a line break: ${args[0]}`);
  return `echo '${mark}' ${seq} begin ; ${commandLine(args)} ; echo '${mark}' ${seq} end\n`;
}

/**
 * The replies of the batch in flight, read out of virsh's output as it arrives. Each byte is scanned
 * once: a large answer in many chunks costs time in proportion to its size (rescanning all that was
 * kept at every chunk blocked the event loop for 17 s on a 10 MiB answer, long enough that the ask's
 * timer could not fire). Bytes, not text: a marker is ASCII, and an answer is decoded once, whole, so
 * a character cut by a chunk's end needs no care. What is kept is bounded: the answer being read, up
 * to its cap, and the few bytes a marker cut by a chunk's end may have begun in.
 */
export class FrameReader {
  /** The sequence numbers still to be answered, in the order virsh answers them. */
  #expected: number[] = [];
  /** Inside an answer (its begin marker read), or between them (prompts, echoed input: dropped). */
  #inside = false;
  /** The answer so far, as it came: joined once, when its end marker arrives. */
  #pieces: Buffer[] = [];
  #bytes = 0;
  /** The last bytes read (inside an answer: the answer's own last bytes): a marker may begin in them. */
  #carry: Buffer = Buffer.alloc(0);

  constructor(
    readonly mark: string,
    readonly cap: Cap = VIRSH_ANSWER_CAP,
    /** Names an answer in the error when it passes the cap. */
    readonly describe: (seq: number) => string = (seq) => `virsh's answer ${seq}`,
  ) {}

  /** The batch now asked, its sequence numbers in order: every other frame is ignored. */
  expect(seqs: readonly number[]): void {
    this.#expected = [...seqs];
    this.#startSearch(false);
  }

  /** The replies this data completes, in order. Throws CapExceededError when an answer passes the cap. */
  read(data: Buffer): { seq: number; reply: VirshReply }[] {
    const done: { seq: number; reply: VirshReply }[] = [];
    let rest = data;
    while (rest.length > 0 && this.#expected.length > 0) {
      const seq = this.#expected[0]!;
      const marker = Buffer.from(`${this.mark} ${seq} ${this.#inside ? 'end' : 'begin'}`);
      const at = this.#find(marker, rest);
      if (at === undefined) {
        if (this.#inside) this.#keep(rest, seq);
        const tail = marker.length - 1;
        this.#carry = rest.length >= tail ? rest.subarray(-tail) : Buffer.concat([this.#carry, rest]).subarray(-tail);
        break;
      }
      if (this.#inside) {
        done.push({ seq, reply: this.#finish(rest, at, seq) });
        this.#expected.shift();
      }
      this.#startSearch(!this.#inside);
      rest = rest.subarray(at + marker.length);
    }
    return done;
  }

  /** Where the marker begins in `rest` (below 0: that many bytes back, in the carry); undefined when it is not there. */
  #find(marker: Buffer, rest: Buffer): number | undefined {
    if (this.#carry.length > 0) {
      // Only a marker that begins in the carry is looked for here: the joined bytes are shorter than one that begins in `rest`.
      const straddling = Buffer.concat([this.#carry, rest.subarray(0, marker.length - 1)]).indexOf(marker);
      if (straddling >= 0) return straddling - this.#carry.length;
    }
    const at = rest.indexOf(marker);
    return at < 0 ? undefined : at;
  }

  #startSearch(inside: boolean): void {
    this.#inside = inside;
    this.#pieces = [];
    this.#bytes = 0;
    this.#carry = Buffer.alloc(0);
  }

  #keep(piece: Buffer, seq: number): void {
    this.#bytes += piece.length;
    if (this.#bytes > this.cap.bytes) throw new CapExceededError(this.describe(seq), this.cap);
    this.#pieces.push(piece);
  }

  /** The answer whose end marker begins at `at` of `rest` (below 0: in the carry, whose bytes are the kept answer's last). */
  #finish(rest: Buffer, at: number, seq: number): VirshReply {
    const answer =
      at >= 0
        ? Buffer.concat([...this.#pieces, rest.subarray(0, at)])
        : Buffer.concat(this.#pieces, this.#bytes).subarray(0, this.#bytes + at);
    if (answer.length > this.cap.bytes) throw new CapExceededError(this.describe(seq), this.cap);
    const text = answer.toString('utf8');
    // As in a batch: the marker's newline before, one blank line after the command's own output.
    const output = text.slice(text.startsWith('\n') ? 1 : 0, text.endsWith('\n') ? -1 : undefined);
    // An `error: ` at the start of any line (virsh's own words), found without a regular expression's cost on a large answer.
    return { ok: !(output.startsWith('error: ') || output.includes('\nerror: ')), output };
  }
}

/** Asks written to virsh's stdin one batch at a time, so that an urgent one can still pass those that wait. */
interface Batch {
  lines: { seq: number; line: string; command: string }[];
  urgent: boolean;
  done: (replies: VirshReply[] | Error) => void;
}

export class VirshSession implements VirshAsker {
  readonly #mark = sessionMark();
  readonly #reader: FrameReader;
  #next = 0;
  readonly #waiting = new Map<number, { command: string; resolve: (reply: VirshReply) => void; reject: (error: Error) => void }>();
  readonly #queue: Batch[] = [];
  #busy = false;
  #ended: Error | undefined;

  constructor(
    readonly channel: Duplex,
    /** Names the hypervisor in errors. */
    readonly label: string,
    readonly askTimeoutMs = ASK_TIMEOUT_MS,
    /** The most one answer may hold; past it the session ends (what follows in the stream is the rest of that answer). */
    answerCap: Cap = VIRSH_ANSWER_CAP,
  ) {
    this.#reader = new FrameReader(
      this.#mark,
      answerCap,
      (seq) => `${label}: virsh's answer to ${this.#waiting.get(seq)?.command ?? `ask ${seq}`}`,
    );
    channel.on('data', (chunk: Buffer) => {
      let replies: { seq: number; reply: VirshReply }[];
      try {
        replies = this.#reader.read(chunk);
      } catch (error) {
        this.#end(error as Error);
        return;
      }
      for (const { seq, reply } of replies) {
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
      return { seq, line: sessionLine(this.#mark, seq, args), command: `\`${commandInBrief(args)}\`` };
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
    const replies = Promise.all(
      batch.lines.map(
        ({ seq, command }) => new Promise<VirshReply>((resolve, reject) => this.#waiting.set(seq, { command, resolve, reject })),
      ),
    );
    const timer = setTimeout(
      () => this.#end(new Error(`${this.label}: virsh did not answer within ${this.askTimeoutMs / 1000} s`)),
      this.askTimeoutMs,
    );
    this.#reader.expect(batch.lines.map(({ seq }) => seq));
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

/**
 * The run's sessions, opened on first use over each hypervisor's shared connection: one per lane.
 * virsh answers one command after another, so work that waits on guests (the agents' calls, each a
 * round trip into an emulated guest) has lanes of its own, and libvirt's facts never queue behind it.
 */
export class VirshSessions {
  readonly #sessions = new Map<string, Promise<VirshSession>>();

  constructor(readonly connections: HypervisorConnections) {}

  async get(hypervisor: Hypervisor, lane = 'libvirt'): Promise<VirshSession> {
    const key = `${hypervisor.name}\0${lane}`;
    let session = this.#sessions.get(key);
    // A session that ended (its virsh hung, or died) is replaced: one bad moment does not fail the rest of the run.
    if (session && (await session.catch(() => undefined))?.ended) session = undefined;
    if (!session) {
      session = this.#open(hypervisor);
      // A session that could not open is not kept: the next asker tries again (and meets the same reason if it stands).
      session.catch(() => this.#sessions.delete(key));
      this.#sessions.set(key, session);
    }
    return session;
  }

  async #open(hypervisor: Hypervisor): Promise<VirshSession> {
    const ssh = await this.connections.get(hypervisor);
    // virsh writes its errors to stderr: merged, they arrive in order with the answers.
    // Without -q, answers read as a batch's do (the probes' parsers were made on those), and `echo` ends its line.
    const channel = await ssh.interactive(['sh', '-c', `exec ${commandLine(['virsh', '-c', hypervisor.libvirtUri])} 2>&1`]);
    return new VirshSession(channel, `hypervisor ${hypervisor.name}`);
  }

  close(): void {
    for (const session of this.#sessions.values())
      void session.then(
        (opened) => opened.close(),
        () => undefined,
      );
    this.#sessions.clear();
  }
}
