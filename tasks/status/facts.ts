import type { Etcd3 } from 'etcd3';
import { BACKUP_RECORD_KEYS, BACKUP_RECORD_PREFIX } from '../backup/runs.ts';
import { DEFRAG_RECORD_PREFIX } from './defrag-records.ts';
import { MISMATCH_KEY } from '../inventory/lock-keys.ts';
import { briefError } from '../core/errors.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { ClientIdentity, EtcdClients } from '../etcd/client.ts';
import type { HypervisorConnections } from '../remote/hypervisors.ts';
import { saysDomainMissing, Virsh, virshSays, type ProbeAnswer, type Question } from '../libvirt/virsh.ts';
import { backingPathOf, imageName, imageQuestions } from '../libvirt/os-image.ts';
import { membersByHypervisor } from '../inventory/placement.ts';
import { hexId, liveMember } from '../etcd/membership.ts';
import { versionOf } from '../etcd/version.ts';
import { memberStatus, type EtcdMemberFacts } from '../etcd/member-status.ts';
import { alarmsListed } from '../etcd/health.ts';
import { servedCertificate } from '../etcd/served-certificate.ts';
import { presentThroughAgents } from '../guest/agent.ts';
import { ownerQuestions, parseOwnerMark } from '../libvirt/ownership.ts';
import { GUEST_PATHS } from '../render/etcd.ts';

/**
 * What status reads, all of it read-only and asked at about the same moment: each hypervisor once
 * (virsh domstate of its members and their OS volumes' XML, one remote shell), each member's etcd once (its status over
 * gRPC, which lists the cluster's alarms; the certificate it serves over TLS), and one member list.
 */

export type { EtcdMemberFacts };

export interface MemberFacts {
  name: string;
  hypervisor: string;
  /** virsh domstate's answer, `absent` when libvirt has no such domain, or why it is unknown. */
  vm: string;
  /** The image its OS disk was built from (its overlay's backing file), and the one base_image names. */
  image:
    | { kind: 'built-from'; image: string }
    /** A volume_id: the operator's own disk, whose image the tool does not manage. */
    | { kind: 'own-disk' }
    | { kind: 'unknown'; why: string };
  /** base_image's volume, when the tool makes the member's OS disk. */
  wantedImage?: string;
  /**
   * A recovery's --force-new-cluster drop-in is in its running guest, left by a recover that did not finish: the next
   * start of its etcd would found a new cluster of it alone (false when not found, or its agent did not answer).
   */
  forceNewClusterLeft: boolean;
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
  /** A CA rotation under way (pki/ca-rotation.json, read by the command): what --rotate-ca names, and its stage. */
  caRotation?: { target: string; stage: string };
  /** With scheduled backups on: the agent's records in etcd (backup/runs.ts), as their text, from the first member that answered. */
  backupRecords?: { lastRun?: string; lastSuccess?: string } | { error: string };
  /** Restore drills' records (drill/run.ts), whether or not backups are scheduled: read in the same request. */
  drillRecords?: { lastDrill?: string; lastVerified?: string };
  /** With scheduled defragmentation on: each member's last one as the agent recorded it, by member name. */
  defragRecords?: Record<string, string> | { error: string };
  /** A deploy's finding that the members' data differ (inventory/lock-keys.ts MISMATCH_KEY), as its text, if one stands. */
  mismatch?: string | { error: string };
  at: Date;
}

export { hexId };

/** What libvirt says of a member: its domain's state, and the image its OS disk was built from. */
export interface VmFacts {
  vm: string;
  image: MemberFacts['image'];
  /** A recovery's --force-new-cluster drop-in is in the running guest (MemberFacts.forceNewClusterLeft). */
  forceNewClusterLeft: boolean;
}

/** The image a member's OS disk was built from, from its vol-dumpxml (undefined: not asked, a volume_id). */
function imageFrom(answer: ProbeAnswer | undefined): MemberFacts['image'] {
  if (!answer) return { kind: 'own-disk' };
  if (answer.code !== 0) return { kind: 'unknown', why: virshSays(answer) };
  const path = backingPathOf(answer.output);
  return path ? { kind: 'built-from', image: imageName(path) } : { kind: 'unknown', why: 'its OS disk has no backing image' };
}

