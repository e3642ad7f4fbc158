import { defragLine } from './defrag-records.ts';
import { BACKUP_RECORD_KEYS, backupLine, judgeBackups, parseBackupRun, type BackupRun, type BackupVerdict } from '../backup/runs.ts';
import { drillLines, parseDrillRecord } from '../drill/record.ts';
import { formatBytes } from '../etcd/maintenance.ts';
import { quorumOf } from '../etcd/roll.ts';
import { compareVersions, parseVersion } from '../upgrade/version.ts';
import { parseMismatch } from '../verify/consistency.ts';
import type { EtcdMemberFacts, ListedMember, MemberFacts, StatusFacts } from './facts.ts';

/**
 * What status says, pure: the facts in; per member a row, the cluster's verdict (healthy or
 * degraded, with every reason) and warnings out. A table for people, the same data as JSON for scripts.
 */

export type Role = 'leader' | 'follower' | 'learner' | 'unknown';

export interface MemberRow {
  name: string;
  hypervisor: string;
  vm: string;
  /** The image its OS disk was built from (`own disk` for a volume_id), or null when libvirt could not say. */
  image: string | null;
  id: string | null;
  role: Role;
  raftTerm: string | null;
  revision: string | null;
  appliedIndex: string | null;
  dbSize: number | null;
  dbSizeInUse: number | null;
  version: string | null;
  alarms: string[];
  certificateExpires: string | null;
  error: string | null;
}

export interface StatusReport {
  at: string;
  healthy: boolean;
  leader: string | null;
  members: MemberRow[];
  /** Members etcd lists that the inventory does not have (a learner half-added, a member left behind). */
  unknownMembers: ListedMember[];
  caExpires: string | null;
  /** `/version`'s `etcdcluster`: the minor every member supports (it moves once the last member runs a new one). */
  clusterVersion: string | null;
  /** Each version the members run, with the members that run it, oldest first. */
  versions: { version: string; members: string[] }[];
  /** With scheduled backups on: the last successful one and its age (null when none succeeded). */
  backup?: { lastSuccess: BackupVerdict['lastSuccess'] };
  /** With scheduled defragmentation on: the line naming each member's last one. */
  defrag?: string;
  /** With scheduled backups on, or once a restore drill ran: the last verified backup, and its age. */
  drill?: string;
  problems: string[];
  warnings: string[];
}

/** What a member's leftover --force-new-cluster drop-in means, and the two ways out of it. */
export const FORCE_NEW_CLUSTER_LEFT =
  "a recovery's --force-new-cluster drop-in is left in it: the next start of its etcd would found a new cluster of " +
  'this member alone and drop the others; `etcd-kvm recover` finishes the recovery, or a deploy removes the drop-in';

/** Certificates closer to expiry than this are warned about (the deploy's --renew-certs renews them). */
export const CERTIFICATE_WARNING_DAYS = 30;

const DAY_MS = 86_400_000;

/** What a summary says as it goes: problems (the cluster is not healthy) and warnings. */
interface Said {
  problems: string[];
  warnings: string[];
}

type MemberList = Exclude<StatusFacts['memberList'], { error: string }>;

/** A member's served certificate: when it ends, and what is said when it is near its end, past it, or unread. */
function servedCertificateOf(member: StatusFacts['members'][number], answers: boolean, at: Date, said: Said): string | null {
  // A member whose etcd does not answer has no certificate to read either: one problem is enough.
  if ('error' in member.servedCertificate) {
    if (answers) said.warnings.push(`${member.name}: its served certificate could not be read (${member.servedCertificate.error})`);
    return null;
  }
  const expires = member.servedCertificate.notAfter.toISOString();
  const days = (member.servedCertificate.notAfter.getTime() - at.getTime()) / DAY_MS;
  if (days < 0) said.problems.push(`${member.name}: its certificate expired ${expires}`);
  else if (days < CERTIFICATE_WARNING_DAYS)
    said.warnings.push(`${member.name}: its certificate expires in ${Math.floor(days)} days (${expires}): deploy --renew-certs`);
  return expires;
}

