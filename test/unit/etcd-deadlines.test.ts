import test from 'ava';
import { rmSync } from 'node:fs';
import { EtcdClients } from '../../tasks/etcd/client.ts';
import { HypervisorConnections } from '../../tasks/remote/hypervisors.ts';
import { baseDocument, load } from '../helpers/inventory.ts';
import { silentMember } from '../helpers/silent-etcd.ts';

/**
 * Every gRPC call the tool makes has a deadline: a member that takes a call and never answers it (a
 * question, or a snapshot stream) must not hold the run. The member here is a TLS HTTP/2 server that
 * accepts every call and answers none.
 */

test('a member that takes a call and never answers fails it at its deadline: a question, a snapshot stream; a call with a deadline of its own keeps it', async (t) => {
  const member = await silentMember();
  const inventoryMember = { ...load(baseDocument()).members[0]!, reach: 'direct' as const, etcdIp: '127.0.0.1' };
  const clients = new EtcdClients(new HypervisorConnections(), member.port, () => ({ label: 'anonymous', caCert: member.caCert }), {
    unaryMs: 1_000,
    streamMs: 2_000,
  });
  t.teardown(() => {
    clients.close();
    member.server.close();
    rmSync(member.dir, { recursive: true, force: true });
  });
  const client = await clients.for(inventoryMember);

  let started = performance.now();
  await t.throwsAsync(client.maintenance.status({}), { message: /deadline exceeded/i });
  t.true(performance.now() - started < 4_000, `the question ended after ${Math.round(performance.now() - started)} ms`);

  started = performance.now();
  const stream = await client.maintenance.snapshot();
  // The stream as etcd3 declares it: its end, or its error.
  const ended = new Promise<string>((resolve) => {
    stream.on('data', () => undefined);
    stream.on('end', () => resolve('ended without an error'));
    stream.on('error', (error) => resolve(error.message));
  });
  // Far past its deadline: a stream without one would still be waiting.
  const waited = new Promise<string>((resolve) => setTimeout(() => resolve('still waiting after 10 s'), 10_000).unref());
  t.regex(await Promise.race([ended, waited]), /deadline exceeded/i);
  t.true(performance.now() - started < 8_000, `the snapshot ended after ${Math.round(performance.now() - started)} ms`);

  // A call that needs longer says so itself (defragmentation does): the default does not cut it.
  started = performance.now();
  await t.throwsAsync(client.maintenance.defragment({ deadline: Date.now() + 2_000 }), { message: /deadline exceeded/i });
  t.true(performance.now() - started >= 1_900, `the defragmentation ended after ${Math.round(performance.now() - started)} ms`);
  // The first question may reach its deadline while the connection is still being made (under load): the later calls were held by the member.
  t.deepEqual(member.asked.slice(-2), ['/etcdserverpb.Maintenance/Snapshot', '/etcdserverpb.Maintenance/Defragment']);
});
