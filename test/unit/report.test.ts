import test from 'ava';
import { formatChanges, formatProfile, formatRecap, formatUnreachable } from '../../tasks/core/report.ts';
import type { StepResult } from '../../tasks/core/step.ts';

const result = (host: string, extra: Partial<StepResult>): StepResult => ({
  step: 'guest',
  host,
  status: 'ok',
  changes: [],
  durationMs: 1,
  ...extra,
});

test('changes of a rolling step say their wave; warnings show even on hosts that changed nothing', (t) => {
  const text = formatChanges(
    [
      result('etcd-1', {
        status: 'changed',
        rollPosition: 2,
        changes: [{ summary: 'restart etcd.service (one member at a time): running with other ETCD_QUOTA_BACKEND_BYTES' }],
      }),
      result('etcd-2', { status: 'changed', rollPosition: 1, changes: [{ summary: 'update /etc/etcd/etcd.env' }] }),
      result('etcd-3', { warnings: ["cloud-init's first boot ended in error in module(s) locale"] }),
      result('etcd-4', {}),
    ],
    { dryRun: true, diffs: true },
  );
  t.is(
    text,
    [
      'etcd-1:',
      '  guest (roll 2 of 2): would restart etcd.service (one member at a time): running with other ETCD_QUOTA_BACKEND_BYTES',
      'etcd-2:',
      '  guest (roll 1 of 2): would update /etc/etcd/etcd.env',
      'etcd-3:',
      "  guest: WARNING: cloud-init's first boot ended in error in module(s) locale",
    ].join('\n'),
  );
});

test('a real run prints summaries; diffs only when asked (--diff), as Ansible does; the recap says how long it took', (t) => {
  const results = [
    result('etcd-1', {
      status: 'changed',
      changes: [
        {
          summary: 'update /etc/chrony/chrony.conf',
          diff: { label: '/etc/chrony/chrony.conf', before: 'server a\n', after: 'server b\n' },
        },
      ],
    }),
  ];
  t.is(formatChanges(results, { dryRun: false, diffs: false }), 'etcd-1:\n  guest: update /etc/chrony/chrony.conf');
  const withDiff = formatChanges(results, { dryRun: false, diffs: true });
  t.regex(withDiff, /^ {4}-server a$/m);
  t.regex(withDiff, /^ {4}\+server b$/m);
  // A dry-run alike: the plan in lines, its diffs only when asked, and how many it left out when not.
  t.is(
    formatChanges(results, { dryRun: true, diffs: false }),
    'etcd-1:\n  guest: would update /etc/chrony/chrony.conf\n(1 of these changes have a diff: --diff shows them)',
  );
  t.regex(formatRecap(results, false, 5_432), /^RECAP in 5\.4 s\netcd-1 +ok=0 {2}changed=1 {2}failed=0 {2}skipped=0$/);
});

test('--profile: time per step and host, a step that ran twice added up, the slowest step first', (t) => {
  const profile = formatProfile([
    { step: 'pki', host: 'localhost', status: 'ok', changes: [], durationMs: 450 },
    { step: 'render', host: 'etcd-1', status: 'changed', changes: [], durationMs: 10 },
    { step: 'guest', host: 'etcd-1', status: 'ok', changes: [], durationMs: 1630 },
    { step: 'guest', host: 'etcd-2', status: 'ok', changes: [], durationMs: 140_300 },
    { step: 'render', host: 'etcd-1', status: 'ok', changes: [], durationMs: 15 },
  ]);
  t.is(
    profile,
    [
      'PROFILE (each step on each host, slowest step first)',
      'guest   etcd-1 1.63 s  etcd-2 140.30 s',
      'pki     localhost 0.45 s',
      'render  etcd-1 0.03 s',
    ].join('\n'),
  );
});

test('--profile: the phases follow in the order they ran, with what no step shows (a phase that asks ahead)', (t) => {
  const profile = formatProfile(
    [{ step: 'pki', host: 'localhost', status: 'ok', changes: [], durationMs: 12 }],
    [
      { phase: 'pki', ms: 15 },
      { phase: 'cluster', ms: 1210 },
      { phase: 'owner', ms: 1632.4 },
    ],
  );
  t.is(profile.split('\n').at(-1), 'phases (wall-clock, in order): pki 0.01 s, cluster 1.21 s, owner 1.63 s');
});

test('the recap names each hypervisor the run could not reach, its members and why; nothing when every host answered', (t) => {
  t.is(formatUnreachable([]), '');
  t.is(
    formatUnreachable([
      {
        hypervisor: 'kvm-2',
        members: ['etcd-2', 'etcd-5'],
        at: 'root@10.0.0.2:22',
        reason: 'hypervisor kvm-2 (root@10.0.0.2:22): cannot connect: ETIMEDOUT',
        detail: 'cannot connect: ETIMEDOUT',
      },
      {
        hypervisor: 'kvm-3',
        members: [],
        at: 'root@10.0.0.3:22',
        reason: 'bastion jump (ops@203.0.113.7:22): cannot connect: ECONNREFUSED',
      },
    ]),
    [
      'UNREACHABLE (their members failed; the others went on)',
      'hypervisor kvm-2 at root@10.0.0.2:22 (etcd-2, etcd-5): cannot connect: ETIMEDOUT',
      'hypervisor kvm-3 (no member in this run): bastion jump (ops@203.0.113.7:22): cannot connect: ECONNREFUSED',
    ].join('\n'),
  );
});

test("with --diff every change's line comes first, host by host, a failure among them; the diffs follow, each under its host, step and change", (t) => {
  const fileChange = (path: string, before: string, after: string) => ({ summary: `update ${path}`, diff: { label: path, before, after } });
  const text = formatChanges(
    [
      result('etcd-1', {
        status: 'changed',
        changes: [fileChange('/etc/etcd/etcd.env', 'A=1\n', 'A=2\n'), { summary: 'restart etcd.service' }],
      }),
      result('etcd-2', { status: 'failed', error: 'the hypervisor did not answer' }),
      result('etcd-3', { step: 'render', status: 'changed', changes: [fileChange('user-data', 'x\n', 'y\n')] }),
    ],
    { dryRun: true, diffs: true },
  );
  const lines = text.split('\n');
  t.deepEqual(lines.slice(0, 8), [
    'etcd-1:',
    '  guest: would update /etc/etcd/etcd.env',
    '  guest: would restart etcd.service',
    'etcd-2:',
    '  guest: FAILED: the hypervisor did not answer',
    'etcd-3:',
    '  render: would update user-data',
    '',
  ]);
  t.is(lines[8], 'diffs:');
  t.is(lines[9], 'etcd-1 guest: would update /etc/etcd/etcd.env');
  t.true(lines.indexOf('    +A=2') > 9 && lines.indexOf('    +A=2') < lines.indexOf('etcd-3 render: would update user-data'), text);
  t.regex(text, /^etcd-3 render: would update user-data\n {4}--- user-data \(current\)\n {4}\+\+\+ user-data \(wanted\)$/m);
  t.false(text.includes('--diff shows them'));
});
