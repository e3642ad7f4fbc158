import { z } from 'zod';
import { Secret } from '../core/secret.ts';
import { isIPv4 } from './ipv4.ts';
import { MAC_PATTERN } from './mac.ts';

/**
 * The inventory format. Field names and defaults follow the seed Terraform module's input
 * variables so values can be ported across; additions (hypervisors, pools, ports) are ours.
 * Every object is strict: an unknown key is an error, because typos are the commonest inventory bug.
 */

const name = z
  .string()
  .regex(/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/, 'must be a DNS label: lowercase letters, digits and dashes, at most 63 characters');

const ipv4 = z.string().refine(isIPv4, (value) => ({ message: `${JSON.stringify(value)} is not an IPv4 address` }));

const mac = z
  .string()
  .regex(MAC_PATTERN, 'must be a MAC address like 52:54:00:12:34:56')
  .transform((value) => value.toLowerCase());

/** Terraform passed prefix_length as a string; accept "24" as well as 24. */
const prefixLength = z.coerce.number().int().min(1).max(32);

const secret = z.string().transform((value) => new Secret(value));
const optionalSecret = secret.default('');

/** Either PEM text inline or a path (relative to the inventory file) to a PEM file; resolved by the loader. */
const pemOrPath = z.string().default('');

const libvirtNetwork = z
  .object({
    network_name: z.string().default(''),
    network_id: z.string().default(''),
    ip: ipv4,
    mac: mac.optional(),
    prefix_length: prefixLength.default(24),
    gateway: z.union([ipv4, z.literal('')]).default(''),
    dns_servers: z.array(ipv4).default([]),
  })
  .strict();

const macvtapInterface = z
  .object({
    interface: z.string().min(1, 'names the host network interface the macvtap device attaches to'),
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
        endpoint: z.string().default(''),
        bucket: z.string().default(''),
        object_prefix: z.string().default(''),
        region: z.string().default(''),
        access_key: optionalSecret,
        secret_key: optionalSecret,
        ca_cert: pemOrPath,
      })
      .strict()
      .default({}),
    encryption_key: optionalSecret,
    backup_timestamp: z.string().default(''),
  })
  .strict()
  .default({});

const ntpSource = z.object({ url: z.string().min(1), options: z.array(z.string()).default([]) }).strict();

const chrony = z
  .object({
    enabled: z.boolean().default(false),
    servers: z.array(ntpSource).default([]),
    pools: z.array(ntpSource).default([]),
    makestep: z
      .object({ threshold: z.number().nonnegative().default(0), limit: z.number().int().default(0) })
      .strict()
      .default({}),
  })
  .strict()
  .default({});

