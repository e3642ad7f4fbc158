import test from 'ava';
import { knownHealth, orderDepartures, votingSets, type Departing, type KnownHealth } from '../../tasks/etcd/departures.ts';
import type { LiveMember } from '../../tasks/etcd/membership.ts';
import type { Member } from '../../tasks/inventory/model.ts';
import { loadInventory } from '../../tasks/inventory/load.ts';

/**
 * Members leaving in one run, as tables: what is known of each in, the order out; etcd's list in, the
 * voting set around a removal out.
 */

const lab = loadInventory('inventories/lab.yaml');
const [one, two, three] = lab.members as [Member, Member, Member];
const live = (name: string, ip: string, id: string, isLearner = false): LiveMember => ({
  id,
  name,
  peerURLs: [`https://${ip}:2380`],
  isLearner,
});
const THREE = [live('etcd-1', '192.168.150.11', '11'), live('etcd-2', '192.168.150.12', '12'), live('etcd-3', '192.168.150.13', '13')];

const leave = (member: Member): Departing => ({ departure: 'leave', member });
const replace = (member: Member): Departing => ({ departure: 'replace', member });
const named = (order: readonly Departing[]) => order.map(({ departure, member }) => `${departure} ${member.name}`);

interface Order {
  name: string;
  /** As the membership plan gives them: replacements, then leavers, each in the inventory's order. */
  given: Departing[];
  health: [string, KnownHealth][];
  order: string[];
}

const orders: Order[] = [
  // The finding's counterexample: etcd-2 first would leave {etcd-1, etcd-3}, one of two up.
  {
    name: 'etcd-3 down, etcd-2 and etcd-3 both absent: etcd-3 first',
    given: [leave(two), leave(three)],
    health: [
      ['etcd-2', 'up'],
      ['etcd-3', 'down'],
    ],
    order: ['leave etcd-3', 'leave etcd-2'],
  },
  {
    name: 'the same with --replace etcd-2,etcd-3',
    given: [replace(two), replace(three)],
    health: [
      ['etcd-2', 'up'],
      ['etcd-3', 'down'],
    ],
    order: ['replace etcd-3', 'replace etcd-2'],
  },
  {
    name: 'a healthy replacement and a leaver that is down: the leaver first',
    given: [replace(two), leave(three)],
    health: [
      ['etcd-2', 'up'],
      ['etcd-3', 'down'],
    ],
    order: ['leave etcd-3', 'replace etcd-2'],
  },
  {
    name: 'unknown (its hypervisor did not answer) before up: it may be down',
    given: [leave(two), leave(three)],
    health: [
      ['etcd-2', 'up'],
      ['etcd-3', 'unknown'],
    ],
    order: ['leave etcd-3', 'leave etcd-2'],
  },
  {
    name: 'down before unknown',
    given: [leave(one), leave(two), leave(three)],
    health: [
      ['etcd-1', 'unknown'],
      ['etcd-2', 'up'],
      ['etcd-3', 'down'],
    ],
    order: ['leave etcd-3', 'leave etcd-1', 'leave etcd-2'],
  },
  {
    name: 'all up: as given',
    given: [replace(three), leave(two)],
    health: [
      ['etcd-2', 'up'],
      ['etcd-3', 'up'],
    ],
    order: ['replace etcd-3', 'leave etcd-2'],
  },
  {
    name: 'all down: as given',
    given: [leave(two), leave(three)],
    health: [
      ['etcd-2', 'down'],
      ['etcd-3', 'down'],
    ],
    order: ['leave etcd-2', 'leave etcd-3'],
  },
  { name: 'nothing known: as given', given: [leave(two), leave(three)], health: [], order: ['leave etcd-2', 'leave etcd-3'] },
];

for (const row of orders) {
  test(`departure order: ${row.name}`, (t) => {
    t.deepEqual(named(orderDepartures(row.given, new Map(row.health))), row.order);
  });
}

const healths: { name: string; facts: Parameters<typeof knownHealth>[0]; health: KnownHealth }[] = [
  { name: 'etcd answers with a leader', facts: { domainRunning: true, etcdHasLeader: true }, health: 'up' },
  {
    name: 'etcd answers with a leader, the domain seen shut off earlier (started since)',
    facts: { domainRunning: false, etcdHasLeader: true },
    health: 'up',
  },
  { name: 'the domain does not run (etcd not asked)', facts: { domainRunning: false }, health: 'down' },
  {
    name: 'the domain runs, etcd answers without a leader or not at all',
    facts: { domainRunning: true, etcdHasLeader: false },
    health: 'down',
  },
  { name: 'the hypervisor did not answer and neither did etcd', facts: { etcdHasLeader: false }, health: 'unknown' },
  { name: 'nothing asked', facts: {}, health: 'unknown' },
];

for (const row of healths) {
  test(`known health: ${row.name}`, (t) => {
    t.is(knownHealth(row.facts), row.health);
  });
}

interface Sets {
  name: string;
  list: LiveMember[];
  member: Member;
  staying: Member[];
  alsoDeparting: Member[];
  assumedRemoved?: Member[];
  now: string[];
  after: string[];
}

const sets: Sets[] = [
  {
    name: 'etcd-2 leaving with etcd-3: etcd-3 still votes right after',
    list: THREE,
    member: two,
    staying: [one],
    alsoDeparting: [two, three],
    now: ['etcd-1', 'etcd-2', 'etcd-3'],
    after: ['etcd-1', 'etcd-3'],
  },
  {
    name: 'etcd-3 already removed: not counted',
    list: [THREE[0]!, THREE[1]!],
    member: two,
    staying: [one],
    alsoDeparting: [two, three],
    now: ['etcd-1', 'etcd-2'],
    after: ['etcd-1'],
  },
  {
    name: 'a learner departing: the voting set is the same before and after',
    list: [THREE[0]!, THREE[1]!, live('', '192.168.150.13', '13', true)],
    member: three,
    staying: [one, two],
    alsoDeparting: [three],
    now: ['etcd-1', 'etcd-2'],
    after: ['etcd-1', 'etcd-2'],
  },
  {
    name: 'a member that stays removed by hand meanwhile: etcd no longer counts it',
    list: [THREE[1]!, THREE[2]!],
    member: three,
    staying: [one, two],
    alsoDeparting: [three],
    now: ['etcd-2', 'etcd-3'],
    after: ['etcd-2'],
  },
  // A dry-run removes nothing: etcd still lists etcd-3 when etcd-2's departure is planned after it.
  {
    name: 'a dry-run, etcd-2 after etcd-3: etcd-3 counted as gone, health still judged against the list etcd has',
    list: THREE,
    member: two,
    staying: [one],
    alsoDeparting: [two, three],
    assumedRemoved: [three],
    now: ['etcd-1', 'etcd-2', 'etcd-3'],
    after: ['etcd-1'],
  },
];

for (const row of sets) {
  test(`voting sets: ${row.name}`, (t) => {
    const { now, after } = votingSets(lab, row.list, row.member, {
      staying: row.staying,
      alsoDeparting: row.alsoDeparting,
      assumedRemoved: row.assumedRemoved ?? [],
    });
    t.deepEqual({ now: now.map((m) => m.name), after: after.map((m) => m.name) }, { now: row.now, after: row.after });
  });
}
