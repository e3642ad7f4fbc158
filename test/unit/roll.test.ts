import test from 'ava';
import { healthyOthersNeeded, quorumOf, rollOrder, type RollCandidate } from '../../tasks/etcd/roll.ts';

const cases: { name: string; candidates: RollCandidate[]; leader?: string; waves: string[][] }[] = [
  {
    name: 'restarts: followers in inventory order, the leader last',
    candidates: [
      { target: 'etcd-1', kind: 'restarts' },
      { target: 'etcd-2', kind: 'restarts' },
      { target: 'etcd-3', kind: 'restarts' },
    ],
    leader: 'etcd-1',
    waves: [['etcd-2'], ['etcd-3'], ['etcd-1']],
  },
  {
    name: 'the leader in the middle of the inventory still goes last',
    candidates: [
      { target: 'etcd-1', kind: 'restarts' },
      { target: 'etcd-2', kind: 'restarts' },
      { target: 'etcd-3', kind: 'restarts' },
    ],
    leader: 'etcd-2',
    waves: [['etcd-1'], ['etcd-3'], ['etcd-2']],
  },
  {
    name: 'changes that keep etcd running go first, together',
    candidates: [
      { target: 'etcd-1', kind: 'restarts' },
      { target: 'etcd-2', kind: 'keeps-running' },
      { target: 'etcd-3', kind: 'keeps-running' },
    ],
    leader: 'etcd-3',
    waves: [['etcd-2', 'etcd-3'], ['etcd-1']],
  },
  {
    name: 'members whose etcd is down start before any restart',
    candidates: [
      { target: 'etcd-1', kind: 'restarts' },
      { target: 'etcd-2', kind: 'starts' },
    ],
    leader: 'etcd-1',
    waves: [['etcd-2'], ['etcd-1']],
  },
  {
    name: 'no leader known (nothing answered): inventory order',
    candidates: [
      { target: 'etcd-2', kind: 'restarts' },
      { target: 'etcd-1', kind: 'restarts' },
    ],
    waves: [['etcd-2'], ['etcd-1']],
  },
  {
    name: 'a cold start: every member together',
    candidates: [
      { target: 'etcd-1', kind: 'starts' },
      { target: 'etcd-2', kind: 'starts' },
      { target: 'etcd-3', kind: 'starts' },
    ],
    waves: [['etcd-1', 'etcd-2', 'etcd-3']],
  },
];
for (const row of cases) {
  test(`roll order: ${row.name}`, (t) => {
    t.deepEqual(rollOrder(row.candidates, row.leader), row.waves);
  });
}

test('quorum: a majority of the voting members', (t) => {
  t.deepEqual([1, 2, 3, 4, 5, 6, 7].map(quorumOf), [1, 2, 2, 3, 3, 4, 4]);
});

test('healthy others needed before a member goes down: the quorum, or every other member of a cluster too small to keep one', (t) => {
  // 1 member: nothing else can be healthy, and a restart must still be possible; 2: the other one; 3 and up: a quorum.
  t.deepEqual([1, 2, 3, 4, 5, 7].map(healthyOthersNeeded), [0, 1, 2, 3, 3, 4]);
});
