import test from 'ava';
import { waitForHealth } from '../../tasks/etcd/health.ts';
import { loadInventory } from '../../tasks/inventory/load.ts';
import type { Member } from '../../tasks/inventory/model.ts';
import { type ForwardingHypervisors, HypervisorUnreachable, MemberConnections } from '../../tasks/remote/members.ts';
import { SshError } from '../../tasks/remote/ssh.ts';
import { standInClients } from '../helpers/stand-ins.ts';

/** Waiting for a booting member's SSH, or for its etcd, ends at once when its hypervisor cannot be reached. */

const member = loadInventory('inventories/lab.yaml').members[0]!;

test('a hypervisor that cannot be reached ends the wait for a booting member at once, naming the hypervisor', async (t) => {
  let asked = 0;
  const hypervisors: ForwardingHypervisors = {
    get: async () => {
      asked++;
      throw new SshError('hypervisor lab (root@127.0.0.1:2222): cannot connect: connect ECONNREFUSED 127.0.0.1:2222');
    },
  };
  const connections = new MemberConnections(hypervisors, { privateKey: () => '', knownHostsPath: '/dev/null' });
  const started = Date.now();
  const error = await t.throwsAsync(connections.reach(member, { windowMs: 60_000 }));
  t.true(error instanceof HypervisorUnreachable);
  t.is(error?.message, 'hypervisor lab (root@127.0.0.1:2222): cannot connect: connect ECONNREFUSED 127.0.0.1:2222');
  t.is(asked, 1, 'asked once, not for the whole window');
  t.true(Date.now() - started < 5_000);
});

test("a window of 0 (a dry-run's patience) tries a booting member's SSH once; a window tries it again", async (t) => {
  const attempts = async (windowMs: number) => {
    let asked = 0;
    // The hypervisor answers; the member behind it refuses (still booting).
    const hypervisors: ForwardingHypervisors = {
      get: async () => ({
        forward: async () => {
          asked++;
          throw new SshError('member etcd-1: connect ECONNREFUSED 192.168.150.11:22');
        },
      }),
    };
    const connections = new MemberConnections(hypervisors, { privateKey: () => '', knownHostsPath: '/dev/null' });
    const error = await t.throwsAsync(connections.reach(member, { windowMs }));
    t.false(error instanceof HypervisorUnreachable);
    return asked;
  };
  t.is(await attempts(0), 1);
  t.is(await attempts(2_500), 2, 'tried again after 2 s, within the window');
});

test("the health wait ends at once when the member's hypervisor became unreachable (a dead tunnel looks like a member that is down)", async (t) => {
  const inventory = loadInventory('inventories/lab.yaml');
  let asked = 0;
  const clients = standInClients({
    for: async () => {
      asked++;
      throw new Error('14 UNAVAILABLE: No connection established');
    },
    unreachable: (of: Member) =>
      of.hypervisor.name === 'lab' ? 'hypervisor lab (root@127.0.0.1:2222): cannot connect: read ECONNRESET' : undefined,
  });
  const started = Date.now();
  await t.throwsAsync(waitForHealth(inventory, clients, member, 60_000), {
    message: 'etcd on etcd-1 cannot be asked: hypervisor lab (root@127.0.0.1:2222): cannot connect: read ECONNRESET',
  });
  t.is(asked, 1);
  t.true(Date.now() - started < 5_000);
});