/**
 * Which of these running members' guests hold a recovery's --force-new-cluster drop-in, asked of the guest agents of
 * the domains marked with this cluster's ID only (never another cluster's VM of the same name). An agent that does
 * not answer is taken as no drop-in: status says what it knows, and the deploy's guest step looks again.
 */
async function forceNewClusterLeft(virsh: Virsh, running: readonly Member[], marks: Record<string, ProbeAnswer>, clusterId: string) {
  const ours = running.filter((member) => {
    const mark = marks[`${member.name}/mark`];
    return mark?.code === 0 && parseOwnerMark(mark.output)?.id === clusterId;
  });
  const found = await presentThroughAgents(
    virsh,
    ours.map((member) => ({ domain: member.name, path: GUEST_PATHS.forceNewClusterDropIn })),
  ).catch(() => []);
  return new Set(ours.filter((_, i) => found[i] === true).map((member) => member.name));
}

/** virsh domstate's answer: the state, `absent`, or why it is unknown. */
function vmState(answer: ProbeAnswer | undefined): string {
  if (!answer) return 'unknown (no answer)';
  if (answer.code === 0) return answer.output.trim();
  return saysDomainMissing(answer.output) ? 'absent' : `unknown (${answer.output.trim().split('\n')[0]})`;
}

/** Each member's VM facts, one probe per hypervisor (and with `clusterId`, one look for a leftover drop-in). */
export async function vmFacts(
  members: readonly Member[],
  connections: HypervisorConnections,
  clusterId?: string,
): Promise<Map<string, VmFacts>> {
  const facts = new Map<string, VmFacts>();
  await Promise.all(
    [...membersByHypervisor(members).values()].map(async (hosted) => {
      const { hypervisor } = hosted[0]!;
      try {
        const virsh = new Virsh(await connections.get(hypervisor), hypervisor.libvirtUri);
        const questions = hosted.flatMap((member): [string, Question][] => {
          const image = imageQuestions(member)?.osXml;
          return [
            [member.name, ['domstate', member.name]],
            [`${member.name}/mark`, ownerQuestions(member).mark],
            ...(image ? [[`${member.name}/image`, image] as [string, Question]] : []),
          ];
        });
        const answers = await virsh.probe(Object.fromEntries(questions));
        const vms = new Map(hosted.map((member) => [member.name, vmState(answers[member.name])]));
        const running = hosted.filter((member) => vms.get(member.name) === 'running');
        const left = clusterId ? await forceNewClusterLeft(virsh, running, answers, clusterId) : new Set<string>();
        for (const member of hosted)
          facts.set(member.name, {
            vm: vms.get(member.name)!,
            image: imageFrom(answers[`${member.name}/image`]),
            forceNewClusterLeft: left.has(member.name),
          });
      } catch (error) {
        const why = `hypervisor ${hypervisor.name}: ${briefError(error)}`;
        for (const member of hosted)
          facts.set(member.name, { vm: `unknown (${why})`, image: { kind: 'unknown', why }, forceNewClusterLeft: false });
      }
    }),
  );
  return facts;
}