/** One member's row, and what is said of it: its VM, its etcd, its alarms, its certificate, its image. */
function memberRow(
  member: StatusFacts['members'][number],
  seen: { facts: StatusFacts; list: MemberList | undefined; leaderId: string | undefined },
  said: Said,
): MemberRow {
  const { facts, list, leaderId } = seen;
  const etcd: EtcdMemberFacts | undefined = 'error' in member.etcd ? undefined : member.etcd;
  if (member.vm !== 'running') said.problems.push(`${member.name}: VM ${member.vm}`);
  if (member.forceNewClusterLeft) said.problems.push(`${member.name}: ${FORCE_NEW_CLUSTER_LEFT}`);
  if (!etcd) said.problems.push(`${member.name}: etcd does not answer (${(member.etcd as { error: string }).error})`);
  const listed = etcd && list?.find((m) => m.id === etcd.id);
  const learner = Boolean(etcd?.isLearner || listed?.isLearner);
  if (learner) said.problems.push(`${member.name}: still a learner (not promoted to a voting member)`);
  const alarms = etcd ? facts.alarms.filter((a) => a.memberId === etcd.id).map((a) => a.alarm) : [];
  const disarm = ' (writes refused: etcd-kvm maintain --compact --defrag, then --disarm)';
  for (const alarm of alarms) said.problems.push(`${member.name}: alarm ${alarm}${alarm === 'NOSPACE' ? disarm : ''}`);
  // etcd repeats every active alarm among each member's errors ("memberID:… alarm:NOSPACE"): shown once above.
  for (const error of (etcd?.errors ?? []).filter((e) => !/^memberID:\d+ alarm:/.test(e))) said.problems.push(`${member.name}: ${error}`);
  const certificateExpires = servedCertificateOf(member, etcd !== undefined, facts.at, said);
  const image = imageOf(member);
  if (image.warning) said.warnings.push(`${member.name}: ${image.warning}`);
  const role: Role = !etcd ? 'unknown' : learner ? 'learner' : etcd.id === leaderId ? 'leader' : 'follower';
  return {
    name: member.name,
    hypervisor: member.hypervisor,
    vm: member.vm,
    image: image.shown,
    id: etcd?.id ?? null,
    role,
    raftTerm: etcd?.raftTerm ?? null,
    revision: etcd?.revision ?? null,
    appliedIndex: etcd?.appliedIndex ?? null,
    dbSize: etcd?.dbSize ?? null,
    dbSizeInUse: etcd?.dbSizeInUse ?? null,
    version: etcd?.version ?? null,
    alarms,
    certificateExpires,
    error: 'error' in member.etcd ? member.etcd.error : null,
  };
}

/** etcd's member list against the inventory, and alarms of members the inventory does not name (still the cluster's). */
function listProblems(facts: StatusFacts, list: MemberList | undefined, inventoryNames: readonly string[], members: readonly MemberRow[]) {
  const problems: string[] = [];
  const unknownMembers = (list ?? []).filter((m) => !inventoryNames.includes(m.name));
  for (const m of unknownMembers)
    problems.push(`etcd lists member ${m.name || `(unstarted, ${m.peerURLs.join(',')})`} (${m.id}), which the inventory does not have`);
  for (const name of inventoryNames)
    if (list && !list.some((m) => m.name === name)) problems.push(`${name} is in the inventory but not in etcd's member list`);
  for (const alarm of facts.alarms.filter((a) => !members.some((m) => m.id === a.memberId)))
    problems.push(`member ${alarm.memberId}: alarm ${alarm.alarm}`);
  return { unknownMembers, problems };
}

/** The versions the members run, the cluster version, and the CA's end: what is said of each. */
function versionsAndCa(facts: StatusFacts, members: readonly MemberRow[], said: Said) {
  const versions = versionsRun(members);
  if (versions.length > 1) {
    const each = versions.map(({ version, members: names }) => `${version}: ${names.join(', ')}`).join('; ');
    said.warnings.push(
      `members run ${versions.length} versions of etcd (${each}): ` +
        'a roll is under way or was left half done; a deploy finishes it (etcd supports two adjacent versions meanwhile)',
    );
  }
  const clusterVersion = typeof facts.clusterVersion === 'string' ? facts.clusterVersion : null;
  if (typeof facts.clusterVersion !== 'string' && facts.members.some((m) => !('error' in m.etcd)))
    said.warnings.push(`the cluster version could not be read (${facts.clusterVersion.error})`);
  const caExpires = facts.caNotAfter?.toISOString() ?? null;
  if (facts.caNotAfter) {
    const days = (facts.caNotAfter.getTime() - facts.at.getTime()) / DAY_MS;
    if (days < CERTIFICATE_WARNING_DAYS)
      said.warnings.push(
        `the CA expires in ${Math.floor(days)} days (${caExpires}): ` +
          'rotate it with deploy --rotate-ca cluster (docs/operating.md, Rotating the CA)',
      );
  }
  if (facts.caRotation)
    said.warnings.push(
      `a CA rotation (--rotate-ca ${facts.caRotation.target}) is under way, at ${facts.caRotation.stage}: ` +
        `deploy --rotate-ca ${facts.caRotation.target} goes on`,
    );
  return { versions, clusterVersion, caExpires };
}

