import { stringify } from 'yaml';
import { maskSecret, revealSecret, type SecretWriter } from '../core/secret.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { MemberTls } from '../pki/materials.ts';
import type { FirstStart } from './etcd.ts';
import { memberAgentFragment } from './guest/member-agent.ts';
import { textfileFragment } from './guest/textfile.ts';
import { agentInEtcd } from '../inventory/tool-users.ts';
import { chronyFragment } from './guest/chrony.ts';
import { dataVolumeFragment } from './guest/data-volume.ts';
import { dependenciesFragment } from './guest/dependencies.ts';
import { etcdFragment } from './guest/etcd-member.ts';
import { fluentBitDynamicFragment, usesDynamicConfig } from './guest/fluent-bit-dynamic.ts';
import { fluentBitFragment } from './guest/fluent-bit.ts';
import { firstBootCommands, type CloudConfigFragment } from './guest/fragment.ts';
import { nodeExporterFragment } from './guest/node-exporter.ts';
import { vaultAgentFragment } from './guest/vault-agent.ts';

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
  firstStart: FirstStart;
  /** The state directory's cluster ID, which the agent binds into every backup's manifest (absent in a new cluster's dry-run). */
  clusterId?: string;
  writeSecret: SecretWriter;
}

/**
 * cloud-init reads YAML 1.1 (PyYAML), where an all-digit MAC is a base-60 number and `on` a boolean:
 * serialising as 1.1 quotes every such string.
 */
const toYaml = (value: unknown) => stringify(value, { version: '1.1', lineWidth: 0 });

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
      // Addresses come from the inventory (IPv4 only), never from router advertisements. Left on, networkd
      // solicits routers and holds the link in 'configuring' until a router answers or its 12 s timeout ends:
      // on a LAN without IPv6 routers every first boot waits those 12 s in systemd-networkd-wait-online,
      // before cloud-init's network stage. IPv6 link-local addresses stay. Honoured by netplan and by
      // cloud-init's networkd renderer from 24.1 (22.4, Debian 12's, drops it unless DHCPv6 is on).
      'accept-ra': false,
      addresses: [`${nic.ip}/${nic.prefixLength}`],
      ...(nic.gateway ? { routes: [{ to: '0.0.0.0/0', via: nic.gateway, metric: 100 * (i + 1) }] } : {}),
      ...(nic.dnsServers.length > 0 ? { nameservers: { addresses: nic.dnsServers } } : {}),
    };
  });
  return toYaml({ version: 2, ethernets });
}

/** Every guest feature's contribution, in the order their commands must run. */
export function guestFragments(input: CloudInitInput): CloudConfigFragment[] {
  const { inventory, member, writeSecret } = input;
  const features = [
    dependenciesFragment(inventory, member),
    dataVolumeFragment(member, inventory.etcd.dataDir),
    etcdFragment(inventory, member, input.tls, input.firstStart, writeSecret),
    nodeExporterFragment(member),
    chronyFragment(member.services.chrony),
    fluentBitFragment({ fluentbit: member.services.fluentbit, dynamic: usesDynamicConfig(member.services) }, writeSecret),
    fluentBitDynamicFragment(member.services, writeSecret),
    vaultAgentFragment(member.services.vaultAgent, writeSecret),
    memberAgentFragment({ inventory, member, tls: input.tls, clusterId: input.clusterId }, writeSecret),
  ];
  return [...features, textfileFragment(input.tls, features, agentInEtcd(inventory))];
}

/** The guest features' fragments both ways: with the secrets written (what goes into the guest), and masked (what may be shown). */
export interface GuestFragments {
  real: CloudConfigFragment[];
  shown: CloudConfigFragment[];
}

export const guestFragmentsBothWays = (input: Omit<CloudInitInput, 'writeSecret'>): GuestFragments => ({
  real: guestFragments({ ...input, writeSecret: revealSecret }),
  shown: guestFragments({ ...input, writeSecret: maskSecret }),
});

/**
 * cloud-init's `packages`: those the fragments install, and with install_dependencies the Debian packages
 * their programs need (CloudConfigFragment.needs); none, no key.
 */
function firstBootPackages(fragments: readonly CloudConfigFragment[], installDependencies: boolean): { packages?: string[] } {
  const listed = fragments.flatMap((fragment) => (fragment.modules?.packages as string[] | undefined) ?? []);
  const needed = installDependencies ? fragments.flatMap((fragment) => fragment.needs ?? []).map((need) => need.name) : [];
  const packages = [...new Set([...listed, ...needed])];
  return packages.length > 0 ? { packages } : {};
}

/** `fragments`: guestFragments of the same input, rendered with the same writeSecret, when the caller has them already. */
export function renderUserData(input: CloudInitInput, fragments = guestFragments(input)): string {
  const { member, tls, writeSecret } = input;
  const authorizedKeys = [member.admin.publicKey, input.toolSshPublicKey].filter((key): key is string => Boolean(key));
  const hasPassword = !member.admin.password.isEmpty;
  // A hash is set on the user itself; only a plain password needs chpasswd.
  const hasHash = !member.admin.passwordHash.isEmpty;
  const config = {
    hostname: member.name,
    ...(member.fqdn ? { fqdn: member.fqdn } : {}),
    manage_etc_hosts: true,
    ssh_pwauth: false,
    disable_root: true,
    // Neither the host keys nor the authorized keys' fingerprints are written to the console at the end of
    // the first boot: the tool pins the host key itself, and the two cost ~2.5 s under emulation.
    no_ssh_fingerprints: true,
    ssh: { emit_keys_to_console: false },
    // The host key the tool generated and pinned in its known_hosts; no others are generated.
    ...(tls.sshHostKey
      ? {
          ssh_deletekeys: true,
          ssh_keys: { ecdsa_private: writeSecret(tls.sshHostKey.privateKey), ecdsa_public: tls.sshHostKey.publicLine },
        }
      : {}),
    users: [
      {
        name: member.admin.user,
        gecos: 'etcd-kvm administrator',
        groups: ['adm', 'systemd-journal'],
        sudo: 'ALL=(ALL) NOPASSWD:ALL',
        shell: '/bin/bash',
        lock_passwd: !hasPassword && !hasHash,
        ...(hasHash ? { hashed_passwd: writeSecret(member.admin.passwordHash) } : {}),
        ...(authorizedKeys.length > 0 ? { ssh_authorized_keys: authorizedKeys } : {}),
      },
      ...fragments.flatMap((fragment) => fragment.users ?? []),
    ],
    // The console password never enables SSH password logins (ssh_pwauth is false).
    ...(hasPassword
      ? { chpasswd: { expire: false, users: [{ name: member.admin.user, password: writeSecret(member.admin.password), type: 'text' }] } }
      : {}),
    ...Object.assign({}, ...fragments.map((fragment) => fragment.modules ?? {})),
    ...firstBootPackages(fragments, member.installDependencies),
    // notify is the guest step's business, not a cloud-init key.
    write_files: fragments.flatMap((fragment) => fragment.writeFiles ?? []).map(({ notify: _notify, ...file }) => file),
    runcmd: firstBootCommands(fragments),
  };
  return `#cloud-config\n${toYaml(config)}`;
}