/** `known`: what the state directory says (the cluster's ID; the CA's end and a rotation under way, passed on as they are). */
export async function gatherStatus(
  inventory: Inventory,
  clients: EtcdClients,
  connections: HypervisorConnections,
  identity: ClientIdentity,
  known: Pick<StatusFacts, 'caNotAfter' | 'caRotation'> & { clusterId?: string | undefined } = {},
): Promise<StatusFacts> {
  const { clusterId, ...fromState } = known;
  const members = inventory.members;
  const at = new Date();
  const [vms, perMember] = await Promise.all([
    vmFacts(members, connections, clusterId),
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
  // The alarms are the cluster's, and every member that answered status listed them (etcd/health.ts).
  const alarms: StatusFacts['alarms'] = alarmsListed(perMember.flatMap(({ etcd }) => ('error' in etcd ? [] : [etcd.errors]))).map(
    ({ memberId, alarm }) => ({ memberId: hexId(memberId), alarm }),
  );
  // The member list is the cluster's too: ask the first member that answered status.
  let memberList: StatusFacts['memberList'] = { error: 'no member answered' };
  let clusterVersion: StatusFacts['clusterVersion'] = { error: 'no member answered' };
  let backupRecords: RecordTexts | { error: string } = { error: 'no member answered' };
  let defragRecords: StatusFacts['defragRecords'] = { error: 'no member answered' };
  // Not said when no member answers: that is the problem status names already.
  let mismatch: StatusFacts['mismatch'];
  const answering = members.filter((_, index) => !('error' in perMember[index]!.etcd));
  for (const member of answering) {
    try {
      const client = await clients.for(member);
      const [list, versions, records, defrags, found] = await Promise.all([
        client.cluster.memberList({}),
        versionOf(clients, member, identity).catch((error: unknown) => ({ error: `${member.name}: ${briefError(error)}` })),
        backupRecordsOf(client),
        inventory.maintenance.defrag.enabled ? defragRecordsOf(client) : undefined,
        client
          .get(MISMATCH_KEY)
          .string()
          .then((text) => text ?? undefined)
          .catch((error: unknown) => ({ error: briefError(error) })),
      ]);
      backupRecords = records;
      defragRecords = defrags;
      mismatch = found;
      clusterVersion = 'error' in versions ? versions : versions.etcdcluster;
      memberList = list.members.map((m) => ({ ...liveMember(m), id: hexId(m.ID) }));
      break;
    } catch (error) {
      memberList = { error: `${member.name}: ${briefError(error)}` };
    }
  }
  return {
    members: members.map((member, index) => ({
      name: member.name,
      hypervisor: member.hypervisor.name,
      vm: vms.get(member.name)?.vm ?? 'unknown',
      image: vms.get(member.name)?.image ?? { kind: 'unknown', why: 'not asked' },
      forceNewClusterLeft: vms.get(member.name)?.forceNewClusterLeft ?? false,
      ...('base' in member.volumes.os ? { wantedImage: member.volumes.os.base.volume } : {}),
      ...perMember[index]!,
    })),
    memberList,
    alarms,
    clusterVersion,
    ...fromState,
    ...(inventory.backup.enabled ? { backupRecords: scheduledRecords(backupRecords) } : {}),
    ...('error' in backupRecords ? {} : { drillRecords: drillRecords(backupRecords) }),
    ...(inventory.maintenance.defrag.enabled ? { defragRecords } : {}),
    ...(mismatch !== undefined ? { mismatch } : {}),
    at,
  };
}

/**
 * The backup records (the agent's last run and last success, the drills' last drill and last verified), read in
 * one request; an answer without them is no error.
 */
async function backupRecordsOf(client: Etcd3): Promise<RecordTexts | { error: string }> {
  try {
    const found = await client.getAll().prefix(BACKUP_RECORD_PREFIX).strings();
    const entries = Object.entries(BACKUP_RECORD_KEYS).flatMap(([name, key]) => (found[key] !== undefined ? [[name, found[key]]] : []));
    return Object.fromEntries(entries);
  } catch (error) {
    return { error: briefError(error) };
  }
}

/** Each record under the backup prefix that is there, as its text, by its name in BACKUP_RECORD_KEYS. */
type RecordTexts = Partial<Record<keyof typeof BACKUP_RECORD_KEYS, string>>;

const scheduledRecords = (records: RecordTexts | { error: string }): NonNullable<StatusFacts['backupRecords']> =>
  'error' in records ? records : { ...pick(records, 'lastRun'), ...pick(records, 'lastSuccess') };

const drillRecords = (records: RecordTexts): NonNullable<StatusFacts['drillRecords']> => ({
  ...pick(records, 'lastDrill'),
  ...pick(records, 'lastVerified'),
});

const pick = <K extends string>(records: Partial<Record<K, string>>, name: K) =>
  records[name] !== undefined ? ({ [name]: records[name] } as Record<K, string>) : {};

/** The agents' defragmentation records, by member name, in one request. */
async function defragRecordsOf(client: Etcd3): Promise<NonNullable<StatusFacts['defragRecords']>> {
  try {
    const found = await client.getAll().prefix(DEFRAG_RECORD_PREFIX).strings();
    return Object.fromEntries(Object.entries(found).map(([key, value]) => [key.slice(DEFRAG_RECORD_PREFIX.length), value]));
  } catch (error) {
    return { error: briefError(error) };
  }
}
