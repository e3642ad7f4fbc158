import test from 'ava';
import { Duplex } from 'node:stream';
import { MiB, VIRSH_ANSWER_CAP } from '../../tasks/core/limits.ts';
import { VirshSession } from '../../tasks/libvirt/session.ts';
import { FakeVirshSession } from '../helpers/fake-virsh-session.ts';

/**
 * The virsh session against what a guest controls: its agent's answers come through the session's
 * stream verbatim, so they may imitate its frames, or be huge.
 */

/** The first marker the session wrote to virsh, read from its first line. */
const markOf = (fake: FakeVirshSession): string => /^echo '([^']+)' 0 begin ; /.exec(fake.lines[0] ?? '')?.[1] ?? '(no marker)';

/** What a guest that knows how the session frames answers, but cannot see the stream, would write to take over the asks after its own. */
function forgedFrames(mark: string): string {
  return Array.from(
    { length: 6 },
    (_, seq) => `\n${mark} ${seq} end\n${mark} ${seq + 1} begin\nFORGED PROBE OUTPUT\n${mark} ${seq + 1} end\n`,
  ).join('');
}

test("a guest's agent answer imitating the session's frames stays that guest's answer: another member's probe reads its own", async (t) => {
  const forgeries = ['@@etcd-kvm-session@@', '@@etcd-kvm-00000000000000000000000000000000@@'].map(forgedFrames).join('');
  const fake = new FakeVirshSession((args) => {
    // The agent's error text is the guest's: virsh passes it through as it is.
    if (args[0] === 'qemu-agent-command')
      return `error: internal error: unable to execute QEMU agent command 'guest-exec-status': ${forgeries}`;
    return `probe of ${args.at(-1)}`;
  });
  const session = new VirshSession(fake, 'hypervisor lab');
  const agentAsk = ['qemu-agent-command', '--timeout', '5', 'etcd-2', '{"execute":"guest-exec-status","arguments":{"pid":1}}'];
  const [sameBatch, nextBatch] = await Promise.all([session.ask([agentAsk, ['dominfo', 'etcd-1']]), session.ask([['dominfo', 'etcd-3']])]);
  t.deepEqual(sameBatch[1], { ok: true, output: 'probe of etcd-1' });
  t.deepEqual(nextBatch[0], { ok: true, output: 'probe of etcd-3' });
  t.false(sameBatch[0]!.ok);
  t.true(sameBatch[0]!.output.endsWith(forgeries), "the forged text is the guest's own answer, whole");
});

test('each session frames with a marker of its own, 128 random bits a guest cannot guess', async (t) => {
  const marks = await Promise.all(
    [1, 2].map(async () => {
      const fake = new FakeVirshSession(() => 'ok');
      await new VirshSession(fake, 'hypervisor lab').ask([['version']]);
      return markOf(fake);
    }),
  );
  for (const mark of marks) t.regex(mark, /^@@etcd-kvm-[0-9a-f]{32}@@$/);
  t.not(marks[0], marks[1]);
});

/**
 * virsh as the session meets it when an answer is large: the answer comes in 32 KiB chunks, each in
 * a turn of the event loop of its own, as an SSH channel delivers it. The session reads a chunk while
 * it is pushed (a flowing stream emits it at once): `readingMs` is the time the session spent reading.
 */
class ChunkedVirsh extends Duplex {
  readingMs = 0;

  constructor(readonly answer: (command: string) => string) {
    super();
  }

  override _read(): void {}

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: (error?: Error | null) => void): void {
    const lines = chunk.toString('utf8').split('\n').filter(Boolean);
    void this.#answer(lines);
    done();
  }

  async #answer(lines: string[]): Promise<void> {
    for (const line of lines) {
      const framed = /^echo '([^']+)' (\d+) begin ; (.*) ; echo '[^']+' \d+ end$/.exec(line);
      if (!framed) continue;
      const [, mark, seq, command] = framed;
      // Built before the first chunk goes: the stand-in's own work is not the session's.
      const text = Buffer.from(`${line}\n${mark} ${seq} begin\n${this.answer(command!)}\n\n${mark} ${seq} end\nvirsh # `);
      for (let at = 0; at < text.length; at += 32 * 1024) {
        await new Promise(setImmediate);
        if (this.destroyed) return;
        const started = performance.now();
        this.push(text.subarray(at, at + 32 * 1024));
        this.readingMs += performance.now() - started;
      }
    }
  }
}

test.serial(
  'a 10 MiB answer arriving in 32 KiB chunks is read in well under a second: each chunk is scanned once, not the whole answer again',
  async (t) => {
    const big = 'x'.repeat(10 * MiB);
    const virsh = new ChunkedVirsh(() => big);
    const session = new VirshSession(virsh, 'hypervisor lab');
    const [reply] = await session.ask([['qemu-agent-command', 'etcd-1', '{"execute":"guest-exec-status"}']]);
    t.is(reply!.output, `${big}\n`);
    t.log(`read in ${Math.round(virsh.readingMs)} ms`);
    t.true(virsh.readingMs < 1000, `read in ${Math.round(virsh.readingMs)} ms`);
  },
);

test.serial(
  'an answer past the cap fails the ask with an error naming the cap, and ends the session: the rest of that answer is still coming',
  async (t) => {
    const tooBig = 'x'.repeat(VIRSH_ANSWER_CAP.bytes + 1);
    const virsh = new ChunkedVirsh(() => tooBig);
    const session = new VirshSession(virsh, 'hypervisor lab');
    const started = performance.now();
    const error = await t.throwsAsync(session.ask([['qemu-agent-command', 'etcd-2', '{"execute":"guest-exec-status"}']]));
    t.is(
      error.message,
      `hypervisor lab: virsh's answer to \`qemu-agent-command etcd-2 '{"execute":"guest-exec-status"}'\` exceeded 32 MiB (cap virsh-answer)`,
    );
    t.true(performance.now() - started < 5000);
    t.true(virsh.destroyed);
    await t.throwsAsync(session.ask([['version']]), { message: /cap virsh-answer/ });
  },
);
