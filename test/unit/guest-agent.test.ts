import test from 'ava';
import { askThroughAgents, finished, presentThroughAgents } from '../../tasks/guest/agent.ts';
import type { VirshAsker } from '../../tasks/libvirt/session.ts';
import { VirshSession } from '../../tasks/libvirt/session.ts';
import { FakeVirshSession } from '../helpers/fake-virsh-session.ts';

/**
 * The guest-agent probe's side on the hypervisor, through a virsh session whose stand-in answers as
 * libvirt does (replies as QEMU writes them, `error: …` on failure): marks read first, then the
 * scripts started in every marked domain, then polled until each has exited. The real agent is the lab's.
 */

const OWNER = { namespace: 'urn:etcd-kvm:owner:1', id: '1234' };

/** libvirt and the guests' agents, as seen through virsh: each domain's script answers its own text upper-cased, at the second status ask. */
function fakeLibvirt(): { session: VirshSession; calls: string[] } {
  const calls: string[] = [];
  const scripts = new Map<string, string>();
  const asked = new Set<string>();
  const fake = new FakeVirshSession((args) => {
    if (args[0] === 'metadata') {
      const domain = args[4]!;
      calls.push(`${domain} metadata`);
      if (domain === 'foreign') return '<owner cluster="other" id="9999"/>\n';
      if (domain === 'gone') return `error: failed to get domain '${domain}'\n`;
      return '<owner cluster="lab" id="1234"/>\n';
    }
    const [, , , domain, json] = args as [string, string, string, string, string];
    const { execute, arguments: given } = JSON.parse(json) as { execute: string; arguments: { 'input-data'?: string } };
    calls.push(`${domain} ${execute}`);
    if (domain === 'no-channel') return 'error: argument unsupported: QEMU guest agent is not configured\n';
    if (execute === 'guest-exec') {
      scripts.set(domain, Buffer.from(given['input-data']!, 'base64').toString('utf8'));
      return '{"return":{"pid":4242}}\n';
    }
    if (domain === 'hangs' || !asked.has(domain)) {
      asked.add(domain);
      return '{"return":{"exited":false}}\n';
    }
    const out = Buffer.from(scripts.get(domain)!.toUpperCase()).toString('base64');
    const err = Buffer.from('sudo: nope\n').toString('base64');
    return `${JSON.stringify({ return: { exitcode: domain === 'fails' ? 3 : 0, 'out-data': out, 'err-data': err, exited: true } })}\n`;
  });
  return { session: new VirshSession(fake, 'hypervisor lab'), calls };
}

test("every domain runs its own script; one without the agent fails alone, with libvirt's words", async (t) => {
  const { session, calls } = fakeLibvirt();
  const answers = await askThroughAgents(
    session,
    [
      { domain: 'etcd-1', script: "echo one 'quoted'" },
      { domain: 'no-channel', script: 'echo two' },
      { domain: 'etcd-3', script: 'echo three' },
    ],
    OWNER,
    10_000,
  );
  t.deepEqual(answers, [
    { ok: true, output: "ECHO ONE 'QUOTED'" },
    { ok: false, reason: 'argument unsupported: QEMU guest agent is not configured' },
    { ok: true, output: 'ECHO THREE' },
  ]);
  // Every script started before any is polled: they run at the same time.
  const firstPoll = calls.findIndex((call) => call.endsWith('guest-exec-status'));
  t.deepEqual(
    calls
      .slice(0, firstPoll)
      .filter((call) => call.endsWith(' guest-exec'))
      .sort(),
    ['etcd-1 guest-exec', 'etcd-3 guest-exec', 'no-channel guest-exec'],
  );
});

test("nothing runs inside a domain without this cluster's mark (another cluster's VM with a member's name), or one that is gone", async (t) => {
  const { session, calls } = fakeLibvirt();
  const answers = await askThroughAgents(
    session,
    [
      { domain: 'foreign', script: 'echo one' },
      { domain: 'gone', script: 'echo two' },
    ],
    OWNER,
    10_000,
  );
  t.deepEqual(answers, [
    { ok: false, reason: "not marked as this cluster's domain (owner id 1234)" },
    { ok: false, reason: "failed to get domain 'gone'" },
  ]);
  t.deepEqual(calls.sort(), ['foreign metadata', 'gone metadata']);
});

test('a script that exits non-zero, or never finishes, is no answer (the caller asks over SSH instead)', async (t) => {
  const { session } = fakeLibvirt();
  const started = Date.now();
  const answers = await askThroughAgents(
    session,
    [
      { domain: 'fails', script: 'exit 3' },
      { domain: 'hangs', script: 'sleep 100' },
    ],
    OWNER,
    1_000,
  );
  t.deepEqual(answers, [
    { ok: false, reason: 'the script exited with 3: sudo: nope' },
    { ok: false, reason: 'no answer within 1 s' },
  ]);
  const took = Date.now() - started;
  t.true(took >= 1_000 && took < 3_000, `${took} ms`);
});

test('a status reply that is not JSON, or an output cut short, is no answer', (t) => {
  t.deepEqual(finished({ ok: true, output: 'not json' }), { ok: false, reason: "the agent's reply is not JSON: not json" });
  t.deepEqual(finished({ ok: true, output: '{"return": {"exitcode": 0, "out-data": "aGk=", "out-truncated": true, "exited": true}}' }), {
    ok: false,
    reason: "the agent cut the script's output short",
  });
  t.deepEqual(finished({ ok: true, output: '{"return": {"exitcode": 0, "out-data": "aGk=", "exited": true}}' }), {
    ok: true,
    output: 'hi',
  });
  t.is(finished({ ok: true, output: '{"return": {"exited": false}}' }), 'running');
});

test('whether a file is there: opened and closed again, never read; no such file is false; an agent that does not answer says why', async (t) => {
  const asked: string[] = [];
  const virsh: VirshAsker = {
    async ask(commands) {
      return commands.map((args) => {
        const [, , , domain, json] = args as [string, string, string, string, string];
        const { execute, arguments: given } = JSON.parse(json) as { execute: string; arguments: { path?: string; handle?: number } };
        asked.push(`${domain} ${execute} ${given.path ?? given.handle}`);
        if (execute === 'guest-file-close') return { ok: true, output: '{"return":{}}' };
        if (domain === 'with') return { ok: true, output: '{"return":1000}' };
        if (domain === 'without')
          return {
            ok: false,
            output: `error: internal error: unable to execute QEMU agent command 'guest-file-open': failed to open file '${given.path}' (flags=r): No such file or directory`,
          };
        return { ok: false, output: 'error: Guest agent is not responding: QEMU guest agent is not connected' };
      });
    },
  };
  const path = '/run/systemd/system/etcd.service.d/etcd-kvm-force-new-cluster.conf';
  const found = await presentThroughAgents(
    virsh,
    ['with', 'without', 'silent'].map((domain) => ({ domain, path })),
  );
  t.deepEqual(found, [true, false, { unanswered: 'Guest agent is not responding: QEMU guest agent is not connected' }]);
  t.deepEqual(asked, [
    `with guest-file-open ${path}`,
    `without guest-file-open ${path}`,
    `silent guest-file-open ${path}`,
    'with guest-file-close 1000',
  ]);
  t.deepEqual(await presentThroughAgents(virsh, []), []);
});
