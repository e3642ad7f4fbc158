import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { AGENT_USER, agentInEtcd } from '../../inventory/tool-users.ts';
import { PACKAGE_ROOT } from '../../core/package-root.ts';
import type { SecretWriter } from '../../core/secret.ts';
import type { Inventory, Member } from '../../inventory/model.ts';
import { clientUrl } from '../../inventory/urls.ts';
import type { MemberTls } from '../../pki/materials.ts';
import { DEFRAG_LOCK_KEY, runLockKey } from '../../inventory/lock-keys.ts';
import { GUEST_PATHS } from '../etcd.ts';
import { etcdToolsDir } from '../etcd-release.ts';
import {
  secretFile,
  type CloudConfigFragment,
  type ImagePackage,
  type ManagedDirectory,
  type RetiredParts,
  type WriteFile,
} from './fragment.ts';
import { MANIFEST_PATH, TEXTFILE_DIR } from './textfile.ts';
import { DISARM_BELOW_QUOTA } from '../../inventory/model.ts';
import {
  DRILL_CLIENT_URL,
  DRILL_ETCD_WINDOW_MS,
  drillEtcdArgv,
  drillNeedsBytes,
  drillRestoreArgv,
  drillScratch,
} from '../restore-drill.ts';

/**
 * The members' agent (agent/etcd-kvm-agent.py), while it has an etcd identity (agentInEtcd:
 * scheduled backups or scheduled defragmentation on). Each task is a oneshot service on a timer:
 *
 * - `backup` (inventory `backup:`): at each tick the member whose etcd first claims the tick takes the
 *   snapshot, seals it in etcd-backup's format, uploads it where restore.s3 points and prunes;
 * - `defrag` (inventory `maintenance.defrag`): each member defragments itself when the rule holds, one
 *   member at a time under a lease-backed lock in etcd, the leader last;
 * - `verify` (inventory `backup.verify`): at each tick one voting follower of a healthy cluster restores the
 *   newest backup in a scratch directory and checks it against its manifest (a restore drill, drill/plan.ts);
 * - `metrics`: every minute at its half (METRICS_SCHEDULE), what etcd does not export (its alarms, the last backup, the last
 *   defragmentation, drift of the managed files) into the node exporter's textfile directory.
 *
 * The agent runs as the etcd user: it reads what that user already holds (the member's whole data),
 * plus the S3 keys and the master key. The master key seals each backup's data key, so it also opens
 * every earlier backup: etcd-backup's format is symmetric and a member cannot write a backup without
 * it. A member that leaks it leaks no more than its own data directory holds, except keys deleted
 * since: rotate the key (and the bucket's old objects) if a member is compromised.
 */

export const BACKUP_UNITS = { service: 'etcd-kvm-backup.service', timer: 'etcd-kvm-backup.timer' } as const;
export const DEFRAG_UNITS = { service: 'etcd-kvm-defrag.service', timer: 'etcd-kvm-defrag.timer' } as const;
export const METRICS_UNITS = { service: 'etcd-kvm-metrics.service', timer: 'etcd-kvm-metrics.timer' } as const;
export const VERIFY_UNITS = { service: 'etcd-kvm-verify.service', timer: 'etcd-kvm-verify.timer' } as const;

const DIR = '/etc/etcd-kvm/agent';
const WORK_DIR = '/var/lib/etcd-kvm-agent';
const AGENT_MODULE_DIR = '/usr/local/lib/etcd-kvm-agent';
/** The agent's configuration directories and its module's: the agent runs as etcd and must enter each (its secrets are 0400 etcd's). */
const AGENT_DIRECTORIES: ManagedDirectory[] = ['/etc/etcd-kvm', DIR, AGENT_MODULE_DIR].map((path) => ({
  path,
  mode: 0o755,
  owner: 'root:root',
}));

/**
 * The agent's program: it imports the agent, whose bytecode Python then keeps in the agent's work directory
 * (`sys.pycache_prefix`; /usr is read-only under the units' ProtectSystem=strict). A script run as itself is
 * compiled at every start: on the lab (2026-12-03, load 3-4) a start as the script took 2.4–3.3 s, as the launcher
 * 1.7–1.9 s, of the 3–6 s of a guest's CPU a tick that does nothing cost, on every member several times a minute. Someone else
 * running it (root, by hand) keeps no bytecode, so the work directory holds only its owner's files.
 */
