import { stringify } from 'yaml';
import type { SecretWriter } from '../../core/secret.ts';
import type { GuestServices } from '../../inventory/model.ts';
import { secretFile, type CloudConfigFragment, type WriteFile } from './fragment.ts';
import { renderServiceUnit } from './systemd-unit.ts';
import { VAULT_AGENT_PATHS, VAULT_AGENT_UNIT } from './vault-agent.ts';

/**
 * fluent-bit's dynamic configuration, as the seed module sets it up: an updater keeps a directory in
 * sync with an etcd key prefix (configurations-auto-updater, watching) or a git repository (gitsync,
 * every minute from a timer; commits optionally checked against trusted GPG keys, the server pinned
 * by its SSH host key), then tells fluent-bit to hot-reload. fluent-bit runs the directory's
 * index.conf instead of the static pipeline. The updater runs as its own user, which may only ask
 * systemd to reload fluent-bit.
 */

export type DynamicConfig = GuestServices['fluentbitDynamicConfig'];

/** Dynamic configuration applies only where fluent-bit itself runs (as in the module). */
export const usesDynamicConfig = (services: Pick<GuestServices, 'fluentbit' | 'fluentbitDynamicConfig'>) =>
  services.fluentbit.enabled && services.fluentbitDynamicConfig.enabled;

const ROOT = '/etc/fluent-bit-config-updater';

export const CONFIG_UPDATER = {
  service: 'fluent-bit-config-updater',
  user: 'fluent-bit-updater',
  binary: '/usr/local/bin/fluent-bit-config-updater',
  config: `${ROOT}/config.yml`,
  etcdCa: `${ROOT}/etcd/ca.crt`,
  /** Credentials Vault agent renders (vault_agent_secret_path): written by vault, read by the updater. */
  vaultRendered: `${ROOT}/vault`,
  gitSshKey: `${ROOT}/git/client_ssh_key`,
  gitKnownKey: `${ROOT}/git/server_ssh_fingerprint`,
  gitTrustedKeys: `${ROOT}/git/trusted_gpg_keys`,
  reloadCommand: '/usr/local/bin/reload-fluent-bit-configs',
  sudoers: '/etc/sudoers.d/etcd-kvm-fluent-bit-updater',
  vaultTemplate: `${VAULT_AGENT_PATHS.dir}/fluent-bit-config-updater.json`,
} as const;

const UPDATER_OWNER = `${CONFIG_UPDATER.user}:${CONFIG_UPDATER.user}`;

/** The directory fluent-bit runs from; index.conf is its entry point, as in the module. */
export const DYNAMIC_CONFIG = { dir: '/etc/fluent-bit/dynamic', entrypoint: '/etc/fluent-bit/dynamic/index.conf' } as const;

/** The module's timings for the etcd watcher and the git timer. */
const ETCD_CLIENT_TIMINGS = { connection_timeout: '60s', request_timeout: '60s', retry_interval: '4s', retries: 15 } as const;
const NOTIFICATION_RETRIES = 30;
const GIT_SYNC_CALENDAR = '*-*-* *:*:00';
const SYSTEMCTL = '/usr/bin/systemctl';

/** Where the updater finds its etcd credentials: a client certificate and key, or a username/password file. */
type CredentialFiles = { kind: 'certificate'; cert: string; key: string } | { kind: 'password'; password: string };

const fromVault = (dynamic: DynamicConfig) => dynamic.etcd.vaultAgentSecretPath !== '';

/** Certificate auth when a client certificate is given (also with Vault, to choose it), else password auth. */
export function credentialFiles(dynamic: DynamicConfig): CredentialFiles {
  const dir = fromVault(dynamic) ? CONFIG_UPDATER.vaultRendered : `${ROOT}/etcd`;
  return dynamic.etcd.client.certificate !== ''
    ? { kind: 'certificate', cert: `${dir}/client.crt`, key: `${dir}/client.key` }
    : { kind: 'password', password: `${dir}/password.yml` };
}

const credentialSettings = (files: CredentialFiles) =>
  files.kind === 'certificate' ? { client_cert: files.cert, client_key: files.key } : { password_auth: files.password };

