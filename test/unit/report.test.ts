import test from 'ava';
import { formatChanges } from '../../tasks/core/report.ts';
import type { StepResult } from '../../tasks/core/step.ts';

const result = (host: string, extra: Partial<StepResult>): StepResult => ({ step: 'guest', host, status: 'ok', changes: [], durationMs: 1, ...extra });

test('changes of a rolling step say their wave; warnings show even on hosts that changed nothing', (t) => {
  const text = formatChanges(
    [
      result('etcd-1', { status: 'changed', rollPosition: 2, changes: [{ summary: 'restart etcd.service (one member at a time): running with other ETCD_QUOTA_BACKEND_BYTES' }] }),
      result('etcd-2', { status: 'changed', rollPosition: 1, changes: [{ summary: 'update /etc/etcd/etcd.env' }] }),
      result('etcd-3', { warnings: ["cloud-init's first boot ended in error in module(s) locale"] }),
      result('etcd-4', {}),
    ],
    true,
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
