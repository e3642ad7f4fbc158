import type { SecretWriter } from '../../core/secret.ts';
import type { GuestServices } from '../../inventory/model.ts';
import { secretFile, type CloudConfigFragment } from './fragment.ts';
import { renderServiceUnit } from './systemd-unit.ts';

/**
 * Vault agent with AppRole auto-auth, as the seed module sets it up: role_id and secret_id in files
 * only the vault user reads, the token written to a sink other services can be given access to.
 * The configuration is JSON, which Vault reads like HCL, so it is built and checked as data.
 */

export const VAULT_AGENT_UNIT = 'vault-agent.service';

export const VAULT_AGENT_PATHS = {
  dir: '/etc/vault-agent.d',
  config: '/etc/vault-agent.d/agent.json',
  roleId: '/etc/vault-agent.d/role-id',
  secretId: '/etc/vault-agent.d/secret-id',
  ca: '/etc/vault-agent.d/vault-ca.crt',
  token: '/run/vault-agent/token',
  unit: '/etc/systemd/system/vault-agent.service',
} as const;

export function vaultAgentConfig(vault: GuestServices['vaultAgent']): Record<string, unknown> {
  return {
    pid_file: '/run/vault-agent/agent.pid',
    vault: { address: vault.vaultAddress, ...(vault.vaultCaCert ? { ca_cert: VAULT_AGENT_PATHS.ca } : {}) },
    auto_auth: {
      method: [
        {
          type: 'approle',
          config: {
            role_id_file_path: VAULT_AGENT_PATHS.roleId,
            secret_id_file_path: VAULT_AGENT_PATHS.secretId,
            // Kept: a restarted agent must be able to log in again without cloud-init.
            remove_secret_id_file_after_reading: false,
          },
        },
      ],
      sink: [{ type: 'file', config: { path: VAULT_AGENT_PATHS.token, mode: 0o640 } }],
    },
  };
}

export function renderVaultAgentUnit(binary: string): string {
  return renderServiceUnit({
    comment: 'Managed by etcd-kvm.',
    description: 'Vault agent (AppRole auto-auth)',
    user: 'vault',
    service: ['RuntimeDirectory=vault-agent', 'RuntimeDirectoryMode=0750'],
    // The directory: other features (the fluent-bit config updater) add their templates as files there.
    execStart: `${binary} agent -config=${VAULT_AGENT_PATHS.dir}`,
  });
}

export function vaultAgentFragment(vault: GuestServices['vaultAgent'], writeSecret: SecretWriter): CloudConfigFragment {
  if (!vault.enabled) return {};
  const { roleId, secretId } = vault.authMethod.config;
  return {
    writeFiles: [
      {
        path: VAULT_AGENT_PATHS.config,
        permissions: '0644',
        content: `${JSON.stringify(vaultAgentConfig(vault), null, 2)}\n`,
        notify: VAULT_AGENT_UNIT,
      },
      secretFile(VAULT_AGENT_PATHS.roleId, 'vault:vault', writeSecret(roleId), VAULT_AGENT_UNIT),
      secretFile(VAULT_AGENT_PATHS.secretId, 'vault:vault', writeSecret(secretId), VAULT_AGENT_UNIT),
      ...(vault.vaultCaCert
        ? [{ path: VAULT_AGENT_PATHS.ca, permissions: '0644', content: vault.vaultCaCert, notify: VAULT_AGENT_UNIT }]
        : []),
      { path: VAULT_AGENT_PATHS.unit, permissions: '0644', content: renderVaultAgentUnit('/usr/bin/vault'), notify: VAULT_AGENT_UNIT },
    ],
    services: [{ unit: VAULT_AGENT_UNIT, onChange: 'restart' }],
  };
}