export const AGENT_LAUNCHER = [
  '#!/usr/bin/python3',
  "# Managed by etcd-kvm: runs the members' agent (etcd_kvm_agent.py beside it in the module directory).",
  'import os',
  'import sys',
  '',
  `WORK_DIR = ${JSON.stringify(WORK_DIR)}`,
  'try:',
  '    owner = os.stat(WORK_DIR).st_uid',
  'except OSError:',
  '    owner = None',
  'if owner == os.geteuid():',
  '    sys.pycache_prefix = os.path.join(WORK_DIR, "bytecode")',
  'else:',
  '    sys.dont_write_bytecode = True',
  `sys.path.insert(0, ${JSON.stringify(AGENT_MODULE_DIR)})`,
  'import etcd_kvm_agent  # noqa: E402',
  '',
  'sys.exit(etcd_kvm_agent.main(sys.argv))',
  '',
].join('\n');
export const AGENT_PATHS = {
  /** What the units run: AGENT_LAUNCHER, which imports the agent from `module`. */
  program: '/usr/local/sbin/etcd-kvm-agent',
  /** agent/etcd-kvm-agent.py, as a module: Python keeps an imported module's bytecode, never a script's. */
  module: `${AGENT_MODULE_DIR}/etcd_kvm_agent.py`,
  config: `${DIR}/backup.json`,
  cert: `${DIR}/agent.crt`,
  key: `${DIR}/agent.key`,
  s3Ca: `${DIR}/s3-ca.crt`,
  accessKey: `${DIR}/s3-access-key`,
  secretKey: `${DIR}/s3-secret-key`,
  encryptionKey: `${DIR}/encryption-key`,
  workDir: WORK_DIR,
  service: `/etc/systemd/system/${BACKUP_UNITS.service}`,
  timer: `/etc/systemd/system/${BACKUP_UNITS.timer}`,
  defragService: `/etc/systemd/system/${DEFRAG_UNITS.service}`,
  defragTimer: `/etc/systemd/system/${DEFRAG_UNITS.timer}`,
  metricsService: `/etc/systemd/system/${METRICS_UNITS.service}`,
  metricsTimer: `/etc/systemd/system/${METRICS_UNITS.timer}`,
  verifyService: `/etc/systemd/system/${VERIFY_UNITS.service}`,
  verifyTimer: `/etc/systemd/system/${VERIFY_UNITS.timer}`,
  /** Written by the agent as the etcd user, then moved into the textfile directory (root's) by its unit. */
  metricsStaging: `${WORK_DIR}/etcd-kvm-agent.prom`,
  metricsFile: `${TEXTFILE_DIR}/etcd-kvm-agent.prom`,
} as const;

/** The agent's user in the guest (not its etcd user, which is AGENT_USER). */
const OWNER = 'etcd:etcd';

let program: string | undefined;
const agentProgram = () => (program ??= readFileSync(join(PACKAGE_ROOT, 'agent', 'etcd-kvm-agent.py'), 'utf8'));

const pending = (what: string) => `(${what}: issued when the pki step applies)\n`;

/**
 * The agent's configuration (AGENT_PATHS.config), as the agent reads it: no secret in it, only where the
 * secrets are. test/unit/agent-config.test.ts holds every key the agent reads against this, and every key
 * written here against the agent's reads.
 */
export interface AgentConfig {
  member: string;
  cluster_id: string;
  backup_enabled: boolean;
  schedule: string;
  keep: number;
  max_age_seconds: number;
  work_dir: string;
  etcd: { endpoint: string; etcdctl: string; ca_file: string; cert_file: string; key_file: string };
  s3: { endpoint: string; bucket: string; object_prefix: string; region: string; ca_file: string };
  secrets: { access_key: string; secret_key: string; encryption_key?: string };
  defrag: {
    enabled: boolean;
    /** The inventory's `maintenance.defrag.rule`, in its file's names: the agent's `rule_holds` reads them. */
    rule: { free_bytes: number; free_fraction: number; quota_fraction: number };
    quota_bytes: number;
    disarm_below_fraction: number;
    lock_key: string;
  };
  run_lock_key: string;
  metrics: { staging: string; manifest: string };
  verify: {
    enabled: boolean;
    schedule: string;
    /** Its timer's unit file: written when drills were scheduled, the time the staleness alert counts from until one verifies. */
    timer: string;
    /** The members in the inventory's order: the drill's member is the first voting follower in it (drill/plan.ts, drillMember). */
    members: string[];
    scratch: string;
    restore: string[];
    etcd: string[];
    client_url: string;
    /** How long the throwaway etcd may take to answer once started. */
    answer_window_seconds: number;
    /** The room a drill needs on the data disk: twice the snapshot and this much more (drill/plan.ts, drillNeedsBytes). */
    spare_bytes: number;
  };
}