const fluentbit = z
  .object({
    enabled: z.boolean().default(false),
    etcd_tag: z.string().default(''),
    node_exporter_tag: z.string().default(''),
    forward: z
      .object({
        domain: z.string().default(''),
        port: z.number().int().min(0).max(65535).default(0),
        hostname: z.string().default(''),
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
        key_prefix: z.string().default(''),
        endpoints: z.array(z.string()).default([]),
        ca_certificate: pemOrPath,
        client: z
          .object({
            certificate: pemOrPath,
            key: optionalSecret,
            username: z.string().default(''),
            password: optionalSecret,
          })
          .strict()
          .default({}),
        vault_agent_secret_path: z.string().default(''),
      })
      .strict()
      .default({}),
    git: z
      .object({
        repo: z.string().default(''),
        ref: z.string().default(''),
        path: z.string().default(''),
        trusted_gpg_keys: z.array(z.string()).default([]),
        auth: z
          .object({
            client_ssh_key: optionalSecret,
            server_ssh_fingerprint: z.string().default(''),
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
    vault_address: z.string().default(''),
    vault_ca_cert: pemOrPath,
  })
  .strict()
  .default({});

const volumeRef = z.object({ pool: z.string().min(1), volume: z.string().min(1) }).strict();

/** Every per-member setting; `defaults` accepts any subset of these. */
export const memberFields = {
  hypervisor: z.string().optional(),
  vcpus: z.number().int().min(1).default(2),
  memory: z.number().int().min(256, 'is in MiB; etcd needs at least 256').default(8192),
  domain: z.string().default(''),
  volume_id: z.string().default(''),
  volume_pool: z.string().default(''),
  base_image: volumeRef.optional(),
  os_volume_size_gib: z.number().int().min(1).optional(),
  data_volume_id: z.string().default(''),
  data_volume_size_gib: z.number().int().min(0).default(0),
  libvirt_networks: z.array(libvirtNetwork).default([]),
  macvtap_interfaces: z.array(macvtapInterface).default([]),
  cloud_init_volume_pool: z.string().default(''),
  cloud_init_volume_name: z.string().default(''),
  ssh_admin_user: z.string().min(1).default('ubuntu'),
  admin_user_password: optionalSecret,
  /** An OpenSSH public key line, or a path to a .pub file; the tool's own key is authorised either way. */
  ssh_admin_public_key: z.string().default(''),
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

export const memberSchema = z.object({ name, ...memberFields }).strict();
export const memberDefaultsSchema = z.object(memberFields).partial().strict();

export const hypervisorSchema = z
  .object({
    address: z.string().min(1),
    port: z.number().int().min(1).max(65535).default(22),
    user: z.string().min(1).default('root'),
    private_key: z.string().default(''),
    known_hosts: z.string().default('~/.ssh/known_hosts'),
    trust_on_first_use: z.boolean().default(false),
    libvirt_uri: z.string().default('qemu:///system'),
    domain_type: z.enum(['kvm', 'qemu']).default('kvm'),
    tcg_tb_cache_mib: z.number().int().min(0).default(0),
    pool: z.string().min(1).default('default'),
  })
  .strict();

export const etcdSchema = z
  .object({
    version: z.string().default('v3.4.18'),
    auto_compaction_mode: z.enum(['revision', 'periodic']).default('revision'),
    auto_compaction_retention: z.coerce.string().default('1000'),
    space_quota: z.number().int().positive().default(8 * 1024 * 1024 * 1024),
    grpc_gateway_enabled: z.boolean().default(false),
    client_cert_auth: z.boolean().default(true),
    client_port: z.number().int().min(1).max(65535).default(2379),
    peer_port: z.number().int().min(1).max(65535).default(2380),
    listen_localhost: z.boolean().default(true),
    data_dir: z.string().startsWith('/').default('/var/lib/etcd'),
  })
  .strict()
  .default({});

export const clusterSchema = z
  .object({
    name,
    is_initializing: z.boolean().default(true),
    initial_token: z.string().min(1),
    initial_members: z.array(z.object({ ip: ipv4, name: z.string() }).strict()).default([]),
    state_dir: z.string().default(''),
    /** Seconds to wait for every member to report healthy; measured under emulation: 3 VMs ~140 s from start. */
    health_timeout: z.number().int().positive().default(600),
  })
  .strict();

export const pkiSchema = z
  .object({
    organization: z.string().default('etcd-kvm'),
    validity_period: z.number().int().positive().default(100 * 365 * 24),
    early_renewal_period: z.number().int().nonnegative().default(365 * 24),
    key_length: z.union([z.literal(2048), z.literal(3072), z.literal(4096)]).default(2048),
    extra_domains: z.array(z.string()).default([]),
    ca: z.object({ certificate: pemOrPath, key: pemOrPath }).strict().optional(),
    root_client: z.object({ certificate: pemOrPath, key: pemOrPath }).strict().optional(),
  })
  .strict()
  .default({});

/** The document as written; `defaults` and `members` are validated separately by the loader. */
export const documentSchema = z
  .object({
    cluster: clusterSchema,
    etcd: etcdSchema,
    pki: pkiSchema,
    hypervisors: z.record(name, hypervisorSchema),
    defaults: z.record(z.unknown()).default({}),
    members: z.array(z.record(z.unknown())).min(1, 'lists at least one member'),
  })
  .strict();

export type MemberInput = z.infer<typeof memberSchema>;
export type HypervisorInput = z.infer<typeof hypervisorSchema>;
export type EtcdSettings = z.infer<typeof etcdSchema>;
export type ClusterSettings = z.infer<typeof clusterSchema>;
export type PkiSettings = z.infer<typeof pkiSchema>;
export type LibvirtNetworkInput = z.infer<typeof libvirtNetwork>;
export type MacvtapInput = z.infer<typeof macvtapInterface>;