export function summarizeStatus(facts: StatusFacts, inventoryNames: readonly string[]): StatusReport {
  const said: Said = { problems: [], warnings: [] };
  const { problems, warnings } = said;
  const list = 'error' in facts.memberList ? undefined : facts.memberList;
  if (!list) problems.push(`no member list: ${(facts.memberList as { error: string }).error}`);

  const answered = facts.members.flatMap((m) => ('error' in m.etcd ? [] : [m.etcd]));
  const leaders = new Set(answered.map((etcd) => etcd.leader).filter((id) => id !== '0'));
  const leaderId = leaders.size === 1 ? [...leaders][0]! : undefined;
  if (leaders.size > 1) problems.push(`members disagree on the leader (${[...leaders].join(', ')})`);
  else if (answered.length > 0 && !leaderId) problems.push(noLeader(facts, answered.length));
  const nameOfId = (id: string) =>
    list?.find((m) => m.id === id)?.name || facts.members.find((m) => !('error' in m.etcd) && m.etcd.id === id)?.name;

  const members = facts.members.map((member) => memberRow(member, { facts, list, leaderId }, said));
  const listed = listProblems(facts, list, inventoryNames, members);
  problems.push(...listed.problems);
  const { versions, clusterVersion, caExpires } = versionsAndCa(facts, members, said);
  if (facts.defragRecords && 'error' in facts.defragRecords)
    warnings.push(`the defragmentation records could not be read (${facts.defragRecords.error})`);
  problems.push(...mismatchProblems(facts.mismatch, warnings));
  const backup = facts.backupRecords ? backupsOf(facts.backupRecords, facts.at) : undefined;
  if (backup) {
    problems.push(...backup.problems);
    warnings.push(...backup.warnings);
  }
  const drill = drillOf(facts);
  if (drill) warnings.push(...drill.warnings);
  return {
    at: facts.at.toISOString(),
    healthy: problems.length === 0,
    leader: (leaderId && nameOfId(leaderId)) ?? null,
    members,
    unknownMembers: listed.unknownMembers,
    caExpires,
    clusterVersion,
    versions,
    ...(backup ? { backup: { lastSuccess: backup.lastSuccess } } : {}),
    ...(drill ? { drill: drill.line } : {}),
    ...(facts.defragRecords && !('error' in facts.defragRecords)
      ? { defrag: defragLine(facts.defragRecords, inventoryNames, facts.at) }
      : {}),
    problems,
    warnings,
  };
}

/** The drills' records, shown when a drill ran or backups are scheduled (a record that is not one is a warning). */
function drillOf(facts: StatusFacts): ReturnType<typeof drillLines> | undefined {
  const records = facts.drillRecords ?? {};
  const parsed = (text: string | undefined) => (text === undefined ? undefined : parseDrillRecord(text));
  const lastDrill = parsed(records.lastDrill);
  const lastVerified = parsed(records.lastVerified);
  if (!facts.backupRecords && records.lastDrill === undefined) return undefined;
  const drill = drillLines(lastVerified, lastDrill, facts.at);
  const invalid = (
    [
      ['lastDrill', lastDrill],
      ['lastVerified', lastVerified],
    ] as const
  ).flatMap(([name, record]) =>
    records[name] !== undefined && !record ? [`${BACKUP_RECORD_KEYS[name]} is not a record a restore drill writes`] : [],
  );
  return { line: drill.line, warnings: [...invalid, ...drill.warnings] };
}

/** The agent's records judged: unreadable ones are warnings, the rest goes to judgeBackups. */
function backupsOf(records: NonNullable<StatusFacts['backupRecords']>, at: Date): BackupVerdict {
  if ('error' in records) return { lastSuccess: null, problems: [], warnings: [`the backup records could not be read (${records.error})`] };
  const warnings: string[] = [];
  const parsed = (text: string | undefined, key: string): BackupRun | undefined => {
    if (text === undefined) return undefined;
    const parsed = parseBackupRun(text);
    if ('invalid' in parsed) {
      warnings.push(`${key} is ${parsed.invalid}`);
      return undefined;
    }
    return parsed.run;
  };
  const verdict = judgeBackups(
    parsed(records.lastSuccess, BACKUP_RECORD_KEYS.lastSuccess),
    parsed(records.lastRun, BACKUP_RECORD_KEYS.lastRun),
    at,
  );
  return { ...verdict, warnings: [...warnings, ...verdict.warnings] };
}

/**
 * No member knows a leader. With fewer members answering than a quorum and the others' VMs gone, the
 * quorum may be lost for good: recover's dry-run tells (it asks libvirt whether their disks are gone).
 */
function noLeader(facts: StatusFacts, answering: number): string {
  const gone = facts.members.filter((member) => member.vm === 'absent').map((member) => member.name);
  if (answering >= quorumOf(facts.members.length) || gone.length === 0) return 'no leader';
  return (
    `no leader: the quorum is lost (${answering} of ${facts.members.length} members answer; no VM for ${gone.join(', ')}): ` +
    `if their disks are gone too, etcd-kvm recover --dry-run says what recovering keeps; if not, a deploy starts them`
  );
}

