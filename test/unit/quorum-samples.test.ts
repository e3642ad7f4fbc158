import test from 'ava';
import { belowQuorum } from '../helpers/quorum-samples.ts';

/** The e2e's quorum check (test/helpers/lab-watch.ts, quorumKept): samples in, stretches below quorum out. */

const ALL = ['etcd-1', 'etcd-2', 'etcd-3'];
const sample = (at: number, healthy: string[] = ALL) => ({ at, healthy });

const table: { name: string; samples: { at: number; healthy: string[] }[]; to: number; stretches: { fromMs: number; forMs: number }[] }[] =
  [
    { name: 'always two or more', samples: [sample(0), sample(500, ['etcd-1', 'etcd-2']), sample(1000)], to: 1500, stretches: [] },
    {
      name: 'one sample with none: a stretch until the next good one',
      samples: [sample(0), sample(500, []), sample(2500)],
      to: 3000,
      stretches: [{ fromMs: 500, forMs: 2000 }],
    },
    {
      name: 'two samples with one, 1.2 s apart (the roll of 22:38)',
      samples: [sample(5700), sample(6933, ['etcd-1']), sample(8102, ['etcd-1']), sample(9300)],
      to: 60_000,
      stretches: [{ fromMs: 6933, forMs: 2367 }],
    },
    {
      name: 'two members down for 5 s: one stretch of ten samples',
      samples: [sample(0), ...Array.from({ length: 10 }, (_, i) => sample(500 + i * 500, ['etcd-1'])), sample(5500)],
      to: 6000,
      stretches: [{ fromMs: 500, forMs: 5000 }],
    },
    {
      name: 'below quorum at the run end: until the end',
      samples: [sample(0), sample(500, ['etcd-3'])],
      to: 1000,
      stretches: [{ fromMs: 500, forMs: 500 }],
    },
  ];

for (const row of table)
  test(`below quorum: ${row.name}`, (t) => {
    t.deepEqual(belowQuorum(row.samples, row.to), row.stretches);
  });
