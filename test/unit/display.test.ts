import test from 'ava';
import { spawnSync } from 'node:child_process';
import { forDisplay } from '../../tasks/core/display.ts';
import { Progress } from '../../tasks/core/progress.ts';
import { formatChanges, formatUnreachable } from '../../tasks/core/report.ts';
import type { StepResult } from '../../tasks/core/step.ts';
import { finished, startedPid } from '../../tasks/guest/agent.ts';

/** Text from guests, printed: what a terminal would act on is removed, the words are kept. */

const ESC = '\u001b';

const cases: [what: string, given: string, shown: string][] = [
  ['plain text, newlines and tabs kept', 'module locale\n\tfailed', 'module locale\n\tfailed'],
  ['non-ASCII text kept', 'grüße — 日本 ✓', 'grüße — 日本 ✓'],
  ['colour (CSI SGR)', `${ESC}[31mred${ESC}[0m text`, 'red text'],
  ['cursor moves and erasing (CSI with parameters)', `ok${ESC}[2K${ESC}[1A${ESC}[10;20Hhidden`, 'okhidden'],
  ['private CSI (DEC modes)', `${ESC}[?1049h${ESC}[?25lalt screen`, 'alt screen'],
  ['8-bit CSI (U+009B)', '\u009b31mred\u009b0m', 'red'],
  ['window title (OSC ended by BEL)', `${ESC}]0;pwned${'\u0007'}title`, 'title'],
  ['hyperlink (OSC 8 ended by ST)', `${ESC}]8;;http://evil.example/${ESC}\\click${ESC}]8;;${ESC}\\`, 'click'],
  ['clipboard write (OSC 52), 8-bit ST', `${ESC}]52;c;ZWNobyBwd25lZA==\u009cafter`, 'after'],
  ['8-bit OSC (U+009D)', '\u009d0;title\u0007after', 'after'],
  ['device control string (DCS … ST)', `${ESC}P+q544e${ESC}\\after`, 'after'],
  ['APC, PM, SOS strings', `${ESC}_apc${ESC}\\${ESC}^pm${ESC}\\${ESC}Xsos${ESC}\\after`, 'after'],
  ['an unterminated OSC loses its introducer; the rest is shown as text', `${ESC}]0;no end`, '0;no end'],
  ['two-character escapes (reset, keypad, save cursor)', `${ESC}c${ESC}=${ESC}7after`, 'after'],
  ['charset switch (ESC ( 0: line drawing)', `${ESC}(0lqqk${ESC}(B`, 'lqqk'],
  ['carriage return (rewriting the line)', 'FAILED\rok    ', 'FAILEDok    '],
  ['backspace, bell, vertical tab, form feed, NUL', 'a\bb\u0007c\u000bd\u000ce\u0000f', 'abcdef'],
  ['DEL and the other C1 controls', 'a\u007fb\u0085c\u008dd\u009ce', 'abcde'],
  ['a lone ESC at the end', `text${ESC}`, 'text'],
  ['a sequence hidden inside another: nothing is left to act on', `${ESC}[${ESC}[31m31m`, '31m'],
];

for (const [what, given, shown] of cases) {
  test(`forDisplay: ${what}`, (t) => {
    t.is(forDisplay(given), shown);
  });
}

test('forDisplay leaves no control character but newline and tab, whatever it is given', (t) => {
  // Every character from U+0000 to U+00FF in a pseudo-random order, many times over.
  let seed = 7;
  const next = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31);
  const text = Array.from({ length: 20_000 }, () => String.fromCharCode(next() % 256)).join('');
  t.false(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/.test(forDisplay(text)));
});

// The printing edges: every place guest text reaches the operator goes through forDisplay.

const result = (host: string, extra: Partial<StepResult>): StepResult => ({
  step: 'guest',
  host,
  status: 'ok',
  changes: [],
  durationMs: 1,
  ...extra,
});

test('the report shows what guests said without their control sequences: warnings (cloud-init module names) and errors (journal lines)', (t) => {
  const text = formatChanges(
    [
      result('etcd-1', { warnings: [`cloud-init's first boot ended in error in module(s) ${ESC}]0;owned${'\u0007'}loc${ESC}[2Kale`] }),
      result('etcd-2', { status: 'failed', error: `etcd did not start: ${ESC}[1A${ESC}[2Kstarted etcd\rok | ${'\u009b'}31mfatal` }),
    ],
    { dryRun: false, diffs: false },
  );
  t.is(
    text,
    [
      'etcd-1:',
      "  guest: WARNING: cloud-init's first boot ended in error in module(s) locale",
      'etcd-2:',
      '  guest: FAILED: etcd did not start: started etcdok | fatal',
    ].join('\n'),
  );
  t.is(
    formatUnreachable([
      { hypervisor: 'lab', members: ['etcd-1'], at: 'root@192.0.2.1:22', reason: 'x', detail: `cannot connect: ${ESC}[31mrefused` },
    ]),
    [
      'UNREACHABLE (their members failed; the others went on)',
      'hypervisor lab at root@192.0.2.1:22 (etcd-1): cannot connect: refused',
    ].join('\n'),
  );
});

test('progress shows what a host waits on without control sequences, in the summary and to listeners', (t) => {
  const progress = new Progress(() => 0);
  const seen: string[] = [];
  progress.onChange((host, what) => seen.push(`${host}: ${what}`));
  progress.update('etcd-1', `waiting for etcd: ${ESC}]0;title${'\u0007'}no ${ESC}[31mleader`);
  t.is(progress.summary(), 'etcd-1: waiting for etcd: no leader (0 s)');
  t.deepEqual(seen, ['etcd-1: waiting for etcd: no leader']);
});

test("the guest agent's reasons (they carry what the guest said) come without control sequences", (t) => {
  const stderr = Buffer.from(`${ESC}[2J${ESC}[Hcannot read${ESC}]0;x${'\u0007'} /etc/x\nsecond line`).toString('base64');
  t.deepEqual(finished({ ok: true, output: `{"return": {"exited": true, "exitcode": 1, "err-data": "${stderr}"}}` }), {
    ok: false,
    reason: 'the script exited with 1: cannot read /etc/x',
  });
  t.deepEqual(finished({ ok: false, output: `error: Guest agent is not responding: ${ESC}[31mbusy\r` }), {
    ok: false,
    reason: 'Guest agent is not responding: busy',
  });
  t.deepEqual(finished({ ok: true, output: `${ESC}[5m{not json` }), { ok: false, reason: "the agent's reply is not JSON: {not json" });
  t.deepEqual(startedPid({ ok: true, output: `${ESC}c{"return": {}}` }), {
    ok: false,
    reason: 'the agent did not say which process it started: {"return": {}}',
  });
});

test('a Node warning is printed without control sequences', (t) => {
  const script = `
    const { silenceKnownWarnings } = await import('./tasks/core/warnings.ts');
    silenceKnownWarnings();
    process.emitWarning('bad name \\u001b]0;title\\u0007from \\u001b[31mpeer', { code: 'DEP0999', type: 'DeprecationWarning' });
  `;
  const child = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { encoding: 'utf8' });
  t.is(child.status, 0, child.stderr);
  t.regex(child.stderr, /\[DEP0999\] DeprecationWarning: bad name from peer\n$/);
});
