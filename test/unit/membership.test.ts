import test from 'ava';
import { loadInventory } from '../../tasks/inventory/load.ts';
import { inventoryOf, MembershipRefusal, planMembership, type LiveMember } from '../../tasks/etcd/membership.ts';

/** Who joins, as a table: the inventory and etcd's member list in; voting members, joiners and refusals out. */

const lab = loadInventory('inventories/lab.yaml');
// The lab with a fourth member, as an operator grows it: the third member's entry with the next address.
const grown = (() => {
  const third = lab.members[2]!;
  const fourth = { ...third, name: 'etcd-4', etcdIp: '192.168.150.14', index: 3 };
  return { ...lab, members: [...lab.members, fourth] };
})();

const live = (name: string, ip: string, id: string, isLearner = false): LiveMember => ({
  id,
  name,
  peerURLs: [`https://${ip}:2380`],
  isLearner,
});
const THREE = [live('etcd-1', '192.168.150.11', '11'), live('etcd-2', '192.168.150.12', '12'), live('etcd-3', '192.168.150.13', '13')];

/** The grown lab with etcd-4 marked state: absent, as an operator shrinks it back. */
const shrunk = { ...grown, members: grown.members.slice(0, 3), absentMembers: [grown.members[3]!] };
const WITHOUT_TWO = [THREE[0]!, THREE[2]!];
const RESUMED = 'a replacement an earlier run began (its domain is marked as being replaced)';

interface Plan {
  name: string;
  inventory: typeof lab;
  list: LiveMember[];
  options?: Parameters<typeof planMembership>[2];
  voting: string[];
  /** name:stage */
  joiners: string[];
  /** name:id (- once etcd has let it go) */
  leavers?: string[];
  /** name:id:why (- once etcd has let it go) */
  replaced?: string[];
}

const plans: Plan[] = [
  {
    name: 'every member in etcd: all voting, nobody joins',
    inventory: lab,
    list: THREE,
    voting: ['etcd-1', 'etcd-2', 'etcd-3'],
    joiners: [],
  },
  {
    name: 'a member new to the inventory: it joins, to be added',
    inventory: grown,
    list: THREE,
    voting: ['etcd-1', 'etcd-2', 'etcd-3'],
    joiners: ['etcd-4:to-add'],
  },
  {
    name: 'a member new to the inventory while nothing is marked: a plain join, never a replacement',
    inventory: grown,
    list: THREE,
    options: { replace: new Set(), disksGone: new Map(), markedReplacing: new Set() },
    voting: ['etcd-1', 'etcd-2', 'etcd-3'],
    joiners: ['etcd-4:to-add'],
  },
  {
    name: 'a run stopped after adding the learner: it is found by its peer URL, added but not started',
    inventory: grown,
    list: [...THREE, live('', '192.168.150.14', '14', true)],
    voting: ['etcd-1', 'etcd-2', 'etcd-3'],
    joiners: ['etcd-4:added'],
  },
  {
    name: 'a run stopped before the promotion: a started learner, to promote',
    inventory: grown,
    list: [...THREE, live('etcd-4', '192.168.150.14', '14', true)],
    voting: ['etcd-1', 'etcd-2', 'etcd-3'],
    joiners: ['etcd-4:learning'],
  },
  {
    name: 'a promoted member: voting',
    inventory: grown,
    list: [...THREE, live('etcd-4', '192.168.150.14', '14')],
    voting: ['etcd-1', 'etcd-2', 'etcd-3', 'etcd-4'],
    joiners: [],
  },
  {
    name: 'a member marked absent that etcd has: it leaves, by its ID',
    inventory: shrunk,
    list: [...THREE, live('etcd-4', '192.168.150.14', '14')],
    voting: ['etcd-1', 'etcd-2', 'etcd-3'],
    joiners: [],
    leavers: ['etcd-4:14'],
  },
  {
    name: 'a member marked absent that etcd no longer has (a run stopped after removing it): its VM still goes',
    inventory: shrunk,
    list: THREE,
    voting: ['etcd-1', 'etcd-2', 'etcd-3'],
    joiners: [],
    leavers: ['etcd-4:-'],
  },
  {
    name: 'a voting member whose disks are gone: replaced, then it joins again',
    inventory: lab,
    list: THREE,
    options: { disksGone: new Map([['etcd-2', 'its OS volume is gone']]) },
    voting: ['etcd-1', 'etcd-3'],
    joiners: ['etcd-2:to-add'],
    replaced: ['etcd-2:12:its OS volume is gone'],
  },
  {
    name: '--replace of a healthy member: the same',
    inventory: lab,
    list: THREE,
    options: { replace: new Set(['etcd-3']) },
    voting: ['etcd-1', 'etcd-2'],
    joiners: ['etcd-3:to-add'],
    replaced: ['etcd-3:13:asked by --replace'],
  },
  // Finding: after MemberRemove, nothing in etcd's list said that etcd-2's old VM and disks were to go,
  // and the next run joined it on them (a learner starting on the data directory of a removed member).
  {
    name: 'a replacement stopped after its removal (its domain marked): finished — VM and disks go, then it joins',
    inventory: lab,
    list: WITHOUT_TWO,
    options: { markedReplacing: new Set(['etcd-2']) },
    voting: ['etcd-1', 'etcd-3'],
    joiners: ['etcd-2:to-add'],
    replaced: [`etcd-2:-:${RESUMED}`],
  },
  {
    name: '--replace of a member etcd no longer lists: a replacement without the removal, not a plain join',
    inventory: lab,
    list: WITHOUT_TWO,
    options: { replace: new Set(['etcd-2']) },
    voting: ['etcd-1', 'etcd-3'],
    joiners: ['etcd-2:to-add'],
    replaced: ['etcd-2:-:asked by --replace'],
  },
  {
    name: 'a replacement stopped after marking the domain, before the removal: finished, by its ID',
    inventory: lab,
    list: THREE,
    options: { markedReplacing: new Set(['etcd-3']) },
    voting: ['etcd-1', 'etcd-2'],
    joiners: ['etcd-3:to-add'],
    replaced: [`etcd-3:13:${RESUMED}`],
  },
  {
    name: 'a learner whose domain is marked (its join met an old marked domain): removed and replaced, then it joins',
    inventory: grown,
    list: [...THREE, live('', '192.168.150.14', '14', true)],
    options: { markedReplacing: new Set(['etcd-4']) },
    voting: ['etcd-1', 'etcd-2', 'etcd-3'],
    joiners: ['etcd-4:to-add'],
    replaced: [`etcd-4:14:${RESUMED}`],
  },
  {
    name: 'a replaced member whose run stopped after its domain was undefined (no mark, nothing of it left): a plain joiner',
    inventory: lab,
    list: WITHOUT_TWO,
    options: { disksGone: new Map(), markedReplacing: new Set() },
    voting: ['etcd-1', 'etcd-3'],
    joiners: ['etcd-2:to-add'],
  },
];