/** What the agent reads: no secret in it, only where the secrets are. */
export function agentConfig(inventory: Inventory, member: Member, clusterId = ''): AgentConfig {
  const { s3, encryptionKey } = inventory.restore;
  const etcdctl = `${etcdToolsDir(inventory, member)}/etcdctl`;
  const { defrag } = inventory.maintenance;
  return {
    member: member.name,
    // Bound into every backup's manifest: a backup is this cluster's own (backup/manifest.ts).
    cluster_id: clusterId,
    backup_enabled: inventory.backup.enabled,
    schedule: inventory.backup.schedule,
    keep: inventory.backup.keep,
    max_age_seconds: inventory.backup.maxAgeHours * 3600,
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
      object_prefix: s3.objectPrefix,
      region: s3.region,
      ca_file: s3.caCert ? AGENT_PATHS.s3Ca : '',
    },
    secrets: {
      access_key: AGENT_PATHS.accessKey,
      secret_key: AGENT_PATHS.secretKey,
      ...(encryptionKey.isEmpty ? {} : { encryption_key: AGENT_PATHS.encryptionKey }),
    },
    defrag: {
      enabled: defrag.enabled,
      rule: { free_bytes: defrag.rule.freeBytes, free_fraction: defrag.rule.freeFraction, quota_fraction: defrag.rule.quotaFraction },
      quota_bytes: inventory.etcd.spaceQuota,
      // Under a NOSPACE alarm: cleared once every database is under this share of the quota (as maintain --disarm).
      disarm_below_fraction: DISARM_BELOW_QUOTA,
      lock_key: DEFRAG_LOCK_KEY,
    },
    // Taken by the tool's runs: while one holds it the agent does not defragment (inventory/lock-keys.ts).
    run_lock_key: runLockKey(inventory.cluster.name),
    metrics: { staging: AGENT_PATHS.metricsStaging, manifest: MANIFEST_PATH },
    // The same restore and the same throwaway etcd as `backup --verify` (drill/plan.ts): one description of a drill.
    verify: {
      enabled: inventory.backup.verify.enabled,
      schedule: inventory.backup.verify.schedule,
      timer: AGENT_PATHS.verifyTimer,
      members: inventory.members.map((other) => other.name),
      scratch: drillScratch(inventory),
      restore: drillRestoreArgv(inventory, member),
      etcd: drillEtcdArgv(inventory, member),
      client_url: DRILL_CLIENT_URL,
      answer_window_seconds: DRILL_ETCD_WINDOW_MS / 1000,
      spare_bytes: drillNeedsBytes(0),
    },
  };
}

/**
 * A drill's service may also write etcd's data directory, which its user (etcd) owns anyway: the agent makes
 * its scratch directory there, on the data disk. Not the scratch directory alone: systemd sets up every
 * process's mount namespace, even a `+` ExecStartPre's, before anything could create it, and fails the start
 * on a path that is not there yet (status=226/NAMESPACE, seen on the lab's systemd 252).
 */
function drillServiceLines(dataDir: string): string[] {
  return [`ReadWritePaths=${dataDir}`, 'CPUWeight=10', 'IOWeight=10'];
}

