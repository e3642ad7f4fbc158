import test from 'ava';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createSecureServer, type Http2SecureServer } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EtcdClients } from '../../tasks/etcd/client.ts';
import { HypervisorConnections } from '../../tasks/remote/hypervisors.ts';
import { run } from '../helpers/exec.ts';
import { baseDocument, load } from '../helpers/inventory.ts';

/**
 * Every gRPC call the tool makes has a deadline: a member that takes a call and never answers it (a
 * question, or a snapshot stream) must not hold the run. The member here is a TLS HTTP/2 server that
 * accepts every call and answers none.
 */

interface SilentMember {
  server: Http2SecureServer;
  port: number;
  caCert: string;
  /** The gRPC methods asked, as their paths. */
  asked: string[];
  dir: string;
}

async function silentMember(): Promise<SilentMember> {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-silent-'));
  const made = run('openssl', [
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-days',
    '1',
    '-subj',
    '/CN=etcd-1',
    '-addext',
    'subjectAltName=DNS:etcd-1,IP:127.0.0.1',
    '-keyout',
    join(dir, 'key.pem'),
    '-out',
    join(dir, 'cert.pem'),
  ]);
  if (made.status !== 0) throw new Error(made.stderr);
  const caCert = readFileSync(join(dir, 'cert.pem'), 'utf8');
  const asked: string[] = [];
  const server = createSecureServer({ key: readFileSync(join(dir, 'key.pem')), cert: caCert });
  // Taken, never answered: the client's deadline is all that ends the call.
  server.on('stream', (_stream, headers) => asked.push(String(headers[':path'])));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as AddressInfo).port, caCert, asked, dir };
}

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
  const stream = (await client.maintenance.snapshot()) as unknown as AsyncIterable<unknown>;
  const ended = (async () => {
    try {
      for await (const _ of stream);
      return 'ended without an error';
    } catch (error) {
      return (error as Error).message;
    }
  })();
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
