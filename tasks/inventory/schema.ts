import { posix } from 'node:path';
import { z } from 'zod';
import { Secret } from '../core/secret.ts';
import { isIPv4 } from './ipv4.ts';
import { MAC_PATTERN } from './mac.ts';

/**
 * The inventory format. Field names and defaults follow the seed Terraform module's input
 * variables so values can be ported across; additions (hypervisors, pools, ports) are ours.
 * Every object is strict: an unknown key is an error, because typos are the commonest inventory bug.
 */

/**
 * Text that lands in line-based files (systemd units, environment files, fstab, chrony.conf, sudoers,
 * fluent-bit's configuration): one line, no control characters, or it could add lines of its own.
 * PEM and armored key text, passwords (serialised by libraries or sent over gRPC) are the exceptions.
 */
const ONE_LINE = /^[^\x00-\x1f\x7f]*$/;
const ONE_LINE_MESSAGE = 'must be one line without control characters (a newline here would add lines to the files it is written into)';
const line = z.string().regex(ONE_LINE, ONE_LINE_MESSAGE);

/** Directories a data directory must never be: the tool makes it etcd's, mode 0700. */
const SYSTEM_DIRECTORIES = new Set(['/', '/bin', '/boot', '/dev', '/etc', '/home', '/lib', '/lib64', '/opt', '/proc', '/root', '/run', '/sbin', '/srv', '/sys', '/tmp', '/usr', '/var', '/var/lib', '/var/log']);

const dataDirectory = line
  .startsWith('/', 'must be an absolute path')
  .refine((path) => path === '/' || (posix.normalize(path) === path && !path.endsWith('/')), (path) => ({ message: `must be a normalised path (no //, ., .. or trailing /): did you mean ${posix.normalize(path).replace(/(.)\/$/, '$1')}?` }))
  .refine((path) => !SYSTEM_DIRECTORIES.has(path), (path) => ({ message: `${path} is a system directory; etcd's data directory is made etcd's own (mode 0700): use a directory of its own such as /var/lib/etcd` }));

const GIB = 1024 * 1024 * 1024;
/** etcd's documented maximum backend quota. */
const MAX_QUOTA_BYTES = 8 * GIB;
/** 1000 years: far inside what X.509's GeneralizedTime can express (year 9999). */
const MAX_VALIDITY_HOURS = 1000 * 365 * 24;

const name = z
  .string()
  .regex(/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/, 'must be a DNS label: lowercase letters, digits and dashes, at most 63 characters');

const ipv4 = z.string().refine(isIPv4, (value) => ({ message: `${JSON.stringify(value)} is not an IPv4 address` }));

const mac = z
  .string()
  .regex(MAC_PATTERN, 'must be a MAC address like 52:54:00:12:34:56')
  // The low bit of the first octet marks a group address (multicast, ff:ff:ff:ff:ff:ff): every host listens to it.
  .refine((value) => !MAC_PATTERN.test(value) || (Number.parseInt(value.slice(0, 2), 16) & 1) === 0, { message: 'is a multicast (group) address, which every host on the network receives; a NIC needs a unicast one like 52:54:00:12:34:56' })
  .transform((value) => value.toLowerCase());

/** Terraform passed prefix_length as a string; accept "24" as well as 24. */
const prefixLength = z.coerce.number().int().min(1).max(32);

const secret = z.string().transform((value) => new Secret(value));
const optionalSecret = secret.default('');

/**
 * A password as crypt(3) stores it in /etc/shadow: SHA-512 ($6$, with optional rounds) or yescrypt
 * ($y$), what `mkpasswd -m sha-512` or `mkpasswd -m yescrypt` print. Kept a secret all the same: a
 * hash can be attacked offline, so it is masked wherever a value is shown.
 */
const CRYPT_HASH = /^(\$6\$(rounds=\d{1,9}\$)?[./0-9A-Za-z]{1,16}\$[./0-9A-Za-z]{86}|\$y\$[./0-9A-Za-z]+\$[./0-9A-Za-z]+\$[./0-9A-Za-z]{43})$/;
const cryptHash = z
  .union([z.literal(''), z.string().regex(CRYPT_HASH, 'must be a crypt(3) hash, $6$… (SHA-512) or $y$… (yescrypt), as mkpasswd -m sha-512 prints it (the value is not shown)')])
  .default('')
  .transform((value) => new Secret(value));

/** Either PEM text inline or a path (relative to the inventory file) to a PEM file; resolved by the loader. */
const pemOrPath = z.string().default('');