/** One task of the agent as a oneshot service, below etcd: it never takes the CPU or the disk from the member serving. */
export function renderAgentService(
  task: 'backup' | 'defrag' | 'metrics' | 'verify',
  description: string,
  timeout: string,
  drillDataDir?: string,
): string {
  return [
    `# Managed by etcd-kvm: ${description}.`,
    '[Unit]',
    `Description=etcd-kvm ${description}`,
    'After=network-online.target etcd.service',
    'Wants=network-online.target',
    '',
    '[Service]',
    'Type=oneshot',
    'User=etcd',
    'Group=etcd',
    'StateDirectory=etcd-kvm-agent',
    'StateDirectoryMode=0700',
    `ExecStart=${AGENT_PATHS.program} ${task}`,
    // The textfile directory is root's: the metrics the agent wrote as etcd are moved in (one rename, so
    // the node exporter never reads half a file); none written, nothing moved.
    ...(task === 'defrag' || task === 'metrics'
      ? [`ExecStartPost=+-/bin/mv -f ${AGENT_PATHS.metricsStaging} ${AGENT_PATHS.metricsFile}`]
      : []),
    'Nice=10',
    'IOSchedulingClass=idle',
    ...(drillDataDir ? drillServiceLines(drillDataDir) : []),
    // Fenced: a run (Python, etcdctl) needs a few tens of MiB, its S3 answers are bounded too, and nothing but its
    // work directory (StateDirectory, writable under ProtectSystem=strict) is its to write. The metrics' move
    // above runs as root outside the fence (+).
    // A drill's throwaway etcd maps the restored database: room for it beside the run.
    `MemoryMax=${drillDataDir ? '512M' : '256M'}`,
    'ProtectSystem=strict',
    'ProtectHome=yes',
    'PrivateTmp=yes',
    'PrivateDevices=yes',
    'NoNewPrivileges=yes',
    `TimeoutStartSec=${timeout}`,
    '',
  ].join('\n');
}

/**
 * Every minute at its half: schedules are mostly written for the top of a minute (`hourly`, `*:00`), and the
 * metrics run then would add a process to every member at the moment the backups and defragmentations start.
 */
export const METRICS_SCHEDULE = '*:*:30';

export const renderBackupService = (): string => renderAgentService('backup', 'scheduled backup', '1h');

/** A task's schedule: every member fires at the same calendar time, each on its own clock. */
export function renderAgentTimer(what: string, schedule: string): string {
  return [
    `# Managed by etcd-kvm: ${what}.`,
    '[Unit]',
    `Description=etcd-kvm ${what}`,
    '',
    '[Timer]',
    `OnCalendar=${schedule}`,
    // Every member fires at the same calendar time, each on its own clock: the tick they claim is that elapse.
    'AccuracySec=1s',
    // A member that was off does not catch up on the ticks it missed: another member took them.
    'Persistent=false',
    '',
    '[Install]',
    'WantedBy=timers.target',
    '',
  ].join('\n');
}

export const renderBackupTimer = (schedule: string): string =>
  renderAgentTimer('the backup schedule (inventory backup.schedule)', schedule);

/** Every unit the agent may run: a task's timer, then its service (stopped in this order, the timer cannot start it again). */
const AGENT_UNITS = [BACKUP_UNITS, DEFRAG_UNITS, VERIFY_UNITS, METRICS_UNITS].flatMap(({ service, timer }) => [timer, service]);

/**
 * What the agent leaves in a member under another configuration: every unit and file of a task that is
 * off (the S3 keys with backups, the whole agent with neither task), so a task turned off stops and
 * takes its secrets with it.
 */
function retiredAgentParts(written: readonly WriteFile[], timers: readonly string[]): RetiredParts {
  const kept = new Set([
    ...written.map((file) => file.path),
    ...(written.length ? [AGENT_PATHS.metricsStaging, AGENT_PATHS.metricsFile] : []),
  ]);
  const runs = new Set(timers.flatMap((timer) => [timer, timer.replace(/\.timer$/, '.service')]));
  return {
    units: AGENT_UNITS.filter((unit) => !runs.has(unit)),
    paths: [
      ...Object.entries(AGENT_PATHS)
        .filter(([what, path]) => what !== 'workDir' && !kept.has(path))
        .map(([, path]) => path),
      // The drift manifest (textfile.ts) is written for the agent alone.
      ...(written.length ? [] : [MANIFEST_PATH]),
    ],
  };
}

export interface AgentInput {
  inventory: Inventory;
  member: Member;
  tls: MemberTls;
  clusterId?: string;
}