/** The updater's own configuration (configurations-auto-updater for etcd, gitsync for git). */
export function updaterConfig(dynamic: DynamicConfig): Record<string, unknown> {
  const common = {
    log_level: 'info',
    filesystem: { path: DYNAMIC_CONFIG.dir, files_permission: '700', directories_permission: '700' },
  };
  const notification = { notification_command: [CONFIG_UPDATER.reloadCommand], notification_command_retries: NOTIFICATION_RETRIES };
  if (dynamic.source === 'etcd') {
    return {
      ...common,
      etcd_client: {
        prefix: dynamic.etcd.keyPrefix,
        endpoints: dynamic.etcd.endpoints,
        ...ETCD_CLIENT_TIMINGS,
        auth: { ca_cert: CONFIG_UPDATER.etcdCa, ...credentialSettings(credentialFiles(dynamic)) },
      },
      ...notification,
    };
  }
  const { git } = dynamic;
  return {
    ...common,
    git: {
      repo: git.repo,
      ref: git.ref,
      path: git.path,
      auth: { ssh_key: CONFIG_UPDATER.gitSshKey, known_key: CONFIG_UPDATER.gitKnownKey },
      ...(git.trustedGpgKeys.length > 0 ? { accepted_signatures: CONFIG_UPDATER.gitTrustedKeys } : {}),
    },
    ...notification,
  };
}

/** Reloads fluent-bit (SIGHUP via its unit) when it runs; a stopped fluent-bit reads the files when it starts. */
export function renderReloadCommand(): string {
  return [
    '#!/bin/sh',
    '# Managed by etcd-kvm: run by the fluent-bit config updater after each change.',
    `if ${SYSTEMCTL} is-active --quiet fluent-bit.service; then`,
    `  exec sudo --non-interactive ${SYSTEMCTL} reload fluent-bit.service`,
    'fi',
    '',
  ].join('\n');
}

/** The only privileges the updater (and Vault agent, for renewed credentials) get. */
export function renderSudoers(dynamic: DynamicConfig): string {
  return [
    '# Managed by etcd-kvm.',
    `${CONFIG_UPDATER.user} ALL=(root) NOPASSWD: ${SYSTEMCTL} reload fluent-bit.service`,
    ...(fromVault(dynamic) ? [`vault ALL=(root) NOPASSWD: ${SYSTEMCTL} restart ${CONFIG_UPDATER.service}.service`] : []),
    '',
  ].join('\n');
}

/** Vault agent renders the updater's etcd credentials from a KV v2 secret and restarts it on renewal. */
export function vaultTemplateConfig(dynamic: DynamicConfig): Record<string, unknown> {
  const path = JSON.stringify(dynamic.etcd.vaultAgentSecretPath);
  const files = credentialFiles(dynamic);
  const restart = { command: ['sudo', '--non-interactive', SYSTEMCTL, 'restart', `${CONFIG_UPDATER.service}.service`] };
  const template = (destination: string, field: string) => ({
    destination,
    perms: '0640',
    contents: `{{ with secret ${path} }}{{ .Data.data.${field} }}{{ end }}\n`,
  });
  const templates =
    files.kind === 'certificate'
      ? [template(files.cert, 'certificate'), { ...template(files.key, 'key'), exec: restart }]
      : [
          {
            destination: files.password,
            perms: '0640',
            contents: `{{ with secret ${path} }}username: {{ .Data.data.username }}\npassword: {{ .Data.data.password }}\n{{ end }}`,
            exec: restart,
          },
        ];
  return { template: templates };
}

function etcdSourceFiles(dynamic: DynamicConfig, writeSecret: SecretWriter): WriteFile[] {
  const { client } = dynamic.etcd;
  const files: WriteFile[] = [{ path: CONFIG_UPDATER.etcdCa, permissions: '0644', content: dynamic.etcd.caCertificate }];
  if (fromVault(dynamic)) {
    files.push({
      path: CONFIG_UPDATER.vaultTemplate,
      permissions: '0644',
      content: `${JSON.stringify(vaultTemplateConfig(dynamic), null, 2)}\n`,
    });
    return files;
  }
  const credentials = credentialFiles(dynamic);
  if (credentials.kind === 'certificate') {
    files.push(
      { path: credentials.cert, permissions: '0644', content: client.certificate },
      secretFile(credentials.key, UPDATER_OWNER, writeSecret(client.key)),
    );
  } else {
    // Serialised by a YAML library: a password with YAML syntax in it stays one string.
    files.push(
      secretFile(credentials.password, UPDATER_OWNER, stringify({ username: client.username, password: writeSecret(client.password) })),
    );
  }
  return files;
}

function gitSourceFiles(dynamic: DynamicConfig, writeSecret: SecretWriter): WriteFile[] {
  const { git } = dynamic;
  return [
    secretFile(CONFIG_UPDATER.gitSshKey, UPDATER_OWNER, writeSecret(git.auth.clientSshKey)),
    { path: CONFIG_UPDATER.gitKnownKey, permissions: '0644', content: `${git.auth.serverSshFingerprint.trim()}\n` },
    ...git.trustedGpgKeys.map((key, index) => ({
      path: `${CONFIG_UPDATER.gitTrustedKeys}/key${index}.asc`,
      permissions: '0644',
      content: key,
    })),
  ];
}

