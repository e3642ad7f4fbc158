import test from 'ava';
import { defragLine, parseDefragRun } from '../../tasks/status/defrag-records.ts';

const at = new Date('2026-11-26T10:00:00Z');
const record = (time: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({
    member: 'x',
    time,
    seconds: 0.4,
    before: { size: 8 * 1024 * 1024, in_use: 1024 * 1024 },
    after: { size: 1024 * 1024, in_use: 1024 * 1024 },
    ...extra,
  });

test("status's defrag line: each member in the inventory's order, its last defragmentation's age and sizes, or never", (t) => {
  const line = defragLine(
    {
      'etcd-1': record('2026-11-26T09:57:00Z', { leadership_moved_to: 'etcd-2' }),
      'etcd-3': record('2026-11-26T09:59:30Z'),
      'etcd-9': record('2026-11-26T09:59:30Z'),
    },
    ['etcd-1', 'etcd-2', 'etcd-3'],
    at,
  );
  t.is(
    line,
    'defrag (scheduled): etcd-1 3 min ago (8.0 MiB → 1.0 MiB, leadership to etcd-2), etcd-2 never, etcd-3 30 s ago (8.0 MiB → 1.0 MiB)',
  );
});

test('a record the agent did not write is said to be unreadable, not taken for a defragmentation', (t) => {
  t.is(parseDefragRun('{"time": "yesterday"}'), undefined);
  t.is(parseDefragRun('not json'), undefined);
  t.regex(defragLine({ 'etcd-1': '{}' }, ['etcd-1'], at), /etcd-1 unreadable record/);
});