/** The image a member was built from, as the table shows it, and a warning when it is not base_image's. */
function imageOf(member: MemberFacts): { shown: string | null; warning?: string } {
  const { image, wantedImage } = member;
  if (image.kind === 'own-disk') return { shown: 'own disk' };
  if (image.kind === 'unknown')
    return member.vm === 'absent'
      ? { shown: null }
      : { shown: null, warning: `the image its OS disk was built from is unknown (${image.why})` };
  if (wantedImage === undefined || image.image === wantedImage) return { shown: image.image };
  return {
    shown: image.image,
    warning: `built from ${image.image}, not base_image's ${wantedImage}: a deploy rebuilds it on ${wantedImage} (its data disk kept)`,
  };
}

/** The versions the members report, each with its members, in version order. */
function versionsRun(rows: readonly MemberRow[]): StatusReport['versions'] {
  const byVersion = new Map<string, string[]>();
  for (const row of rows) if (row.version) byVersion.set(row.version, [...(byVersion.get(row.version) ?? []), row.name]);
  const order = (a: string, b: string) => {
    const [x, y] = [parseVersion(a), parseVersion(b)];
    return x && y ? compareVersions(x, y) : a.localeCompare(b);
  };
  return [...byVersion].sort(([a], [b]) => order(a, b)).map(([version, members]) => ({ version, members }));
}

/** One line: the cluster's version and what its members run. */
function versionLine(report: StatusReport): string {
  const cluster = report.clusterVersion ? `cluster version ${report.clusterVersion.replace(/\.0$/, '')}` : 'cluster version unknown';
  if (report.versions.length === 0) return `etcd: ${cluster}, no member answered`;
  if (report.versions.length === 1) return `etcd: ${cluster}, every member that answered runs ${report.versions[0]!.version}`;
  return (
    `etcd: ${cluster}, members on ${report.versions.length} versions: ` +
    `${report.versions.map(({ version, members }) => `${version} (${members.join(', ')})`).join(', ')}`
  );
}

const size = (bytes: number | null) => (bytes === null ? '-' : formatBytes(bytes));

export function formatStatusTable(report: StatusReport): string {
  const header = [
    'MEMBER',
    'HYPERVISOR',
    'VM',
    'IMAGE',
    'ID',
    'ROLE',
    'TERM',
    'REVISION',
    'APPLIED',
    'DB SIZE',
    'IN USE',
    'VERSION',
    'ALARMS',
    'CERT EXPIRES',
  ];
  const rows = report.members.map((m) => [
    m.name,
    m.hypervisor,
    m.vm,
    m.image ?? '-',
    m.id ?? '-',
    m.role,
    m.raftTerm ?? '-',
    m.revision ?? '-',
    m.appliedIndex ?? '-',
    size(m.dbSize),
    size(m.dbSizeInUse),
    m.version ?? '-',
    m.alarms.join(',') || '-',
    m.certificateExpires?.slice(0, 10) ?? '-',
  ]);
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => row[column]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((cell, column) => cell.padEnd(widths[column]!))
      .join('  ')
      .trimEnd();
  const lines = [line(header), ...rows.map(line), versionLine(report)];
  if (report.backup) lines.push(backupLine(report.backup));
  if (report.drill) lines.push(report.drill);
  if (report.defrag) lines.push(report.defrag);
  for (const problem of report.problems) lines.push(`problem: ${problem}`);
  for (const warning of report.warnings) lines.push(`warning: ${warning}`);
  // What status cannot see (the members' data, their raft logs, a linearizable read through each), verify checks.
  if (report.problems.length > 0)
    lines.push(`hint: etcd-kvm verify -i INVENTORY checks what the members hold (HashKV at one revision, a canary read through each)`);
  const voting = report.members.filter((m) => m.role === 'leader' || m.role === 'follower').length;
  lines.push(
    report.healthy
      ? `cluster: healthy, ${voting} of ${report.members.length} members voting, leader ${report.leader}`
      : `cluster: DEGRADED (${report.problems.length} problem${report.problems.length === 1 ? '' : 's'}), ` +
          `${voting} of ${report.members.length} members voting, leader ${report.leader ?? 'none'}`,
  );
  return lines.join('\n');
}

/** A deploy's recorded finding that the members' data differ: a problem until a run with --accept-mismatch clears it. */
function mismatchProblems(mismatch: StatusFacts['mismatch'], warnings: string[]): string[] {
  if (mismatch === undefined) return [];
  if (typeof mismatch !== 'string') {
    warnings.push(`the record of the members' consistency could not be read (${mismatch.error})`);
    return [];
  }
  const record = parseMismatch(mismatch);
  return [
    `the members' data differed after a run at ${record.at} (${record.detail}): ` +
      `deploys change nothing until one with --accept-mismatch finds them equal`,
  ];
}
