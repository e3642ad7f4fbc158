import { get } from 'node:https';
import { revealSecret } from '../core/secret.ts';
import type { Member } from '../inventory/model.ts';
import type { ClientIdentity, EtcdClients } from './client.ts';

/** etcd's `/version` on a member's client port: its own version and the cluster's. */
export async function versionOf(
  clients: EtcdClients,
  member: Member,
  identity: ClientIdentity,
): Promise<{ etcdserver: string; etcdcluster: string }> {
  const { host, port } = await clients.endpoint(member);
  const body = await new Promise<string>((resolve, reject) => {
    const request = get(
      {
        host,
        port,
        path: '/version',
        servername: member.name,
        ca: identity.caCert,
        ...(identity.cert && identity.key ? { cert: identity.cert, key: revealSecret(identity.key) } : {}),
        timeout: 5_000,
      },
      (response) => {
        let text = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (text += chunk));
        response.on('end', () =>
          response.statusCode === 200 ? resolve(text) : reject(new Error(`/version: HTTP ${response.statusCode}`)),
        );
      },
    );
    request.on('timeout', () => request.destroy(new Error('/version: no answer in 5 s')));
    request.once('error', reject);
  });
  const parsed = JSON.parse(body) as { etcdserver?: unknown; etcdcluster?: unknown };
  if (typeof parsed.etcdserver !== 'string' || typeof parsed.etcdcluster !== 'string')
    throw new Error(`/version answered ${body.slice(0, 100)}`);
  return { etcdserver: parsed.etcdserver, etcdcluster: parsed.etcdcluster };
}