const libvirtNetwork = z
  .object({
    network_name: line.default(''),
    // libvirt's network UUID (virsh net-uuid), resolved to the network's name on the hypervisor.
    network_id: z.union([z.string().uuid('is a libvirt network UUID (virsh net-uuid NAME), e.g. 1b4e28ba-2fa1-11d2-883f-0016d3cca427'), z.literal('')]).default(''),
    ip: ipv4,
    mac: mac.optional(),
    prefix_length: prefixLength.default(24),
    gateway: z.union([ipv4, z.literal('')]).default(''),
    dns_servers: z.array(ipv4).default([]),
  })
  .strict();

const macvtapInterface = z
  .object({
    interface: line.min(1, 'names the host network interface the macvtap device attaches to'),
    ip: ipv4,
    mac: mac.optional(),
    prefix_length: prefixLength,
    gateway: z.union([ipv4, z.literal('')]).default(''),
    dns_servers: z.array(ipv4).default([]),
  })
  .strict();

const authenticationBootstrap = z
  .object({
    bootstrap: z.boolean().default(false),
    root_password: optionalSecret,
  })
  .strict()
  .default({});

const tls = z
  .object({
    ca_cert: pemOrPath,
    server_cert: pemOrPath,
    server_key: pemOrPath,
  })
  .strict()
  .default({});

const restore = z
  .object({
    enabled: z.boolean().default(false),
    s3: z
      .object({
        endpoint: line.default(''),
        bucket: line.default(''),
        object_prefix: line.default(''),
        region: line.default(''),
        access_key: optionalSecret,
        secret_key: optionalSecret,
        ca_cert: pemOrPath,
      })
      .strict()
      .default({}),
    encryption_key: optionalSecret,
    backup_timestamp: line.default(''),
  })
  .strict()
  .default({});

const ntpSource = z.object({ url: line.min(1), options: z.array(line).default([]) }).strict();

const chrony = z
  .object({
    enabled: z.boolean().default(false),
    servers: z.array(ntpSource).default([]),
    pools: z.array(ntpSource).default([]),
    makestep: z
      .object({ threshold: z.number().nonnegative().max(86_400, 'is in seconds; at most a day').default(0), limit: z.number().int().min(-1).max(1_000_000).default(0) })
      .strict()
      .default({}),
  })
  .strict()
  .default({});

const fluentbit = z
  .object({
    enabled: z.boolean().default(false),
    etcd_tag: line.default(''),
    node_exporter_tag: line.default(''),
    forward: z
      .object({
        domain: line.default(''),
        port: z.number().int().min(0).max(65535).default(0),
        hostname: line.default(''),
        shared_key: optionalSecret,
        ca_cert: pemOrPath,
      })
      .strict()
      .default({}),
  })
  .strict()
  .default({});

const fluentbitDynamicConfig = z
  .object({
    enabled: z.boolean().default(false),
    source: z.enum(['etcd', 'git']).default('etcd'),
    etcd: z
      .object({
        key_prefix: line.default(''),
        endpoints: z.array(line).default([]),
        ca_certificate: pemOrPath,
        client: z
          .object({
            certificate: pemOrPath,
            key: optionalSecret,
            username: line.default(''),
            password: optionalSecret,
          })
          .strict()
          .default({}),
        vault_agent_secret_path: line.default(''),
      })
      .strict()
      .default({}),
    git: z
      .object({
        repo: line.default(''),
        ref: line.default(''),
        path: line.default(''),
        trusted_gpg_keys: z.array(z.string()).default([]),
        auth: z
          .object({
            client_ssh_key: optionalSecret,
            server_ssh_fingerprint: line.default(''),
          })
          .strict()
          .default({}),
      })
      .strict()
      .default({}),
  })
  .strict()
  .default({});

const vaultAgent = z
  .object({
    enabled: z.boolean().default(false),
    auth_method: z
      .object({
        config: z.object({ role_id: optionalSecret, secret_id: optionalSecret }).strict().default({}),
      })
      .strict()
      .default({}),
    vault_address: line.default(''),
    vault_ca_cert: pemOrPath,
  })
  .strict()
  .default({});

const volumeRef = z.object({ pool: line.min(1), volume: line.min(1) }).strict();