export function renderUpdaterUnits(dynamic: DynamicConfig): WriteFile[] {
  const environment = dynamic.source === 'etcd' ? 'CONFS_AUTO_UPDATER_CONFIG_FILE' : 'GITSYNC_CONFIG_FILE';
  const service = renderServiceUnit({
    comment:
      `Managed by etcd-kvm: syncs ${DYNAMIC_CONFIG.dir} ` +
      `from ${dynamic.source === 'etcd' ? 'an etcd key prefix' : 'a git repository'}.`,
    description: 'fluent-bit dynamic configuration updater',
    user: CONFIG_UPDATER.user,
    // The updater exits on any error and relies on systemd to retry, for as long as it takes (etcd
    // unreachable, credentials Vault has not rendered yet): no start limit.
    unit: ['StartLimitIntervalSec=0'],
    service: [
      `Environment=${environment}=${CONFIG_UPDATER.config}`,
      `WorkingDirectory=${DYNAMIC_CONFIG.dir}`,
      'RestartSec=5',
      ...(dynamic.source === 'git' ? ['Type=oneshot'] : []),
    ],
    execStart: CONFIG_UPDATER.binary,
  });
  const units: WriteFile[] = [{ path: `/etc/systemd/system/${CONFIG_UPDATER.service}.service`, permissions: '0644', content: service }];
  if (dynamic.source === 'git') {
    const timer = [
      '# Managed by etcd-kvm.',
      '[Unit]',
      'Description=Sync the fluent-bit dynamic configuration from git',
      '',
      '[Timer]',
      `OnCalendar=${GIT_SYNC_CALENDAR}`,
      '',
      '[Install]',
      'WantedBy=timers.target',
      '',
    ].join('\n');
    units.push({ path: `/etc/systemd/system/${CONFIG_UPDATER.service}.timer`, permissions: '0644', content: timer });
  }
  return units;
}

export function fluentBitDynamicFragment(services: GuestServices, writeSecret: SecretWriter): CloudConfigFragment {
  if (!usesDynamicConfig(services)) return {};
  const dynamic = services.fluentbitDynamicConfig;
  const started = dynamic.source === 'etcd' ? `${CONFIG_UPDATER.service}.service` : `${CONFIG_UPDATER.service}.timer`;
  // The etcd watcher reads its configuration and credentials at start; the git sync is a fresh process
  // each minute. Vault agent reads its template directory at start.
  const notify = (file: WriteFile): WriteFile => {
    if (file.path === CONFIG_UPDATER.vaultTemplate) return { ...file, notify: VAULT_AGENT_UNIT };
    return dynamic.source === 'etcd' ? { ...file, notify: started } : file;
  };
  return {
    users: [
      {
        name: CONFIG_UPDATER.user,
        system: true,
        lock_passwd: true,
        shell: '/usr/sbin/nologin',
        homedir: `/var/lib/${CONFIG_UPDATER.user}`,
      },
    ],
    writeFiles: [
      ...[
        secretFile(CONFIG_UPDATER.config, UPDATER_OWNER, `# Managed by etcd-kvm.\n${stringify(updaterConfig(dynamic), { lineWidth: 0 })}`),
        ...(dynamic.source === 'etcd' ? etcdSourceFiles(dynamic, writeSecret) : gitSourceFiles(dynamic, writeSecret)),
      ].map(notify),
      { path: CONFIG_UPDATER.reloadCommand, permissions: '0755', content: renderReloadCommand() },
      { path: CONFIG_UPDATER.sudoers, permissions: '0440', content: renderSudoers(dynamic) },
      ...renderUpdaterUnits(dynamic).map((unit) => ({ ...unit, notify: started })),
    ],
    runcmd: [
      ['install', '-d', '-o', CONFIG_UPDATER.user, '-g', CONFIG_UPDATER.user, '-m', '0700', DYNAMIC_CONFIG.dir],
      // setgid: what Vault agent writes there belongs to the updater's group.
      ...(fromVault(dynamic)
        ? [['install', '-d', '-o', 'vault', '-g', CONFIG_UPDATER.user, '-m', '2750', CONFIG_UPDATER.vaultRendered]]
        : []),
    ],
    services: [{ unit: started, onChange: 'restart' }],
  };
}