/** What the agent's backups import beyond python3 (agent/etcd-kvm-agent.py): Debian's packages of them. */
export const BACKUP_PACKAGES: readonly ImagePackage[] = [
  {
    name: 'python3-nacl',
    path: '/usr/lib/python3/dist-packages/nacl/bindings/__init__.py',
    why: "the backup agent seals snapshots with it (libsodium's XChaCha20-Poly1305)",
  },
  {
    name: 'python3-botocore',
    path: '/usr/lib/python3/dist-packages/botocore/auth.py',
    why: 'the backup agent signs its S3 requests with its SigV4 signer',
  },
];

export function memberAgentFragment({ inventory, member, tls, clusterId }: AgentInput, writeSecret: SecretWriter): CloudConfigFragment {
  if (!agentInEtcd(inventory)) return { retired: retiredAgentParts([], []) };
  const { s3, encryptionKey } = inventory.restore;
  const unit = (path: string, content: string, notify?: string): WriteFile => ({
    path,
    permissions: '0644',
    content,
    ...(notify ? { notify } : {}),
  });
  const backup: WriteFile[] = inventory.backup.enabled
    ? [
        secretFile(AGENT_PATHS.accessKey, OWNER, writeSecret(s3.accessKey)),
        secretFile(AGENT_PATHS.secretKey, OWNER, writeSecret(s3.secretKey)),
        ...(encryptionKey.isEmpty ? [] : [secretFile(AGENT_PATHS.encryptionKey, OWNER, writeSecret(encryptionKey))]),
        ...(s3.caCert ? [unit(AGENT_PATHS.s3Ca, s3.caCert)] : []),
        unit(AGENT_PATHS.service, renderBackupService()),
        unit(AGENT_PATHS.timer, renderBackupTimer(inventory.backup.schedule), BACKUP_UNITS.timer),
      ]
    : [];
  const { defrag } = inventory.maintenance;
  const defragFiles: WriteFile[] = defrag.enabled
    ? [
        unit(AGENT_PATHS.defragService, renderAgentService('defrag', 'scheduled defragmentation by rule', '1h')),
        unit(
          AGENT_PATHS.defragTimer,
          renderAgentTimer('the defragmentation schedule (inventory maintenance.defrag.schedule)', defrag.schedule),
          DEFRAG_UNITS.timer,
        ),
      ]
    : [];
  const verify = inventory.backup.enabled && inventory.backup.verify.enabled;
  const verifyFiles: WriteFile[] = verify
    ? [
        unit(AGENT_PATHS.verifyService, renderAgentService('verify', 'scheduled restore drill', '1h', inventory.etcd.dataDir)),
        unit(
          AGENT_PATHS.verifyTimer,
          renderAgentTimer('the restore drills (inventory backup.verify.schedule)', inventory.backup.verify.schedule),
          VERIFY_UNITS.timer,
        ),
      ]
    : [];
  const files: WriteFile[] = [
    { path: AGENT_PATHS.program, permissions: '0755', content: AGENT_LAUNCHER },
    { path: AGENT_PATHS.module, permissions: '0644', content: agentProgram() },
    unit(AGENT_PATHS.config, `${JSON.stringify(agentConfig(inventory, member, clusterId), null, 2)}\n`),
    unit(AGENT_PATHS.cert, tls.agent?.cert ?? pending(`certificate of ${AGENT_USER}`)),
    secretFile(AGENT_PATHS.key, OWNER, tls.agent?.key ? writeSecret(tls.agent.key) : pending(`private key of ${AGENT_USER}`)),
    ...backup,
    ...defragFiles,
    ...verifyFiles,
    unit(
      AGENT_PATHS.metricsService,
      renderAgentService('metrics', "metrics etcd does not export, for the node exporter's textfile collector", '5min'),
    ),
    unit(AGENT_PATHS.metricsTimer, renderAgentTimer('the metrics schedule (every minute)', METRICS_SCHEDULE), METRICS_UNITS.timer),
  ];
  const timers = [
    ...(inventory.backup.enabled ? [BACKUP_UNITS.timer] : []),
    ...(defrag.enabled ? [DEFRAG_UNITS.timer] : []),
    ...(verify ? [VERIFY_UNITS.timer] : []),
    METRICS_UNITS.timer,
  ];
  return {
    writeFiles: files,
    directories: AGENT_DIRECTORIES,
    services: timers.map((timer) => ({ unit: timer, onChange: 'restart' as const })),
    retired: retiredAgentParts(files, timers),
    ...(inventory.backup.enabled ? { needs: [...BACKUP_PACKAGES] } : {}),
  };
}