/** Every per-member setting; `defaults` accepts any subset of these. */
export const memberFields = {
  hypervisor: line.optional(),
  vcpus: z.number().int().min(1).max(256, 'at most 256 (libvirt and QEMU limits are around there)').default(2),
  memory: z.number().int().min(256, 'is in MiB; etcd needs at least 256').max(4 * 1024 * 1024, 'is in MiB; at most 4 TiB').default(8192),
  domain: line.default(''),
  volume_id: line.default(''),
  volume_pool: line.default(''),
  base_image: volumeRef.optional(),
  os_volume_size_gib: z.number().int().min(1).max(65_536, 'is in GiB; at most 64 TiB').optional(),
  data_volume_id: line.default(''),
  data_volume_size_gib: z.number().int().min(0).max(65_536, 'is in GiB; at most 64 TiB').default(0),
  libvirt_networks: z.array(libvirtNetwork).default([]),
  macvtap_interfaces: z.array(macvtapInterface).default([]),
  cloud_init_volume_pool: line.default(''),
  cloud_init_volume_name: line.default(''),
  // A Linux user name (useradd's default rule): it lands in sudoers and /etc/passwd, where anything else could add rules.
  ssh_admin_user: z
    .string()
    .regex(/^[a-z_][a-z0-9_-]{0,31}$/, 'must be a Linux user name: lowercase letters, digits, "_" or "-", starting with a letter or "_", at most 32 characters')
    .default('ubuntu'),
  /**
   * The admin user's console password (never an SSH one: ssh_pwauth is off), in plain text. It is
   * written as it is into the seed ISO (cloud-init's chpasswd), which stays attached to the VM:
   * whoever can read that volume on the hypervisor, or the guest's cdrom as root, reads the password.
   * Prefer admin_user_password_hash; give at most one of the two.
   */
  admin_user_password: optionalSecret,
  /** The admin user's console password as a crypt(3) hash ($6$… or $y$…): only the hash reaches the seed ISO (cloud-init's hashed_passwd). */
  admin_user_password_hash: cryptHash,
  /** An OpenSSH public key line, or a path to a .pub file; the tool's own key is authorised either way. */
  ssh_admin_public_key: line.default(''),
  authentication_bootstrap: authenticationBootstrap,
  tls,
  restore,
  chrony,
  fluentbit,
  fluentbit_dynamic_config: fluentbitDynamicConfig,
  vault_agent: vaultAgent,
  install_dependencies: z.boolean().default(true),
  /** How the tool reaches the member's etcd: through its hypervisor (SSH forwarding) or directly. */
  reach_via: z.enum(['hypervisor', 'direct']).default('hypervisor'),
};

export const memberSchema = z
  .object({
    name,
    /** `absent`: the member is to leave the cluster (Ansible's idiom): removed from etcd, its VM shut down and undefined, its volumes kept. */
    state: z.enum(['present', 'absent']).default('present'),
    ...memberFields,
  })
  .strict();
export const memberDefaultsSchema = z.object(memberFields).partial().strict();

/**
 * How the tool logs into a host over SSH. port, user, private_key and known_hosts left out are taken
 * from the ssh_config entry of `address` (a Host alias works), then default to 22, root, the
 * ssh-agent and ~/.ssh/known_hosts; given here, they win over the file.
 */
const sshLogin = {
  address: line.min(1),
  port: z.number().int().min(1).max(65535).optional(),
  user: line.min(1).optional(),
  private_key: line.optional(),
  known_hosts: line.optional(),
  trust_on_first_use: z.boolean().default(false),
};

/** A jump host on the way to hypervisors (ssh's ProxyJump): only SSH, nothing runs on it. */
export const bastionSchema = z.object(sshLogin).strict();

export const hypervisorSchema = z
  .object({
    ...sshLogin,
    /** Bastions to go through, in order (as ssh -J first,second): names under `bastions`; without, ssh_config's ProxyJump. */
    jump: z.array(name).default([]),
    libvirt_uri: line.default('qemu:///system'),
    domain_type: z.enum(['kvm', 'qemu']).default('kvm'),
    tcg_tb_cache_mib: z.number().int().min(0).max(65_536, 'is in MiB; at most 64 GiB').default(0),
    pool: line.min(1).default('default'),
  })
  .strict();

export const etcdSchema = z
  .object({
    // The latest 3.4 patch release: 3.4.25 and earlier carry CVE-2023-32082 (LeaseTimeToLive leaks key names to a user without read access).
    version: line.default('v3.4.37'),
    auto_compaction_mode: z.enum(['revision', 'periodic']).default('revision'),
    auto_compaction_retention: z.coerce.string().regex(ONE_LINE, ONE_LINE_MESSAGE).default('1000'),
    space_quota: z.number().int().min(16 * 1024 * 1024, 'is in bytes; at least 16 MiB').max(MAX_QUOTA_BYTES, `is in bytes; etcd's documented maximum is 8 GiB (${MAX_QUOTA_BYTES})`).default(MAX_QUOTA_BYTES),
    /** maintain.ts --defrag skips a member whose database has less free space than this (bytes). */
    defrag_min_free: z.number().int().min(1024 * 1024, 'is in bytes; at least 1 MiB (a defragmented database keeps some free pages)').max(MAX_QUOTA_BYTES).default(32 * 1024 * 1024),
    grpc_gateway_enabled: z.boolean().default(false),
    client_cert_auth: z.boolean().default(true),
    client_port: z.number().int().min(1).max(65535).default(2379),
    peer_port: z.number().int().min(1).max(65535).default(2380),
    listen_localhost: z.boolean().default(true),
    data_dir: dataDirectory.default('/var/lib/etcd'),
  })
  .strict()
  .default({});

