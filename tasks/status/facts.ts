import { briefError } from '../core/errors.ts';
import { connect, type PeerCertificate } from 'node:tls';
import type { Inventory, Member } from '../inventory/model.ts';
import type { ClientIdentity, EtcdClients } from '../etcd/client.ts';
import type { HypervisorConnections } from '../remote/hypervisors.ts';
import { saysDomainMissing, Virsh } from '../libvirt/virsh.ts';
import { membersByHypervisor } from '../inventory/placement.ts';
import { hexId, liveMember } from '../etcd/membership.ts';
import { versionOf } from '../etcd/version.ts';
import { memberStatus, type EtcdMemberFacts } from '../etcd/member-status.ts';

/**
 * What status reads, all of it read-only and asked at about the same moment: each hypervisor once
 * (virsh domstate of its members, one remote shell), each member's etcd once (status and alarms over
 * gRPC, the certificate it serves over TLS), and one member list.
 */

export type { EtcdMemberFacts };

export interface MemberFacts {
  name: string;
  hypervisor: string;
  /** virsh domstate's answer, `absent` when libvirt has no such domain, or why it is unknown. */
  vm: string;
  etcd: EtcdMemberFacts | { error: string };
  /** notAfter of the certificate the member serves on its client port. */
  servedCertificate: { notAfter: Date } | { error: string };
}

export interface ListedMember {
  id: string;
  name: string;
  isLearner: boolean;
  peerURLs: string[];
}

export interface StatusFacts {
  members: MemberFacts[];
  /** etcd's member list from the first member that answered (learners and unstarted members included). */
  memberList: ListedMember[] | { error: string };
  alarms: { memberId: string; alarm: string }[];
  /** `/version`'s `etcdcluster` (`3.5.0`), from the first member that answered: the minor every member supports. */
  clusterVersion: string | { error: string };
  caNotAfter?: Date;
  at: Date;
}

export { hexId };

export async function vmStates(members: readonly Member[], connections: HypervisorConnections): Promise<Map<string, string>> {
  const states = new Map<string, string>();
  await Promise.all(
    [...membersByHypervisor(members).values()].map(async (hosted) => {
      const { hypervisor } = hosted[0]!;
      try {
        const virsh = new Virsh(await connections.get(hypervisor), hypervisor.libvirt_uri);
        const answers = await virsh.probe(Object.fromEntries(hosted.map((member) => [member.name, ['domstate', member.name]])));
        for (const member of hosted) {
          const answer = answers[member.name];
          if (!answer) states.set(member.name, 'unknown (no answer)');
          else if (answer.code === 0) states.set(member.name, answer.output.trim());
          else states.set(member.name, saysDomainMissing(answer.output) ? 'absent' : `unknown (${answer.output.trim().split('\n')[0]})`);
        }
      } catch (error) {
        for (const member of hosted) states.set(member.name, `unknown (hypervisor ${hypervisor.name}: ${briefError(error)})`);
      }
    }),
  );
  return states;
}

/** The leaf certificate a member's client port presents, verified against the cluster's CA. */
async function servedCertificate(clients: EtcdClients, member: Member, identity: ClientIdentity): Promise<{ notAfter: Date }> {
  const { host, port } = await clients.endpoint(member);
  const peer = await new Promise<PeerCertificate>((resolve, reject) => {
    const socket = connect({ host, port, servername: member.name, ca: identity.caCert, ALPNProtocols: ['h2'] }, () => {
      resolve(socket.getPeerCertificate());
      socket.end();
    });
    socket.setTimeout(5_000, () => socket.destroy(new Error('TLS handshake timed out after 5 s')));
    socket.once('error', reject);
  });
  return { notAfter: new Date(peer.valid_to) };
}

export async function gatherStatus(
  inventory: Inventory,
  clients: EtcdClients,
  connections: HypervisorConnections,
  identity: ClientIdentity,
  caNotAfter?: Date,
): Promise<StatusFacts> {
  const members = inventory.members;
  const at = new Date();
  const [vms, perMember] = await Promise.all([
    vmStates(members, connections),
    Promise.all(
      members.map(async (member) => {
        const [etcd, certificate] = await Promise.allSettled([memberStatus(clients, member), servedCertificate(clients, member, identity)]);
        return {
          etcd: etcd.status === 'fulfilled' ? etcd.value : { error: briefError(etcd.reason) },
          servedCertificate: certificate.status === 'fulfilled' ? certificate.value : { error: briefError(certificate.reason) },
        };
      }),
    ),
  ]);
  // The member list and the alarms are the cluster's: ask the first member that answered status.
  let memberList: StatusFacts['memberList'] = { error: 'no member answered' };
  let alarms: StatusFacts['alarms'] = [];
  let clusterVersion: StatusFacts['clusterVersion'] = { error: 'no member answered' };
  const answering = members.filter((_, index) => !('error' in perMember[index]!.etcd));
  for (const member of answering) {
    try {
      const client = await clients.for(member);
      const [list, alarm, versions] = await Promise.all([
        client.cluster.memberList({}),
        client.maintenance.alarm({ action: 'Get', memberID: '0', alarm: 'None' }),
        versionOf(clients, member, identity).catch((error: unknown) => ({ error: `${member.name}: ${briefError(error)}` })),
      ]);
      clusterVersion = 'error' in versions ? versions : versions.etcdcluster;
      memberList = list.members.map((m) => ({ ...liveMember(m), id: hexId(m.ID) }));
      alarms = alarm.alarms.map((a) => ({ memberId: hexId(a.memberID), alarm: String(a.alarm).toUpperCase() }));
      break;
    } catch (error) {
      memberList = { error: `${member.name}: ${briefError(error)}` };
    }
  }
  return {
    members: members.map((member, index) => ({
      name: member.name,
      hypervisor: member.hypervisor.name,
      vm: vms.get(member.name) ?? 'unknown',
      ...perMember[index]!,
    })),
    memberList,
    alarms,
    clusterVersion,
    ...(caNotAfter ? { caNotAfter } : {}),
    at,
  };
}
