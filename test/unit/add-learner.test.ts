import test from 'ava';
import { Etcd3 } from 'etcd3';
import type { MemberClients } from '../../tasks/etcd/client.ts';
import type { Member } from '../../tasks/inventory/model.ts';
import { loadInventory } from '../../tasks/inventory/load.ts';
import { addLearnerStep } from '../../tasks/steps/join.ts';
import { standInClients } from '../helpers/stand-ins.ts';

/** Adding a learner while etcd refuses it for a moment: asked again only while nothing can have been added. */

const lab = loadInventory('inventories/lab.yaml');
const [one, two, three] = lab.members as [Member, Member, Member];

/** etcd's member add as the voting members answer it, in order, one answer per call; what was asked. */
function clientsAnswering(answers: (Error | 'added')[]): { clients: MemberClients; calls: string[] } {
  const calls: string[] = [];
  const clients = standInClients({
    for: async (member: Member) => {
      // A client that connects nowhere (it is never asked over the network): only its member add answers.
      const client = new Etcd3({ hosts: '127.0.0.1:1' });
      client.cluster.memberAdd = async () => {
        calls.push(member.name);
        const answer = answers.shift() ?? new Error('no answer left in the test');
        if (answer instanceof Error) throw answer;
        return { header: { cluster_id: '1', member_id: '1', revision: '1', raft_term: '1' }, member: ADDED, members: [ADDED] };
      };
      opened.push(client);
      return client;
    },
  });
  return { clients, calls };
}

const ADDED = { ID: '3', name: '', peerURLs: ['https://192.168.150.13:2380'], clientURLs: [], isLearner: true };
const opened: Etcd3[] = [];
test.after.always(() => {
  for (const client of opened) client.close();
});

const apply = (clients: MemberClients) =>
  addLearnerStep({ inventory: lab, clients, voting: [one, two], joiner: three }).apply(
    [{ summary: 'add etcd-3', action: { kind: 'add-learner', peerUrl: 'https://192.168.150.13:2380' } }],
    three.name,
    { unhealthy: [] },
  );

const UNHEALTHY = () => new Error('14 UNAVAILABLE: etcdserver: unhealthy cluster');

test('etcd refusing a learner as "unhealthy cluster" (a member restarted moments ago): asked again until it is added', async (t) => {
  const { clients, calls } = clientsAnswering([UNHEALTHY(), UNHEALTHY(), 'added']);
  await apply(clients);
  // Each member asked in turn, then the first again after the pause: one add in all.
  t.deepEqual(calls, ['etcd-1', 'etcd-2', 'etcd-1']);
});

test('a timed-out add is never asked again: it may have gone through, and etcd would refuse a second (its peer URL exists)', async (t) => {
  const { clients, calls } = clientsAnswering([new Error('4 DEADLINE_EXCEEDED: etcdserver: unhealthy cluster'), UNHEALTHY()]);
  await t.throwsAsync(apply(clients), { message: /DEADLINE_EXCEEDED/ });
  t.deepEqual(calls, ['etcd-1', 'etcd-2']);
});

test('any other refusal is not asked again', async (t) => {
  const { clients, calls } = clientsAnswering([
    new Error('9 FAILED_PRECONDITION: etcdserver: too many learner members in cluster'),
    new Error('same'),
  ]);
  await t.throwsAsync(apply(clients), { message: /too many learner members/ });
  t.deepEqual(calls, ['etcd-1', 'etcd-2']);
});