for (const row of plans) {
  test(`membership: ${row.name}`, (t) => {
    const plan = planMembership(row.inventory, row.list, row.options);
    t.deepEqual(
      {
        voting: plan.voting.map((m) => m.name),
        joiners: plan.joiners.map((j) => `${j.member.name}:${j.stage}`),
        leavers: plan.leavers.map((l) => `${l.member.name}:${l.id ?? '-'}`),
        replaced: plan.replacements.map((r) => `${r.member.name}:${r.id ?? '-'}:${r.why}`),
      },
      { voting: row.voting, joiners: row.joiners, leavers: row.leavers ?? [], replaced: row.replaced ?? [] },
    );
  });
}

interface Refusal {
  name: string;
  inventory: typeof lab;
  list: LiveMember[];
  options?: Parameters<typeof planMembership>[2];
  refused: RegExp;
}

const refusals: Refusal[] = [
  {
    name: 'replacing every voting member is refused: the cluster would be gone',
    inventory: lab,
    list: THREE,
    options: { replace: new Set(['etcd-1', 'etcd-2', 'etcd-3']) },
    refused: /every voting member is to be replaced .*restore it from a snapshot instead/,
  },
  {
    name: 'finishing marked replacements of every voting member is refused the same',
    inventory: lab,
    list: THREE,
    options: { markedReplacing: new Set(['etcd-1', 'etcd-2', 'etcd-3']) },
    refused: /every voting member is to be replaced .*restore it from a snapshot instead/,
  },
  {
    name: 'a member missing from the inventory is refused, never removed for that alone',
    inventory: lab,
    list: [...THREE, live('etcd-9', '192.168.150.19', '99')],
    refused:
      /etcd has member etcd-9 \(ID 63, https:\/\/192.168.150.19:2380\), which the inventory does not have\. Leaving a member out of the inventory does not remove it; .*or mark it state: absent/,
  },
  {
    name: 'a member whose address changed in the inventory is refused',
    inventory: { ...lab, members: lab.members.map((m) => (m.name === 'etcd-2' ? { ...m, etcdIp: '192.168.150.22' } : m)) },
    list: THREE,
    refused:
      /etcd has a member named etcd-2 at https:\/\/192.168.150.12:2380, but the inventory puts etcd-2 at https:\/\/192.168.150.22:2380/,
  },
  {
    name: "another name at an inventory member's address is refused",
    inventory: lab,
    list: [THREE[0]!, THREE[1]!, live('other', '192.168.150.13', '13')],
    refused: /etcd's member at https:\/\/192.168.150.13:2380 is named other, but the inventory names etcd-3 there/,
  },
  {
    name: 'a cluster that shares no member with the inventory is refused',
    inventory: lab,
    list: [],
    refused: /no member of the inventory is a voting member/,
  },
];

for (const row of refusals) {
  test(`membership refused: ${row.name}`, (t) => {
    const error = t.throws(() => planMembership(row.inventory, row.list, row.options), { instanceOf: MembershipRefusal });
    t.regex(error!.message, row.refused);
    t.regex(error!.message, /Nothing was changed\.$/);
  });
}

test("membership: two new members join in the inventory's order, a half-joined one first", (t) => {
  const fifth = { ...grown.members[3]!, name: 'etcd-5', etcdIp: '192.168.150.15', index: 4 };
  const five = { ...grown, members: [...grown.members, fifth] };
  t.deepEqual(
    planMembership(five, THREE).joiners.map((j) => `${j.member.name}:${j.stage}`),
    ['etcd-4:to-add', 'etcd-5:to-add'],
  );
  t.deepEqual(
    planMembership(five, [...THREE, live('', '192.168.150.15', '15', true)]).joiners.map((j) => `${j.member.name}:${j.stage}`),
    ['etcd-5:added', 'etcd-4:to-add'],
  );
});

test("membership: the cluster during a join is the members so far, in the inventory's order", (t) => {
  const during = inventoryOf(grown, [grown.members[3]!, grown.members[0]!]);
  t.deepEqual(
    during.members.map((m) => m.name),
    ['etcd-1', 'etcd-4'],
  );
  t.is(during.etcd, grown.etcd);
});
