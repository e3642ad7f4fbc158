import test from 'ava';
import {
  type Handoff,
  handoffFor,
  healthyOthersNeeded,
  quorumOf,
  rollOrder,
  type RollCandidate,
  type Standing,
} from '../../tasks/etcd/roll.ts';

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

const standing = (name: string, id: string, leaderId: string, applied: number, learner = false): Standing => ({
  name,
  id,
  leaderId,
  applied: BigInt(applied),
  learner,
});

const handoffCases: { name: string; member: string; standings: Standing[]; handoff: Handoff }[] = [
  {
    name: 'a follower hands nothing over',
    member: 'etcd-2',
    standings: [standing('etcd-1', '1', '1', 10), standing('etcd-2', '2', '1', 10), standing('etcd-3', '3', '1', 10)],
    handoff: { kind: 'not-leader' },
  },
  {
    name: 'the leader hands to the follower that has applied the most',
    member: 'etcd-1',
    standings: [standing('etcd-1', '1', '1', 20), standing('etcd-2', '2', '1', 18), standing('etcd-3', '3', '1', 19)],
    handoff: { kind: 'hand-to', to: 'etcd-3' },
  },
  {
    name: 'equal followers: the first in the inventory',
    member: 'etcd-3',
    standings: [standing('etcd-1', '1', '3', 20), standing('etcd-2', '2', '3', 20), standing('etcd-3', '3', '3', 20)],
    handoff: { kind: 'hand-to', to: 'etcd-1' },
  },
  {
    name: 'a member that follows another leader (a stale view) is not handed to',
    member: 'etcd-1',
    standings: [standing('etcd-1', '1', '1', 20), standing('etcd-2', '2', '3', 30), standing('etcd-3', '3', '1', 5)],
    handoff: { kind: 'hand-to', to: 'etcd-3' },
  },
  {
    name: 'a learner, however caught up, is not handed to (etcd refuses it)',
    member: 'etcd-1',
    standings: [standing('etcd-1', '1', '1', 20), standing('etcd-2', '2', '1', 18), standing('etcd-4', '4', '1', 20, true)],
    handoff: { kind: 'hand-to', to: 'etcd-2' },
  },
  {
    name: 'the leader with no follower answering: nobody to hand to',
    member: 'etcd-1',
    standings: [standing('etcd-1', '1', '1', 20)],
    handoff: { kind: 'nobody' },
  },
  {
    name: 'the member itself did not answer: not asked to hand anything over',
    member: 'etcd-1',
    standings: [standing('etcd-2', '2', '1', 20), standing('etcd-3', '3', '1', 20)],
    handoff: { kind: 'not-leader' },
  },
];

for (const { name, member, standings, handoff } of handoffCases)
  test(`handoff: ${name}`, (t) => t.deepEqual(handoffFor(member, standings), handoff));
