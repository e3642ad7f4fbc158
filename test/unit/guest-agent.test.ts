import test from 'ava';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { agentScript, parseAgentAnswers } from '../../tasks/guest/agent.ts';

/**
 * The hypervisor's side of the guest-agent probe, run by the real sh against a stand-in for virsh
 * that answers as libvirt does (replies as QEMU writes them, `error: …` on failure): the script is
 * started in every domain first, then polled until each has exited. The real agent is the lab's.
 */

const FAKE_VIRSH = `#!/bin/sh
# virsh -q -c URI metadata --uri NAMESPACE --domain DOMAIN: the owner's mark
if [ "$4" = metadata ]; then
  echo "$8 metadata" >> "$FAKE_STATE/calls"
  case $8 in
    foreign) echo '<owner cluster="other" id="9999"/>' ;;
    gone) echo "error: failed to get domain '$8'"; exit 1 ;;
    *) echo '<owner cluster="lab" id="1234"/>' ;;
  esac
  exit 0
fi
# virsh -q -c URI qemu-agent-command --timeout N DOMAIN JSON
domain=$7; json=$8; state="$FAKE_STATE/$domain"
echo "$domain $json" >> "$FAKE_STATE/calls"
case $domain in
  no-channel) echo "error: argument unsupported: QEMU guest agent is not configured"; exit 1 ;;
  hangs) case $json in *guest-exec-status*) echo '{"return": {"exited": false}}' ;; *) echo '{"return": {"pid": 7}}' ;; esac; exit 0 ;;
esac
case $json in
  *guest-exec-status*)
    # Not finished at the first ask, finished at the second: the output is the script it was given, upper-cased.
    if [ ! -e "$state.asked" ]; then : > "$state.asked"; echo '{"return": {"exited": false}}'; exit 0; fi
    out=$(cat "$state.input" | tr a-z A-Z | base64 -w0)
    code=0; [ "$domain" = fails ] && code=3
    echo "{\\"return\\": {\\"exitcode\\": $code, \\"out-data\\": \\"$out\\", \\"err-data\\": \\"$(printf 'sudo: nope\\n' | base64 -w0)\\", \\"exited\\": true}}" ;;
  *)
    printf '%s' "$json" | sed -n 's/.*"input-data":"\\([^"]*\\)".*/\\1/p' | base64 -d > "$state.input"
    echo '{"return": {"pid": 4242}}' ;;
esac
`;

const OWNER = { namespace: 'urn:etcd-kvm:owner:1', id: '1234' };

function runWithFakeVirsh(script: string): { stdout: string; calls: string[] } {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-agent-'));
  writeFileSync(join(dir, 'virsh'), FAKE_VIRSH);
  chmodSync(join(dir, 'virsh'), 0o755);
  writeFileSync(join(dir, 'calls'), '');
  const result = spawnSync('sh', ['-c', script], { encoding: 'utf8', env: { ...process.env, PATH: `${dir}:${process.env.PATH}`, FAKE_STATE: dir } });
  const calls = spawnSync('cat', [join(dir, 'calls')], { encoding: 'utf8' }).stdout.trim().split('\n');
  return { stdout: result.stdout, calls };
}

test('every domain runs its own script; one without the agent fails alone, with libvirt\'s words', (t) => {
  const requests = [
    { domain: 'etcd-1', script: "echo one 'quoted'" },
    { domain: 'no-channel', script: 'echo two' },
    { domain: 'etcd-3', script: 'echo three' },
  ];
  const { stdout, calls } = runWithFakeVirsh(agentScript('qemu:///system', requests, OWNER, 10));
  const answers = parseAgentAnswers(stdout, requests.length);
  t.deepEqual(answers, [
    { ok: true, output: "ECHO ONE 'QUOTED'" },
    { ok: false, reason: 'argument unsupported: QEMU guest agent is not configured' },
    { ok: true, output: 'ECHO THREE' },
  ]);
  // Started once in each marked domain, all at the same time (a shell each).
  t.deepEqual(calls.filter((call) => call.includes('"guest-exec"')).map((call) => call.split(' ')[0]).sort(), ['etcd-1', 'etcd-3', 'no-channel']);
});

test("nothing runs inside a domain without this cluster's mark (another cluster's VM with a member's name), or one that is gone", (t) => {
  const requests = [
    { domain: 'foreign', script: 'echo one' },
    { domain: 'gone', script: 'echo two' },
  ];
  const { stdout, calls } = runWithFakeVirsh(agentScript('qemu:///system', requests, OWNER, 10));
  t.deepEqual(parseAgentAnswers(stdout, requests.length), [
    { ok: false, reason: "not marked as this cluster's domain (owner id 1234)" },
    { ok: false, reason: "failed to get domain 'gone'" },
  ]);
  t.deepEqual(calls.sort(), ['foreign metadata', 'gone metadata']);
});

test('a script that exits non-zero, or never finishes, is no answer (the caller asks over SSH instead)', (t) => {
  const requests = [
    { domain: 'fails', script: 'exit 3' },
    { domain: 'hangs', script: 'sleep 100' },
  ];
  const started = Date.now();
  const answers = parseAgentAnswers(runWithFakeVirsh(agentScript('qemu:///system', requests, OWNER, 1)).stdout, requests.length);
  t.deepEqual(answers, [
    { ok: false, reason: 'the script exited with 3: sudo: nope' },
    { ok: false, reason: 'no answer within 1 s' },
  ]);
  t.true(Date.now() - started < 5_000);
});

test('an answer the hypervisor never gave, or that is not JSON, is no answer', (t) => {
  t.deepEqual(parseAgentAnswers('@@etcd-kvm-agent@@0 done\n{"return": {"exitcode": 0, "out-data": "aGk=", "exited": true}}\n@@etcd-kvm-agent@@1 done\nnot json\n', 3), [
    { ok: true, output: 'hi' },
    { ok: false, reason: "the agent's reply is not JSON: not json" },
    { ok: false, reason: 'the hypervisor gave no answer' },
  ]);
  t.deepEqual(parseAgentAnswers('@@etcd-kvm-agent@@0 done\n{"return": {"exitcode": 0, "out-data": "aGk=", "out-truncated": true, "exited": true}}\n', 1), [{ ok: false, reason: "the agent cut the script's output short" }]);
});