export const clusterSchema = z
  .object({
    name,
    is_initializing: z.boolean().default(true),
    initial_token: line.min(1),
    initial_members: z.array(z.object({ ip: ipv4, name: line }).strict()).default([]),
    state_dir: line.default(''),
    /** Seconds to wait for every member to report healthy; measured under emulation: 3 VMs ~140 s from start. */
    health_timeout: z.number().int().positive().max(86_400, 'is in seconds; at most a day').default(600),
  })
  .strict();

export const pkiSchema = z
  .object({
    organization: line.default('etcd-kvm'),
    validity_period: z.number().int().positive().max(MAX_VALIDITY_HOURS, `is in hours; at most ${MAX_VALIDITY_HOURS} (1000 years)`).default(100 * 365 * 24),
    early_renewal_period: z.number().int().nonnegative().max(MAX_VALIDITY_HOURS, `is in hours; at most ${MAX_VALIDITY_HOURS}`).default(365 * 24),
    key_length: z.union([z.literal(2048), z.literal(3072), z.literal(4096)]).default(2048),
    extra_domains: z.array(line).default([]),
    /**
     * A two-tier PKI: the CA (the members' and clients' trust anchor) signs only an intermediate CA,
     * which signs members and clients; certificates carry the intermediate after them. The CA's key
     * can then be kept offline.
     */
    intermediate: z.boolean().default(false),
    /**
     * The operator's own intermediate CA, which then signs members and clients: its certificate and key,
     * and `chain`, the certificates above it up to and including the root (the members' and clients'
     * trust anchor), which the tool never needs the key of.
     */
    intermediate_ca: z.object({ certificate: pemOrPath, key: pemOrPath, chain: pemOrPath }).strict().optional(),
    ca: z.object({ certificate: pemOrPath, key: pemOrPath }).strict().optional(),
    root_client: z.object({ certificate: pemOrPath, key: pemOrPath }).strict().optional(),
  })
  .strict()
  .default({});

/**
 * Names of etcd users and roles the tool manages: also a certificate's CN and a file name in the state
 * directory and in client bundles. `root` is the tool's own (the auth bootstrap) and never an application's.
 */
const accessName = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, 'must be letters, digits, ".", "_" or "-", starting with a letter or digit, at most 64 characters')
  .refine((value) => value !== 'root', { message: 'root is the user and role the tool bootstraps authentication with; give application users and roles names of their own' });

/** One permission of a role: on one key, or on every key under a prefix. */
const permission = z
  .object({
    key: line.min(1).optional(),
    prefix: line.min(1).optional(),
    access: z.enum(['read', 'write', 'readwrite']),
  })
  .strict()
  .refine((value) => (value.key === undefined) !== (value.prefix === undefined), { message: 'gives exactly one of key (one key) or prefix (every key under it)' });

export const roleSchema = z.object({ permissions: z.array(permission).default([]) }).strict();

export const userSchema = z
  .object({
    roles: z.array(accessName).default([]),
    /** Password mode only: the user's password, sent to etcd inside the gRPC request. */
    password: optionalSecret,
  })
  .strict();

/** The document as written; `defaults` and `members` are validated separately by the loader. */
export const documentSchema = z
  .object({
    cluster: clusterSchema,
    etcd: etcdSchema,
    pki: pkiSchema,
    hypervisors: z.record(name, hypervisorSchema),
    bastions: z.record(name, bastionSchema).default({}),
    /** The ssh_config to read hosts from: a path, or false; by default ~/.ssh/config where it exists. */
    ssh_config: z.union([z.literal(false), line.min(1)]).optional(),
    /** Application roles and users: the auth step's `users` part creates, changes and removes the ones the tool made. */
    roles: z.record(accessName, roleSchema).default({}),
    users: z.record(accessName, userSchema).default({}),
    defaults: z.record(z.unknown()).default({}),
    members: z.array(z.record(z.unknown())).min(1, 'lists at least one member'),
  })
  .strict();

export type MemberInput = z.infer<typeof memberSchema>;
export type HypervisorInput = z.infer<typeof hypervisorSchema>;
export type BastionInput = z.infer<typeof bastionSchema>;
export type EtcdSettings = z.infer<typeof etcdSchema>;
export type ClusterSettings = z.infer<typeof clusterSchema>;
export type PkiSettings = z.infer<typeof pkiSchema>;
export type RoleInput = z.infer<typeof roleSchema>;
export type UserInput = z.infer<typeof userSchema>;
