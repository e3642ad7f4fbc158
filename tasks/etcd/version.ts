import { get } from 'node:https';
import { revealSecret } from '../core/secret.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { ClientIdentity, MemberClients } from './client.ts';
import { memberStatus } from './member-status.ts';
import { minorOf, parseVersion } from '../upgrade/version.ts';

/** etcd's `/version` on a member's client port: its own version and the cluster's. */
export async function versionOf(
  clients: MemberClients,
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

export class MixedVersionsError extends Error {}

/**
 * Refuses a user, role or auth change while the members run two minors of etcd (a roll half done):
 * a password set through a 3.5 member reaches 3.4 members as a hash of the empty password (3.5 hashes
 * before it proposes, 3.4 when it applies), which no later check shows — seen on the lab. A member
 * that does not answer is not counted: it applies nothing until it is back.
 */
export async function refuseMixedMinors(inventory: Inventory, clients: MemberClients): Promise<void> {
  const answers = await Promise.all(
    inventory.members.map(async (member) => ({
      name: member.name,
      version: await memberStatus(clients, member)
        .then((status) => status.version)
        .catch(() => undefined),
    })),
  );
  const minors = new Set(
    answers.flatMap(({ version }) => {
      if (!version) return [];
      const parsed = parseVersion(version);
      return [parsed ? minorOf(parsed) : version];
    }),
  );
  if (minors.size > 1) {
    const running = answers.map(({ name, version }) => `${name} ${version ?? '(no answer)'}`).join(', ');
    throw new MixedVersionsError(
      `the members run two minors of etcd (${running}): no user, role or auth change until every ` +
        `member runs one (etcd 3.4 and 3.5 store passwords differently); finish the roll (deploy) first`,
    );
  }
}
