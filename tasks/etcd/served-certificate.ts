import { X509Certificate } from 'node:crypto';
import { connect, type PeerCertificate } from 'node:tls';
import type { Member } from '../inventory/model.ts';
import type { ClientIdentity, EtcdClients } from './client.ts';

/** The leaf certificate a member's client port presents, verified against the cluster's CA: its end, and itself (PEM). */
export async function servedCertificate(
  clients: EtcdClients,
  member: Member,
  identity: ClientIdentity,
): Promise<{ notAfter: Date; pem: string }> {
  const { host, port } = await clients.endpoint(member);
  const peer = await new Promise<PeerCertificate>((resolve, reject) => {
    const socket = connect({ host, port, servername: member.name, ca: identity.caCert, ALPNProtocols: ['h2'] }, () => {
      resolve(socket.getPeerCertificate());
      socket.end();
    });
    socket.setTimeout(5_000, () => socket.destroy(new Error('TLS handshake timed out after 5 s')));
    socket.once('error', reject);
  });
  return { notAfter: new Date(peer.valid_to), pem: new X509Certificate(peer.raw).toString() };
}
