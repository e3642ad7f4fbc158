import test from 'ava';
import { readFileSync } from 'node:fs';
import { FrameReader, sessionLine, VirshSession } from '../../tasks/libvirt/session.ts';
import { FakeVirshSession } from '../helpers/fake-virsh-session.ts';

/** virsh's interactive mode as the run's session reads it: recorded from the lab's virsh, and a stand-in for the timing. */

/** The marker the recordings were made with (a session draws its own). */
const RECORDED_MARK = '@@etcd-kvm-session@@';
const recorded = (term: string) => readFileSync(`test/fixtures/virsh-session-term-${term}.txt`, 'utf8');

/** A reader of the recordings' batch: asks 0 to 4. */
function recordedReader(): FrameReader {
  const reader = new FrameReader(RECORDED_MARK);
  reader.expect([0, 1, 2, 3, 4]);
  return reader;
}

const RECORDED_REPLIES = {
  0: { ok: true, output: '<owner cluster="lab" id="1234"/>\n' },
  1: { ok: false, output: "error: failed to get domain 'no-such-domain'\n" },
  2: { ok: false, output: "error: internal error: unable to execute QEMU agent command 'guest-exec-status': Invalid parameter 'pid'\n" },
  3: { ok: true, output: '{"return":{}}\n' },
  // What a batch would have answered (the probes' parsers read these).
  4: {
    ok: true,
    output:
      ' Type     Device   Target   Source\n---------------------------------------------------\n volume   disk     vda      etcd-1-os.qcow2\n volume   disk     vdb      etcd-1-data.qcow2\n volume   cdrom    sda      etcd-1-cloud-init.iso\n',
  },
};

for (const term of ['dumb', 'xterm']) {
  test(`replies framed in a recorded session (TERM=${term}: the echoed input ${term === 'dumb' ? "cut to the line's end" : 'whole'})`, (t) => {
    const replies = recordedReader().read(Buffer.from(recorded(term)));
    t.deepEqual(Object.fromEntries(replies.map(({ seq, reply }) => [seq, reply])), RECORDED_REPLIES);
  });

  test(`the same replies when the recording (TERM=${term}) arrives one byte at a time: a marker cut by a chunk's end is still found`, (t) => {
    const reader = recordedReader();
    const bytes = Buffer.from(recorded(term));
    const replies = [...bytes.keys()].flatMap((at) => reader.read(bytes.subarray(at, at + 1)));
    t.deepEqual(Object.fromEntries(replies.map(({ seq, reply }) => [seq, reply])), RECORDED_REPLIES);
  });
}

test('a reply whose end has not arrived yet is kept for later, whole', (t) => {
  const text = recorded('xterm');
  const cut = text.indexOf(`${RECORDED_MARK} 3 end`) + 10;
  const reader = recordedReader();
  t.deepEqual(
    reader.read(Buffer.from(text.slice(0, cut))).map(({ seq }) => seq),
    [0, 1, 2],
  );
  const rest = reader.read(Buffer.from(text.slice(cut)));
  t.deepEqual(
    rest.map(({ seq }) => seq),
    [3, 4],
  );
  t.deepEqual(rest[0]!.reply, { ok: true, output: '{"return":{}}\n' });
});

test('only the frames of the batch in flight are read: a genuine frame of another ask is not taken for one of them', (t) => {
  const reader = new FrameReader(RECORDED_MARK);
  reader.expect([5]);
  t.deepEqual(reader.read(Buffer.from(recorded('xterm'))), []);
});

test('a word with a line break is refused: virsh would run the rest of it as another command', (t) => {
  t.throws(() => sessionLine('@@m@@', 0, ['qemu-agent-command', 'etcd-1', '{\n"execute": "guest-ping"}']), { message: /line break/ });
  t.is(
    sessionLine('@@m@@', 7, ['metadata', '--domain', "it's"]),
    "echo '@@m@@' 7 begin ; metadata --domain 'it'\\''s' ; echo '@@m@@' 7 end\n",
  );
});

test('asks are answered in order, several at once, through the prompt and the echo', async (t) => {
  const fake = new FakeVirshSession((args) => `${args.join('|')}\n`);
  const session = new VirshSession(fake, 'hypervisor lab');
  const [first, second] = await Promise.all([
    session.ask([
      ['list', '--name'],
      ['dominfo', "it's"],
    ]),
    session.ask([['version']]),
  ]);
  t.deepEqual(first, [
    { ok: true, output: 'list|--name\n' },
    { ok: true, output: "dominfo|it's\n" },
  ]);
  t.deepEqual(second, [{ ok: true, output: 'version\n' }]);
  t.is(fake.lines.length, 3);
});

test('a virsh that ends fails what waits for it and every later ask, naming the hypervisor', async (t) => {
  const fake = new FakeVirshSession(() => '');
  const session = new VirshSession(fake, 'hypervisor lab');
  fake.run = () => {
    setImmediate(() => fake.destroy());
    return '';
  };
  await t.throwsAsync(session.ask([['list']]), { message: 'hypervisor lab: virsh ended' });
  await t.throwsAsync(session.ask([['list']]), { message: 'hypervisor lab: virsh ended' });
});

test('a virsh that does not answer in time ends the session', async (t) => {
  const fake = new FakeVirshSession(() => '');
  const session = new VirshSession(fake, 'hypervisor lab', 100);
  fake.answering = false;
  await t.throwsAsync(session.ask([['list']]), { message: 'hypervisor lab: virsh did not answer within 0.1 s' });
  t.true(fake.destroyed);
});

test('an urgent ask passes the asks waiting their turn, never the one virsh is answering', async (t) => {
  const fake = new FakeVirshSession((args) => args.join(' '));
  const session = new VirshSession(fake, 'hypervisor lab');
  const asked = [
    session.ask([['first']]),
    session.ask([['second']]),
    session.ask([['third']]),
    session.ask([['urgent']], { urgent: true }),
  ];
  t.deepEqual(
    (await Promise.all(asked)).map(([reply]) => reply!.output),
    ['first', 'second', 'third', 'urgent'],
  );
  t.deepEqual(
    fake.lines.map((line) => line.split(' ; ')[1]),
    ['first', 'urgent', 'second', 'third'],
  );
});
