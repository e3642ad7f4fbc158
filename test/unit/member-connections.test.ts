import test from 'ava';
import { loadInventory } from '../../tasks/inventory/load.ts';
import type { HypervisorConnections } from '../../tasks/remote/hypervisors.ts';
import { HypervisorUnreachable, MemberConnections } from '../../tasks/remote/members.ts';
import { SshError } from '../../tasks/remote/ssh.ts';

/** Waiting for a booting member's SSH ends at once when its hypervisor cannot be reached. */

const member = loadInventory('inventories/lab.yaml').members[0]!;

test('a hypervisor that cannot be reached ends the wait for a booting member at once, naming the hypervisor', async (t) => {
  let asked = 0;
  const hypervisors = {
    get: async () => {
      asked++;
      throw new SshError('hypervisor lab (root@127.0.0.1:2222): cannot connect: connect ECONNREFUSED 127.0.0.1:2222');
    },
  } as unknown as HypervisorConnections;
  const connections = new MemberConnections(hypervisors, { privateKey: () => '', knownHostsPath: '/dev/null' });
  const started = Date.now();
  const error = await t.throwsAsync(connections.reach(member, { windowMs: 60_000, once: false }));
  t.true(error instanceof HypervisorUnreachable);
  t.is(error?.message, 'hypervisor lab (root@127.0.0.1:2222): cannot connect: connect ECONNREFUSED 127.0.0.1:2222');
  t.is(asked, 1, 'asked once, not for the whole window');
  t.true(Date.now() - started < 5_000);
});
