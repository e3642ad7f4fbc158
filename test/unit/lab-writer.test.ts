import test from 'ava';
import { longestGap, tallied } from '../helpers/lab-writer.ts';

// The writer's output as test/helpers/writer.ts prints it, read into what a client saw: the e2e's gap bound and
// bench:availability's table both stand on this reading.

test('acknowledgements are read with their times; only the write errors count as retries', (t) => {
  const acks = 'ack 1 1000\nack 2 1200\nack 3 4700\n';
  const errors =
    'write 3 through https://192.168.150.11:2379 after 12 ms: 14 UNAVAILABLE\n(node:42) Warning: something else\nwrite 3 through https://192.168.150.12:2379 after 3001 ms: deadline\n';
  t.deepEqual(tallied(acks, errors), {
    acked: [
      { key: '1', at: 1000 },
      { key: '2', at: 1200 },
      { key: '3', at: 4700 },
    ],
    retries: [
      'write 3 through https://192.168.150.11:2379 after 12 ms: 14 UNAVAILABLE',
      'write 3 through https://192.168.150.12:2379 after 3001 ms: deadline',
    ],
    longestGapMs: 3500,
  });
});

test('a line cut short by the writer being stopped is not an acknowledgement', (t) => {
  t.deepEqual(tallied('ack 1 1000\nack 2 12', '').acked, [{ key: '1', at: 1000 }]);
});

test('the longest gap is between consecutive times whatever their order, and 0 with fewer than two', (t) => {
  t.is(longestGap([5000, 1000, 1500]), 3500);
  t.is(longestGap([1000]), 0);
  t.is(longestGap([]), 0);
});
