import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { AGENT_USER } from '../../inventory/tool-users.ts';
import { PACKAGE_ROOT } from '../../core/package-root.ts';
import type { SecretWriter } from '../../core/secret.ts';
import type { Inventory, Member } from '../../inventory/model.ts';
import { clientUrl } from '../../inventory/urls.ts';
import type { MemberTls } from '../../pki/materials.ts';
import { GUEST_PATHS } from '../etcd.ts';
import { managedRelease } from '../etcd-release.ts';
import { etcdBinaryDir } from './dependencies.ts';
import { secretFile, type CloudConfigFragment, type WriteFile } from './fragment.ts';

/**
 * Scheduled backups from inside the cluster (inventory `backup:`): every member runs the agent on a
 * timer; at each tick the member whose etcd first claims the tick takes the snapshot, seals it in
 * etcd-backup's format, uploads it where restore.s3 points and prunes (templates/etcd-kvm-agent.py).
 *
 * The agent runs as the etcd user: it reads what that user already holds (the member's whole data),
 * plus the S3 keys and the master key. The master key seals each backup's data key, so it also opens
 * every earlier backup: etcd-backup's format is symmetric and a member cannot write a backup without
 * it. A member that leaks it leaks no more than its own data directory holds, except keys deleted
 * since: rotate the key (and the bucket's old objects) if a member is compromised.
 */

export const BACKUP_UNITS = { service: 'etcd-kvm-backup.service', timer: 'etcd-kvm-backup.timer' } as const;

const DIR = '/etc/etcd-kvm/agent';
export const AGENT_PATHS = {
  program: '/usr/local/sbin/etcd-kvm-agent',
  config: `${DIR}/backup.json`,
  cert: `${DIR}/agent.crt`,
  key: `${DIR}/agent.key`,
  s3Ca: `${DIR}/s3-ca.crt`,
  accessKey: `${DIR}/s3-access-key`,
  secretKey: `${DIR}/s3-secret-key`,
  encryptionKey: `${DIR}/encryption-key`,
  workDir: '/var/lib/etcd-kvm-agent',
  service: `/etc/systemd/system/${BACKUP_UNITS.service}`,
  timer: `/etc/systemd/system/${BACKUP_UNITS.timer}`,
} as const;

/** The agent's user in the guest (not its etcd user, which is AGENT_USER). */
const OWNER = 'etcd:etcd';

let program: string | undefined;
const agentProgram = () => (program ??= readFileSync(join(PACKAGE_ROOT, 'templates', 'etcd-kvm-agent.py'), 'utf8'));

const pending = (what: string) => `(${what}: issued when the pki step applies)\n`;

/** What the agent reads: no secret in it, only where the secrets are. */
export function agentConfig(inventory: Inventory, member: Member): Record<string, unknown> {
  const { s3, encryption_key: encryptionKey } = inventory.restore;
  const etcdctl = `${managedRelease(inventory)?.dir ?? etcdBinaryDir(member)}/etcdctl`;
  return {
    member: member.name,
    schedule: inventory.backup.schedule,
    keep: inventory.backup.keep,
    max_age_seconds: inventory.backup.max_age_hours * 3600,
    work_dir: AGENT_PATHS.workDir,
    etcd: {
      endpoint: clientUrl(inventory, member),
      etcdctl,
      ca_file: GUEST_PATHS.caCert,
      cert_file: AGENT_PATHS.cert,
      key_file: AGENT_PATHS.key,
    },
    s3: {
      endpoint: inventory.backup.endpoint || s3.endpoint,
      bucket: s3.bucket,
      object_prefix: s3.object_prefix,
      region: s3.region,
      ca_file: s3.ca_cert ? AGENT_PATHS.s3Ca : '',
    },
    secrets: {
      access_key: AGENT_PATHS.accessKey,
      secret_key: AGENT_PATHS.secretKey,
      ...(encryptionKey.isEmpty ? {} : { encryption_key: AGENT_PATHS.encryptionKey }),
    },
  };
}

export function renderBackupService(): string {
  return [
    '# Managed by etcd-kvm: one scheduled backup attempt (the timer starts it on every member; one takes the tick).',
    '[Unit]',
    'Description=etcd-kvm scheduled backup',
    'After=network-online.target etcd.service',
    'Wants=network-online.target',
    '',
    '[Service]',
    'Type=oneshot',
    'User=etcd',
    'Group=etcd',
    'StateDirectory=etcd-kvm-agent',
    'StateDirectoryMode=0700',
    `ExecStart=${AGENT_PATHS.program} backup`,
    // Below etcd: a snapshot and its sealing never take the CPU or the disk from the member serving.
    'Nice=10',
    'IOSchedulingClass=idle',
    'TimeoutStartSec=1h',
    '',
  ].join('\n');
}

export function renderBackupTimer(schedule: string): string {
  return [
    '# Managed by etcd-kvm: the backup schedule (inventory backup.schedule).',
    '[Unit]',
    'Description=etcd-kvm backup schedule',
    '',
    '[Timer]',
    `OnCalendar=${schedule}`,
    // Every member fires at the same calendar time, each on its own clock: the tick they claim is that minute.
    'AccuracySec=1s',
    // A member that was off takes no backup for the ticks it missed: another member took them.
    'Persistent=false',
    '',
    '[Install]',
    'WantedBy=timers.target',
    '',
  ].join('\n');
}

export function backupAgentFragment(inventory: Inventory, member: Member, tls: MemberTls, writeSecret: SecretWriter): CloudConfigFragment {
  if (!inventory.backup.enabled) return {};
  const { s3, encryption_key: encryptionKey } = inventory.restore;
  const files: WriteFile[] = [
    { path: AGENT_PATHS.program, permissions: '0755', content: agentProgram() },
    { path: AGENT_PATHS.config, permissions: '0644', content: `${JSON.stringify(agentConfig(inventory, member), null, 2)}\n` },
    { path: AGENT_PATHS.cert, permissions: '0644', content: tls.agent?.cert ?? pending(`certificate of ${AGENT_USER}`) },
    secretFile(AGENT_PATHS.key, OWNER, tls.agent?.key ? writeSecret(tls.agent.key) : pending(`private key of ${AGENT_USER}`)),
    secretFile(AGENT_PATHS.accessKey, OWNER, writeSecret(s3.access_key)),
    secretFile(AGENT_PATHS.secretKey, OWNER, writeSecret(s3.secret_key)),
    ...(encryptionKey.isEmpty ? [] : [secretFile(AGENT_PATHS.encryptionKey, OWNER, writeSecret(encryptionKey))]),
    ...(s3.ca_cert ? [{ path: AGENT_PATHS.s3Ca, permissions: '0644', content: s3.ca_cert }] : []),
    { path: AGENT_PATHS.service, permissions: '0644', content: renderBackupService() },
    { path: AGENT_PATHS.timer, permissions: '0644', content: renderBackupTimer(inventory.backup.schedule), notify: BACKUP_UNITS.timer },
  ];
  return { writeFiles: files, services: [{ unit: BACKUP_UNITS.timer, onChange: 'restart' }] };
}
