import { stringify } from 'yaml';
import type { SecretWriter } from '../core/secret.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { MemberTls } from '../pki/materials.ts';
import { etcdEnvironment, GUEST_PATHS, renderEnvironmentFile, renderUnitFile, type InitialClusterState } from './etcd.ts';

/**
 * cloud-init NoCloud files for one member, built as data and serialised with the yaml library
 * so every value is escaped for YAML. Authentication is not bootstrapped here: the pipeline does it.
 */

export interface CloudInitInput {
  inventory: Inventory;
  member: Member;
  tls: MemberTls;
  /** The key the tool itself logs in with, authorised next to the operator's. */
  toolSshPublicKey?: string;
  initialClusterState: InitialClusterState;
  writeSecret: SecretWriter;
}

/**
 * cloud-init reads YAML 1.1 (PyYAML), where an all-digit MAC is a base-60 number and `on` a boolean:
 * serialising as 1.1 quotes every such string.
 */
const toYaml = (value: unknown) => stringify(value, { version: '1.1', lineWidth: 0 });

/** Shown in place of material the PKI step has not created yet (dry-run before the first apply). */
function pending(what: string): string {
  return `(${what}: issued when the pki step applies)\n`;
}

export function renderMetaData(inventory: Inventory, member: Member): string {
  // A stable instance-id: a new one would make cloud-init run per-instance modules again on reboot.
  return toYaml({ 'instance-id': `${inventory.cluster.name}-${member.name}`, 'local-hostname': member.name });
}

export function renderNetworkConfig(member: Member): string {
  const ethernets: Record<string, unknown> = {};
  member.interfaces.forEach((nic, i) => {
    ethernets[`nic${i}`] = {
      match: { macaddress: nic.mac },
      dhcp4: false,
      dhcp6: false,
      addresses: [`${nic.ip}/${nic.prefixLength}`],
      ...(nic.gateway ? { routes: [{ to: '0.0.0.0/0', via: nic.gateway, metric: 100 * (i + 1) }] } : {}),
      ...(nic.dnsServers.length > 0 ? { nameservers: { addresses: nic.dnsServers } } : {}),
    };
  });
  return toYaml({ version: 2, ethernets });
}

export function renderUserData(input: CloudInitInput): string {
  const { inventory, member, tls, writeSecret } = input;
  const authorizedKeys = [member.admin.publicKey, input.toolSshPublicKey].filter((key): key is string => Boolean(key));
  const hasPassword = !member.admin.password.isEmpty;
  const config = {
    hostname: member.name,
    ...(member.fqdn ? { fqdn: member.fqdn } : {}),
    manage_etc_hosts: true,
    ssh_pwauth: false,
    disable_root: true,
    // The host key the tool generated and pinned in its known_hosts; no others are generated.
    ...(tls.sshHostKey ? { ssh_deletekeys: true, ssh_keys: { ecdsa_private: writeSecret(tls.sshHostKey.privateKey), ecdsa_public: tls.sshHostKey.publicLine } } : {}),
    users: [
      {
        name: member.admin.user,
        gecos: 'etcd-kvm administrator',
        groups: ['adm', 'systemd-journal'],
        sudo: 'ALL=(ALL) NOPASSWD:ALL',
        shell: '/bin/bash',
        lock_passwd: !hasPassword,
        ...(authorizedKeys.length > 0 ? { ssh_authorized_keys: authorizedKeys } : {}),
      },
    ],
    // The console password never enables SSH password logins (ssh_pwauth is false).
    ...(hasPassword ? { chpasswd: { expire: false, users: [{ name: member.admin.user, password: writeSecret(member.admin.password), type: 'text' }] } } : {}),
    write_files: [
      { path: GUEST_PATHS.caCert, permissions: '0644', content: tls.caCert ?? pending('CA certificate') },
      { path: GUEST_PATHS.serverCert, permissions: '0644', content: tls.cert ?? pending(`certificate of ${member.name}`) },
      // Deferred to the final stage, when the etcd user (from the package) surely exists.
      { path: GUEST_PATHS.serverKey, permissions: '0600', owner: 'etcd:etcd', defer: true, content: tls.key ? writeSecret(tls.key) : pending(`private key of ${member.name}`) },
      { path: GUEST_PATHS.environmentFile, permissions: '0644', content: renderEnvironmentFile(etcdEnvironment(inventory, member, input.initialClusterState)) },
      { path: GUEST_PATHS.unitFile, permissions: '0644', content: renderUnitFile(inventory, member) },
    ],
    runcmd: [
      ['install', '-d', '-o', 'etcd', '-g', 'etcd', '-m', '0700', inventory.etcd.data_dir],
      ['systemctl', 'daemon-reload'],
      ['systemctl', 'enable', '--now', 'etcd.service'],
    ],
  };
  return `#cloud-config\n${toYaml(config)}`;
}
