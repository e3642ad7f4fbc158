import { posix } from 'node:path';
import { z } from 'zod';
import { Secret } from '../core/secret.ts';
import { isIPv4 } from './ipv4.ts';
import { MAC_PATTERN } from './mac.ts';
import { ETCD_DEFAULT_ELECTION_MS, ETCD_DEFAULT_HEARTBEAT_MS } from './etcd-timing.ts';

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
/** A duration as etcd's flags take it (Go's): "90s", "4h", "1h30m"; "0" for none. */
const goDuration = z.string().regex(/^(0|([1-9]\d*(h|m|s))+)$/, 'must be a duration such as "1m", "4h" or "1h30m", or "0" for none');

/** Directories a data directory must never be: the tool makes it etcd's, mode 0700. */
const SYSTEM_DIRECTORIES = new Set([
  '/',
  '/bin',
  '/boot',
  '/dev',
  '/etc',
  '/home',
  '/lib',
  '/lib64',
  '/opt',
  '/proc',
  '/root',
  '/run',
  '/sbin',
  '/srv',
  '/sys',
  '/tmp',
  '/usr',
  '/var',
  '/var/lib',
  '/var/log',
]);

const dataDirectory = line
  .startsWith('/', 'must be an absolute path')
  .refine(
    (path) => path === '/' || (posix.normalize(path) === path && !path.endsWith('/')),
    (path) => ({
      message: `must be a normalised path (no //, ., .. or trailing /): did you mean ${posix.normalize(path).replace(/(.)\/$/, '$1')}?`,
    }),
  )
  .refine(
    (path) => !SYSTEM_DIRECTORIES.has(path),
    (path) => ({
      message:
        `${path} is a system directory; etcd's data directory is made etcd's ` +
        `own (mode 0700): use a directory of its own such as /var/lib/etcd`,
    }),
  );

const GIB = 1024 * 1024 * 1024;
/** etcd's documented maximum backend quota. */
const MAX_QUOTA_BYTES = 8 * GIB;
/** etcd's longest election timeout, in milliseconds (its tuning guide). */
const MAX_ELECTION_MS = 50_000;
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
  .refine((value) => !MAC_PATTERN.test(value) || (Number.parseInt(value.slice(0, 2), 16) & 1) === 0, {
    message: 'is a multicast (group) address, which every host on the network receives; a NIC needs a unicast one like 52:54:00:12:34:56',
  })
  .transform((value) => value.toLowerCase());

const PREFIX_LENGTH_MESSAGE = 'must be a whole number from 1 to 32 (written 24 or "24")';
/**
 * Terraform passed prefix_length as a string: "24" is taken as well as 24, and nothing else — never a
 * coercion (a boolean would be 1, a list [24] or "0x18" 24: a wrong network rendered without a word).
 */
const prefixLength = z.union(
  [
    z.number().int(PREFIX_LENGTH_MESSAGE).min(1, PREFIX_LENGTH_MESSAGE).max(32, PREFIX_LENGTH_MESSAGE),
    // 1 to 32 as a pattern: what the published schema can say of a string, and says.
    z
      .string()
      .regex(/^([1-9]|[12][0-9]|3[0-2])$/, PREFIX_LENGTH_MESSAGE)
      .transform(Number),
  ],
  { errorMap: () => ({ message: PREFIX_LENGTH_MESSAGE }) },
);

const secret = z.string().transform((value) => new Secret(value));
const optionalSecret = secret.default('');

/**
 * A password as crypt(3) stores it in /etc/shadow: SHA-512 ($6$, with optional rounds) or yescrypt
 * ($y$), what `mkpasswd -m sha-512` or `mkpasswd -m yescrypt` print. Kept a secret all the same: a
 * hash can be attacked offline, so it is masked wherever a value is shown.
 */
const CRYPT_HASH =
  /^(\$6\$(rounds=\d{1,9}\$)?[./0-9A-Za-z]{1,16}\$[./0-9A-Za-z]{86}|\$y\$[./0-9A-Za-z]+\$[./0-9A-Za-z]+\$[./0-9A-Za-z]{43})$/;
const cryptHash = z
  .union([
    z.literal(''),
    z
      .string()
      .regex(
        CRYPT_HASH,
        'must be a crypt(3) hash, $6$… (SHA-512) or $y$… (yescrypt), as mkpasswd -m sha-512 prints it (the value is not shown)',
      ),
  ])
  .default('')
  .transform((value) => new Secret(value));

/** Either PEM text inline or a path (relative to the inventory file) to a PEM file; resolved by the loader. */
const pemOrPath = z.string().default('');

const libvirtNetwork = z
  .object({
    network_name: line.default('').describe("The libvirt network's name on the member's hypervisor; give it or `network_id`, not both."),
    // libvirt's network UUID (virsh net-uuid), resolved to the network's name on the hypervisor.
    network_id: z
      .union([z.string().uuid('is a libvirt network UUID (virsh net-uuid NAME), e.g. 1b4e28ba-2fa1-11d2-883f-0016d3cca427'), z.literal('')])
      .default('')
      .describe(
        "The libvirt network's UUID, as `virsh net-uuid` prints it; the `networks` step resolves it to the network's name on the " +
          "member's hypervisor before rendering (an unknown UUID fails that member; `--render-only` leaves the UUID in place). Give it " +
          'or `network_name`, not both.',
      ),
    ip: ipv4.describe("The member's IPv4 address on this network: a host address of its prefix, unique in the inventory."),
    mac: mac.optional().describe("The NIC's MAC address; derived from the cluster, member and interface when left out."),
    prefix_length: prefixLength.default(24).describe('The network prefix length of `ip` (1–32); "24" is accepted as well as 24.'),
    gateway: z
      .union([ipv4, z.literal('')])
      .default('')
      .describe('The default route through this interface: an address inside the prefix; empty for none.'),
    dns_servers: z.array(ipv4).default([]).describe("DNS servers set for this interface in the member's network configuration."),
  })
  .strict();

const macvtapInterface = z
  .object({
    interface: line
      .min(1, 'names the host network interface the macvtap device attaches to')
      .describe("The hypervisor's network device the macvtap NIC attaches to (bridge mode)."),
    ip: ipv4.describe("The member's IPv4 address on this segment: a host address of its prefix, unique in the inventory."),
    mac: mac.optional().describe("The NIC's MAC address; derived from the cluster, member and interface when left out."),
    prefix_length: prefixLength.describe('The network prefix length of `ip` (1–32); required here.'),
    gateway: z
      .union([ipv4, z.literal('')])
      .default('')
      .describe('The default route through this interface: an address inside the prefix; empty for none.'),
    dns_servers: z.array(ipv4).default([]).describe("DNS servers set for this interface in the member's network configuration."),
  })
  .strict();

const authenticationBootstrap = z
  .object({
    bootstrap: z
      .boolean()
      .default(false)
      .describe(
        'This member creates role and user root and enables authentication; exactly one member must while `cluster.is_initializing` is ' +
          'true.',
      ),
    root_password: optionalSecret.describe(
      "root's password in password mode (`etcd.client_cert_auth: false`), where it is required; sent to etcd only inside the gRPC " +
        'request over TLS.',
    ),
  })
  .strict()
  .default({})
  .describe("Which member bootstraps authentication (root role and user, `auth enable`), and root's password in password mode.");

const tls = z
  .object({
    ca_cert: pemOrPath.describe('The CA that signed `server_cert`, PEM text or a file path relative to the inventory.'),
    server_cert: pemOrPath.describe("The member's certificate (server and peer), PEM text or a file path."),
    server_key: pemOrPath.describe("The certificate's private key, PEM text or a file path."),
  })
  .strict()
  .default({})
  .describe('An operator-supplied certificate for this member instead of one the tool issues: all three fields or none.');

const restore = z
  .object({
    enabled: z
      .boolean()
      .default(false)
      .describe("New members restore an etcd-backup snapshot before etcd's first start; needs `cluster.is_initializing: true`."),
    s3: z
      .object({
        endpoint: line
          .default('')
          .describe('The S3 endpoint URL (`https://…` or `http://…`, a host, no credentials, query or fragment); required when restoring.'),
        bucket: line.default('').describe('The bucket holding the snapshots (a name S3 accepts); required when restoring.'),
        object_prefix: line
          .default('')
          .describe(
            'Snapshots are the objects `<object_prefix>-<RFC 3339 UTC>.dump`: a key prefix (no leading `/`, no empty, `.` or `..` ' +
              'segment, no `?` or `#`, at most 900 bytes); required when restoring.',
          ),
        region: line.default('').describe('The S3 region (`us-east-1`, `eu-central-1`…); empty means `us-east-1`.'),
        access_key: optionalSecret.describe('The S3 access key; required when restoring.'),
        secret_key: optionalSecret.describe('The S3 secret key; required when restoring.'),
        ca_cert: pemOrPath.describe("The CA of the endpoint's certificate, PEM text or a file path; empty: the system's CAs."),
      })
      .strict()
      .default({})
      .describe('Where the snapshots are: the bucket `backup` uploads to and a restore downloads from (path-style requests).'),
    encryption_key: optionalSecret.describe(
      "etcd-backup's master key, 64 hex digits (32 bytes): seals every backup and keys its manifest. Required with `backup.enabled` " +
        'or `restore.enabled`.',
    ),
    backup_timestamp: line
      .default('')
      .describe(
        "Restore the snapshot taken at this RFC 3339 time, even one that is not this cluster's own (the plan then says it is " +
          "unauthenticated, and why); empty: this cluster's latest.",
      ),
  })
  .strict()
  .default({})
  .describe(
    'Restore from an etcd-backup snapshot in S3 when the cluster is founded: the same on every member (set it under `defaults`). The ' +
      'control node downloads the snapshot and pushes it to each member; `backup` writes to the same place.',
  );

const ntpSource = z
  .object({
    url: line.min(1).describe('The host name or address of the time source.'),
    options: z.array(line).default([]).describe('chrony options written after it on its line, e.g. `iburst`.'),
  })
  .strict();

const chrony = z
  .object({
    enabled: z
      .boolean()
      .default(false)
      .describe("Run chrony with these sources in place of the image's; needs at least one server or pool."),
    servers: z.array(ntpSource).default([]).describe('`server` lines of chrony.conf.'),
    pools: z.array(ntpSource).default([]).describe('`pool` lines of chrony.conf.'),
    makestep: z
      .object({
        threshold: z
          .number()
          .nonnegative()
          .max(86_400, 'is in seconds; at most a day')
          .default(0)
          .describe('Step the clock when it is off by more than this many seconds; 0 writes no `makestep` line.'),
        limit: z
          .number()
          .int()
          .min(-1)
          .max(1_000_000)
          .default(0)
          .describe("How many of chrony's first clock updates may step it (-1: any)."),
      })
      .strict()
      .default({})
      .describe("chrony's `makestep`: step a large offset at start-up instead of slewing it."),
  })
  .strict()
  .default({})
  .describe("chrony's time sources: `/etc/chrony/chrony.conf`, kept on every run.");

const fluentbit = z
  .object({
    enabled: z
      .boolean()
      .default(false)
      .describe(
        'Run fluent-bit, forwarding the journal of etcd and of the node exporter; every field below but `forward.ca_cert` is then ' +
          'required.',
      ),
    etcd_tag: line.default('').describe("The tag of etcd's log records."),
    node_exporter_tag: line.default('').describe("The tag of the node exporter's log records."),
    forward: z
      .object({
        domain: line.default('').describe('The fluentd / fluent-bit server the logs are forwarded to.'),
        port: z.number().int().min(0).max(65535).default(0).describe("That server's forward port (24224 by convention)."),
        hostname: line.default('').describe('The host name this member presents to the server (`self_hostname`).'),
        shared_key: optionalSecret.describe("The forward protocol's shared key."),
        ca_cert: pemOrPath.describe("The CA of the server's certificate, PEM text or a file path; empty: the system's CAs."),
      })
      .strict()
      .default({})
      .describe('The forward output: over TLS, the server verified, with a shared key.'),
  })
  .strict()
  .default({})
  .describe('fluent-bit forwarding logs over TLS; configuration `/etc/fluent-bit/etcd-kvm.yaml` (0600).');

const fluentbitDynamicConfig = z
  .object({
    enabled: z
      .boolean()
      .default(false)
      .describe(
        'Keep `/etc/fluent-bit/dynamic` in sync with `source` and have fluent-bit run its `index.conf` with hot reload; needs ' +
          '`fluentbit.enabled`.',
      ),
    source: z
      .enum(['etcd', 'git'])
      .default('etcd')
      .describe('Where the configuration comes from: an etcd key prefix (watched) or a git ref (every minute).'),
    etcd: z
      .object({
        key_prefix: line
          .default('')
          .describe('The etcd key prefix the configuration files are stored under; required with `source: etcd`.'),
        endpoints: z
          .array(line)
          .default([])
          .describe('The etcd endpoints (host:port) holding the configuration; required with `source: etcd`.'),
        ca_certificate: pemOrPath.describe(
          "The CA of those etcd servers' certificates, PEM text or a file path; required with `source: etcd`.",
        ),
        client: z
          .object({
            certificate: pemOrPath.describe(
              'A client certificate, PEM text or a file path (certificate auth; with Vault it only chooses certificate auth).',
            ),
            key: optionalSecret.describe("The client certificate's private key (PEM text)."),
            username: line.default('').describe('A username (password auth).'),
            password: optionalSecret.describe("The username's password."),
          })
          .strict()
          .default({})
          .describe(
            "The updater's etcd credentials: a certificate and key, or a username and password; exactly one kind, unless they come " +
              'from Vault.',
          ),
        vault_agent_secret_path: line
          .default('')
          .describe(
            'A Vault KV v2 secret holding `certificate` and `key`, or `username` and `password`: Vault agent renders the credentials ' +
              'and restarts the updater on renewal; needs `vault_agent.enabled`.',
          ),
      })
      .strict()
      .default({})
      .describe('The etcd source.'),
    git: z
      .object({
        repo: line.default('').describe('The SSH URL of the repository; required with `source: git`.'),
        ref: line.default('').describe('The branch or tag to follow; required with `source: git`.'),
        path: line.default('').describe('The directory inside the repository to sync.'),
        trusted_gpg_keys: z
          .array(z.string())
          .default([])
          .describe('Armored public keys (text or file paths) a commit must be signed by; with none, unsigned commits are accepted.'),
        auth: z
          .object({
            client_ssh_key: optionalSecret.describe('The private key the updater clones with; required with `source: git`.'),
            server_ssh_fingerprint: line
              .default('')
              .describe("The git server's host key as a known_hosts line; required with `source: git`."),
          })
          .strict()
          .default({})
          .describe('How the updater logs into the git server, and how it knows the server.'),
      })
      .strict()
      .default({})
      .describe('The git source.'),
  })
  .strict()
  .default({})
  .describe(
    "fluent-bit's dynamic configuration: an updater (user `fluent-bit-updater`) syncs it and reloads fluent-bit; the static pipeline " +
      'stays at `/etc/fluent-bit/etcd-kvm.yaml`.',
  );

const vaultAgent = z
  .object({
    enabled: z.boolean().default(false).describe('Run Vault agent with AppRole auto-auth; the token lands in `/run/vault-agent/token`.'),
    auth_method: z
      .object({
        config: z
          .object({
            role_id: optionalSecret.describe('The AppRole role_id; required when enabled.'),
            secret_id: optionalSecret.describe('The AppRole secret_id; required when enabled.'),
          })
          .strict()
          .default({})
          .describe("The AppRole's ids, in files only the vault user reads."),
      })
      .strict()
      .default({})
      .describe('The auto-auth method (AppRole).'),
    vault_address: line.default('').describe('The https address of the Vault server; required when enabled.'),
    vault_ca_cert: pemOrPath.describe("The CA of Vault's certificate, PEM text or a file path; empty: the system's CAs."),
  })
  .strict()
  .default({})
  .describe('Vault agent in the guest (AppRole auto-auth).');

const volumeRef = z
  .object({
    pool: line.min(1).describe('The storage pool holding the image.'),
    volume: line.min(1).describe("The image's volume name in that pool."),
  })
  .strict();

/** Every per-member setting; `defaults` accepts any subset of these. */
export const memberFields = {
  hypervisor: line.optional().describe('The key under `hypervisors` this member runs on; may be left out when there is only one.'),
  vcpus: z.number().int().min(1).max(256, 'at most 256 (libvirt and QEMU limits are around there)').default(2).describe('Virtual CPUs.'),
  memory: z
    .number()
    .int()
    .min(256, 'is in MiB; etcd needs at least 256')
    .max(4 * 1024 * 1024, 'is in MiB; at most 4 TiB')
    .default(8192)
    .describe('Memory in MiB.'),
  domain: line.default('').describe('DNS domain: adds the FQDN to the hostname and to the certificate.'),
  volume_id: line
    .default('')
    .describe('An existing OS volume (name in the pool, or absolute path); empty: the tool creates `<name>-os.qcow2` on `base_image`.'),
  volume_pool: line.default('').describe("The pool of the member's volumes; empty: the hypervisor's `pool`."),
  base_image: volumeRef.optional().describe("The OS image the member's disk is a qcow2 overlay on; required without `volume_id`."),
  os_volume_size_gib: z
    .number()
    .int()
    .min(1)
    .max(65_536, 'is in GiB; at most 64 TiB')
    .optional()
    .describe("Size of the created OS disk in GiB; left out: the image's size."),
  data_volume_id: line.default('').describe("An existing data volume, mounted on etcd's data directory."),
  data_volume_size_gib: z
    .number()
    .int()
    .min(0)
    .max(65_536, 'is in GiB; at most 64 TiB')
    .default(0)
    .describe('Size in GiB of a data volume the tool creates (`<name>-data.qcow2`, ext4 labelled `etcd-data`); 0: none.'),
  libvirt_networks: z
    .array(libvirtNetwork)
    .default([])
    .describe("NICs on libvirt networks. etcd listens on the member's first interface (libvirt networks before macvtap)."),
  macvtap_interfaces: z
    .array(macvtapInterface)
    .default([])
    .describe(
      "macvtap NICs (`type='direct'`, bridge mode). The hypervisor cannot reach its own macvtap guests: a member whose etcd listens " +
        'on macvtap needs `reach_via: direct`.',
    ),
  cloud_init_volume_pool: line.default('').describe('The pool of the cloud-init seed ISO; empty: `volume_pool`.'),
  cloud_init_volume_name: line
    .default('')
    .describe(
      "The seed ISO's volume name; empty: `<name>-cloud-init.iso`. The member's alone (not another member's seed, a disk or the base " +
        'image): the tool rewrites it.',
    ),
  // A Linux user name (useradd's default rule): it lands in sudoers and /etc/passwd, where anything else could add rules.
  ssh_admin_user: z
    .string()
    .regex(
      /^[a-z_][a-z0-9_-]{0,31}$/,
      'must be a Linux user name: lowercase letters, digits, "_" or "-", starting with a letter or "_", at most 32 characters',
    )
    .default('ubuntu')
    .describe("The sudo user created in the guest, with `ssh_admin_public_key` and the tool's own key."),
  /**
   * The admin user's console password (never an SSH one: ssh_pwauth is off), in plain text. It is
   * written as it is into the seed ISO (cloud-init's chpasswd), which stays attached to the VM:
   * whoever can read that volume on the hypervisor, or the guest's cdrom as root, reads the password.
   * Prefer admin_user_password_hash; give at most one of the two.
   */
  admin_user_password: optionalSecret.describe(
    "The admin user's console password (`virsh console`), never an SSH one. It lands in the seed ISO in plain text, and the ISO " +
      'stays attached: prefer `admin_user_password_hash`.',
  ),
  /**
   * The admin user's console password as a crypt(3) hash ($6$… or $y$…): only the hash reaches the seed ISO (cloud-init's hashed_passwd).
   */
  admin_user_password_hash: cryptHash.describe(
    "The console password as a crypt(3) hash (`$6$…` or `$y$…`, e.g. from `mkpasswd -m sha-512`), cloud-init's `hashed_passwd`; not " +
      'with `admin_user_password`.',
  ),
  /** An OpenSSH public key line, or a path to a .pub file; the tool's own key is authorised either way. */
  ssh_admin_public_key: line
    .default('')
    .describe("An OpenSSH public key line or a `.pub` file's path, authorised for the admin user; the tool's own key is authorised too."),
  authentication_bootstrap: authenticationBootstrap,
  tls,
  restore,
  chrony,
  fluentbit,
  fluentbit_dynamic_config: fluentbitDynamicConfig,
  vault_agent: vaultAgent,
  install_dependencies: z
    .boolean()
    .default(true)
    .describe(
      'true: at first boot the guest installs etcd (`etcd.version`) and the node exporter from their upstream releases (checked against ' +
        "their checksum files) and fluent-bit / Vault from their vendors' apt repositories, pinned; needs internet access. false: the " +
        'image has them.',
    ),
  /** How the tool reaches the member's etcd: through its hypervisor (SSH forwarding) or directly. */
  reach_via: z
    .enum(['hypervisor', 'direct'])
    .default('hypervisor')
    .describe(
      "How the tool reaches the member's etcd: `hypervisor`, a port forward on the hypervisor's SSH connection (libvirt NAT or " +
        'isolated networks), or `direct` (the control node routes to the member).',
    ),
};

export const memberSchema = z
  .object({
    name: name.describe('The VM name, hostname and etcd member name (a DNS label).'),
    /**
     * `absent`: the member is to leave the cluster (Ansible's idiom): removed from etcd, its VM shut down and undefined, its volumes kept.
     */
    state: z
      .enum(['present', 'absent'])
      .default('present')
      .describe(
        '`absent`: the member leaves the cluster (removed from etcd, its VM undefined, its volumes kept); its entry stays until it has ' +
          'left.',
      ),
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
  address: line.min(1).describe('The SSH address, or a `Host` alias of the ssh_config (its `HostName` is then connected to).'),
  port: z.number().int().min(1).max(65535).optional().describe("The SSH port; left out: the ssh_config's `Port`, else 22."),
  user: line.min(1).optional().describe("The SSH user; left out: the ssh_config's `User`, else root."),
  private_key: line
    .optional()
    .describe(
      "The SSH private key file (relative to the inventory); left out: the ssh_config's first `IdentityFile`, else ssh-agent; an empty " +
        'string: ssh-agent.',
    ),
  known_hosts: line
    .optional()
    .describe(
      "The known_hosts file the host key is checked against; left out: the ssh_config's first `UserKnownHostsFile`, else " +
        '`~/.ssh/known_hosts`.',
    ),
  trust_on_first_use: z.boolean().default(false).describe('Accept and record an unknown host key (a changed one is always refused).'),
};

/** A jump host on the way to hypervisors (ssh's ProxyJump): only SSH, nothing runs on it. */
export const bastionSchema = z.object(sshLogin).strict();

export const hypervisorSchema = z
  .object({
    ...sshLogin,
    /** Bastions to go through, in order (as ssh -J first,second): names under `bastions`; without, ssh_config's ProxyJump. */
    jump: z
      .array(name)
      .default([])
      .describe(
        "Bastions to pass through, in order (as `ssh -J a,b`): names under `bastions`; empty: the ssh_config's `ProxyJump`, else none.",
      ),
    libvirt_uri: line.default('qemu:///system').describe('The libvirt connection URI on the host.'),
    domain_type: z
      .enum(['kvm', 'qemu'])
      .default('kvm')
      .describe('`kvm`, or `qemu` (software emulation, TCG) where the CPU has no vmx/svm.'),
    tcg_tb_cache_mib: z
      .number()
      .int()
      .min(0)
      .max(65_536, 'is in MiB; at most 64 GiB')
      .default(0)
      .describe("The TCG translation cache size in MiB with `domain_type: qemu`; 0: QEMU's default."),
    pool: line.min(1).default('default').describe("The storage pool for the members' volumes."),
  })
  .strict();

export const etcdSchema = z
  .object({
    // A supported 3.5 patch (3.4 is end of life; 3.4.25 and earlier carry CVE-2023-32082), recent enough to step to 3.6 from.
    version: line
      .default('v3.5.33')
      .describe(
        'The etcd release (a tag `vX.Y.Z`) every member runs with `binaries: release` (a change rolls the members to it), and the one ' +
          '`install_dependencies` installs at first boot with `binaries: image`.',
      ),
    binaries: z
      .enum(['image', 'release'])
      .default('image')
      .describe(
        '`release`: the tool installs `version` from `release_url` in every ' +
          'member and moves them when it changes (one at a time, leader last, ' +
          "after a pre-flight and a snapshot); `image`: etcd is the image's (or " +
          "install_dependencies'), the tool only reports the version it runs.",
      ),
    release_url: line
      .regex(/^https?:\/\/\S+$/, 'is an http(s) URL')
      .default('https://github.com/etcd-io/etcd/releases/download')
      .describe(
        "Where etcd's releases are, in etcd's layout (`<release_url>/vX.Y.Z/etcd-vX.Y.Z-linux-amd64.tar.gz` and `SHA256SUMS` beside it): " +
          "etcd's GitHub releases, or a mirror. Downloaded once per version on the control node, never by the members.",
      ),
    sha256: z
      .string()
      .regex(/^[0-9a-fA-F]{64}$/, 'is a SHA-256 digest (64 hex digits)')
      .optional()
      .describe("The release archive's SHA-256, pinned: wins over the release's SHA256SUMS (which is then not read)."),
    stage_version: line
      .optional()
      .describe(
        'With `binaries: release`, a release (`vX.Y.Z`) installed into every member beside the one it runs, and not run: set it ahead of ' +
          'a roll (kubeadm pulls its images ahead alike), and the roll, ' +
          'once `version` names it, costs a restart per member instead of an ' +
          "install and a restart. Checked against the release's SHA256SUMS.",
      ),
    snapshot_count: z
      .number()
      .int()
      .min(100, 'is a number of raft entries; at least 100')
      .max(10_000_000)
      .optional()
      .describe(
        "etcd's `snapshot-count`: applied entries between two snapshots of the raft state. Unset: 10000 with release binaries (3.6's " +
          "default, pinned for every version), etcd's own default with the image's. etcd's initial corruption check can only ask the " +
          'peers once a member has a snapshot (it knows its peers from one), so a member younger than this many entries starts unchecked.',
      ),
    corruption_checks: z
      .object({
        initial: z
          .boolean()
          .default(true)
          .describe(
            "Before a member with data serves, it compares its data (HashKV) with its peers' and will not start when they differ " +
              "(etcd's initial corruption check).",
          ),
        periodic_interval: goDuration
          .default('4h')
          .describe(
            "How often the leader compares every member's data at the latest revision and raises a CORRUPT alarm on a difference: a full " +
              'hash of every member\'s data, so hours (etcd recommends a couple); "0": off.',
          ),
        compact_hash: z
          .boolean()
          .default(true)
          .describe(
            "The leader compares the members' hashes at each compaction, cheaply, and raises a CORRUPT alarm on a difference (etcd 3.5.5 " +
              "or later, with release binaries or install_dependencies: with the image's etcd the version is not known to the tool).",
          ),
        compact_hash_interval: goDuration.default('1m').describe('How often the leader looks for a compaction to compare.'),
      })
      .strict()
      .default({})
      .describe(
        "etcd's own corruption checks, each rendered with the flag the member's etcd version takes (experimental flags before 3.6, " +
          'feature gates from 3.6). The tool also compares the members itself after every change (`consistency`) and in `verify`.',
      ),
    auto_compaction_mode: z.enum(['revision', 'periodic']).default('revision').describe("etcd's `auto-compaction-mode`."),
    auto_compaction_retention: z
      .union([line, z.number().nonnegative().transform(String)], {
        errorMap: (issue, context) =>
          issue.code === 'invalid_union'
            ? { message: 'must be a number of revisions or a duration such as "1h"' }
            : { message: context.defaultError },
      })
      .default('1000')
      .describe('Revisions (or, in periodic mode, a duration) kept by auto compaction; a number is taken as its text.'),
    space_quota: z
      .number()
      .int()
      .min(16 * 1024 * 1024, 'is in bytes; at least 16 MiB')
      .max(MAX_QUOTA_BYTES, `is in bytes; etcd's documented maximum is 8 GiB (${MAX_QUOTA_BYTES})`)
      .default(MAX_QUOTA_BYTES)
      .describe("etcd's `quota-backend-bytes`, in bytes (16 MiB to 8 GiB, etcd's documented maximum)."),
    heartbeat_interval: z
      .number()
      .int()
      .min(10, 'is in milliseconds; at least 10')
      .max(MAX_ELECTION_MS / 5, `is in milliseconds; at most ${MAX_ELECTION_MS / 5} (a fifth of etcd's longest election timeout)`)
      .default(ETCD_DEFAULT_HEARTBEAT_MS)
      .describe(
        "etcd's `heartbeat-interval` in milliseconds: how often the leader tells followers it is there; about the members' round trip " +
          '(disk and CPU stalls included). Changed, the members are rolled onto it.',
      ),
    election_timeout: z
      .number()
      .int()
      .min(50, 'is in milliseconds; at least 50')
      .max(MAX_ELECTION_MS, `is in milliseconds; etcd's maximum is ${MAX_ELECTION_MS}`)
      .default(ETCD_DEFAULT_ELECTION_MS)
      .describe(
        "etcd's `election-timeout` in milliseconds: how long a follower hears nothing from a leader before it campaigns; etcd's tuning " +
          'guide: about 10 heartbeats (etcd refuses fewer than 5). Longer rides out stalls; shorter finds a lost leader sooner.',
      ),
    /** Moved to maintenance.defrag.rule (inventory/rules.ts refuses it with the replacement): kept so the refusal can name it. */
    defrag_min_free: z
      .number()
      .int()
      .optional()
      .describe(
        'Moved to `maintenance.defrag.rule`, which `maintain --defrag` and the agents both read: refused, with the replacement named.',
      ),
    grpc_gateway_enabled: z
      .boolean()
      .default(false)
      .describe("etcd's REST gateway (explicitly off otherwise); needs `client_cert_auth: false`."),
    client_cert_auth: z
      .boolean()
      .default(true)
      .describe('Clients authenticate with certificates (true) or with a user and password (false: password mode).'),
    client_port: z.number().int().min(1).max(65535).default(2379).describe("etcd's client port."),
    peer_port: z.number().int().min(1).max(65535).default(2380).describe("etcd's peer port; not the client port."),
    listen_localhost: z.boolean().default(true).describe('Also listen on `https://127.0.0.1:<client_port>` inside the member.'),
    data_dir: dataDirectory
      .default('/var/lib/etcd')
      .describe("etcd's data directory in the guest: absolute, normalised, never a system directory (it is made etcd's, mode 0700)."),
  })
  .strict()
  .default({})
  .describe("etcd's settings, the same for every member (the seed module's `etcd` variable, plus ports).");

export const clusterSchema = z
  .object({
    name: name.describe("The cluster's name (a DNS label): it names the state directory and the CA, and marks the cluster's domains."),
    is_initializing: z
      .boolean()
      .default(true)
      .describe(
        'The cluster is being created: members start with `initial-cluster-state: new` until it has formed, and exactly one member must ' +
          'bootstrap authentication.',
      ),
    initial_token: line.min(1).describe("etcd's `initial-cluster-token`, unique per cluster."),
    initial_members: z
      .array(
        z
          .object({
            ip: ipv4.describe("The member's first-interface IPv4 address."),
            name: line.describe("The member's name."),
          })
          .strict(),
      )
      .default([])
      .describe(
        'The initial cluster as `{name, ip}` pairs; empty: derived from the members. Given, it must match the members and their ' +
          'first-interface addresses.',
      ),
    state_dir: line
      .default('')
      .describe('Where certificates, keys and run records are kept; empty: `.etcd-kvm/<name>` beside the inventory.'),
    /** Seconds to wait for every member to report healthy; measured under emulation: 3 VMs ~140 s from start. */
    health_timeout: z
      .number()
      .int()
      .positive()
      .max(86_400, 'is in seconds; at most a day')
      .default(600)
      .describe(
        'Seconds to wait for members to be healthy: after a start, for a first boot to end, and per member in a rolling restart (a ' +
          'member not back by then stops the roll).',
      ),
  })
  .strict()
  .describe("The cluster's identity and how long to wait for it.");

export const pkiSchema = z
  .object({
    organization: line.default('etcd-kvm').describe('O= of the generated certificates.'),
    validity_period: z
      .number()
      .int()
      .positive()
      .max(MAX_VALIDITY_HOURS, `is in hours; at most ${MAX_VALIDITY_HOURS} (1000 years)`)
      .default(365 * 24)
      .describe(
        'Hours a generated member or client certificate is valid (8760: a year). Every deploy issues one again once it is within ' +
          '`early_renewal_period` of its end, and pushes it without a restart: a short life costs nothing, and a leaked key is good for ' +
          'that long only.',
      ),
    ca_validity_period: z
      .number()
      .int()
      .positive()
      .max(MAX_VALIDITY_HOURS, `is in hours; at most ${MAX_VALIDITY_HOURS} (1000 years)`)
      .default(100 * 365 * 24)
      .describe(
        'Hours a generated CA (the CA, the peer CA, the intermediate) is valid (876000: 100 years). The tool never replaces a CA by ' +
          'itself: `deploy --rotate-ca` does, on purpose (docs/operating.md, Rotating the CA).',
      ),
    early_renewal_period: z
      .number()
      .int()
      .nonnegative()
      .max(MAX_VALIDITY_HOURS, `is in hours; at most ${MAX_VALIDITY_HOURS}`)
      .default(60 * 24)
      .describe(
        'Hours before its end at which a certificate is issued again (1440: 60 days, twice the `monitoring.certificate_expiry_days` ' +
          'the alert waits for); shorter than `validity_period`.',
      ),
    key_length: z
      .union([z.literal(2048), z.literal(3072), z.literal(4096)])
      .default(2048)
      .describe('RSA key size of generated keys.'),
    extra_domains: z.array(line).default([]).describe('Extra DNS names in every member certificate.'),
    /**
     * A two-tier PKI: the CA (the members' and clients' trust anchor) signs only an intermediate CA,
     * which signs members and clients; certificates carry the intermediate after them. The CA's key
     * can then be kept offline.
     */
    intermediate: z
      .boolean()
      .default(false)
      .describe(
        'Two tiers: the CA signs only an intermediate CA (path length 0, `pki/intermediate.crt`), which signs members and clients; the ' +
          "CA's key can then be kept offline.",
      ),
    /**
     * The operator's own intermediate CA, which then signs members and clients: its certificate and key,
     * and `chain`, the certificates above it up to and including the root (the members' and clients'
     * trust anchor), which the tool never needs the key of.
     */
    intermediate_ca: z
      .object({
        certificate: pemOrPath.describe("The intermediate CA's certificate, PEM text or a file path."),
        key: pemOrPath.describe("The intermediate CA's private key, PEM text or a file path."),
        chain: pemOrPath.describe(
          'The certificates above the intermediate up to and including the self-signed root, PEM text or a file path.',
        ),
      })
      .strict()
      .optional()
      .describe(
        "The operator's own intermediate CA signs members and clients; members and clients trust the root at the end of `chain`, whose " +
          'key is never needed. Not with `ca` or `intermediate`.',
      ),
    ca: z
      .object({
        certificate: pemOrPath.describe("The CA's certificate, PEM text or a file path."),
        key: pemOrPath.describe("The CA's private key, PEM text or a file path; it is not copied."),
      })
      .strict()
      .optional()
      .describe("The operator's own CA instead of a generated one."),
    root_client: z
      .object({
        certificate: pemOrPath.describe('The root client certificate, PEM text or a file path.'),
        key: pemOrPath.describe('Its private key, PEM text or a file path.'),
      })
      .strict()
      .optional()
      .describe("The operator's own root client certificate instead of a generated one."),
  })
  .strict()
  .default({})
  .describe("The certificates the tool issues (the seed module's `certificate` and `ca` variables).");

/**
 * Names of etcd users and roles the tool manages: also a certificate's CN and a file name in the state
 * directory and in client bundles. `root` is the tool's own (the auth bootstrap) and never an application's.
 */
const accessName = z
  .string()
  .regex(
    /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/,
    'must be letters, digits, ".", "_" or "-", starting with a letter or digit, at most 64 characters',
  )
  .refine((value) => value !== 'root', {
    message: 'root is the user and role the tool bootstraps authentication with; give application users and roles names of their own',
  });

/** One permission of a role: on one key, or on every key under a prefix. */
const permission = z
  .object({
    key: line.min(1).optional().describe('One key; give `key` or `prefix`, not both.'),
    prefix: line.min(1).optional().describe('Every key under this prefix (as `etcdctl --prefix`).'),
    access: z.enum(['read', 'write', 'readwrite']).describe('What the role may do there.'),
  })
  .strict()
  .refine((value) => (value.key === undefined) !== (value.prefix === undefined), {
    message: 'gives exactly one of key (one key) or prefix (every key under it)',
  });

export const roleSchema = z
  .object({
    permissions: z
      .array(permission)
      .default([])
      .describe("The role's permissions; one reaching the tool's own keys under `etcd-kvm/` is refused."),
  })
  .strict();

export const userSchema = z
  .object({
    roles: z.array(accessName).default([]).describe("The user's roles: names under `roles`."),
    /** Password mode only: the user's password, sent to etcd inside the gRPC request. */
    password: optionalSecret.describe("The user's password: password mode only, and required there; sent to etcd inside the gRPC request."),
  })
  .strict();

/**
 * systemd calendar events (systemd.time(7)) in the forms operators write: the shorthands, and
 * `[weekday] [date] time` with `*`, lists, ranges and repetitions. systemd in the guest has the last
 * word; this keeps out what is surely not one (an empty string, a cron line, shell text).
 */
const CALENDAR =
  /^(minutely|hourly|daily|weekly|monthly|yearly|annually|quarterly|semiannually|((Mon|Tue|Wed|Thu|Fri|Sat|Sun)([.,-]{1,2}(Mon|Tue|Wed|Thu|Fri|Sat|Sun))* )?([0-9*/,.~-]+-[0-9*/,.~-]+-[0-9*/,.~-]+ )?[0-9*/,.-]+:[0-9*/,.-]+(:[0-9*/,.-]+)?( UTC)?)$/;

export const backupSchema = z
  .object({
    enabled: z
      .boolean()
      .default(false)
      .describe(
        'Every member gets a timer; at each tick the one member whose etcd first claims it takes a snapshot, seals it and uploads it ' +
          "where `restore.s3` points (etcd-backup's format, `restore.encryption_key`), then prunes. No control node needed.",
      ),
    schedule: line
      .regex(CALENDAR, 'must be a systemd calendar event, e.g. "hourly", "*:0/15" or "*-*-* 02:30:00"')
      .default('hourly')
      .describe(
        'When, as a systemd calendar event (`OnCalendar=`): `hourly`, `*:0/15`, `*-*-* 02:30:00`… Each elapse is a tick, to the second.',
      ),
    keep: z
      .number()
      .int()
      .min(1, 'keeps at least the newest snapshot')
      .max(100_000)
      .default(48)
      .describe('After each upload, the newest `keep` snapshots under the prefix stay; older ones are deleted with their `.key`.'),
    max_age_hours: z
      .number()
      .int()
      .nonnegative()
      .max(24 * 365 * 100)
      .default(0)
      .describe('Snapshots older than this many hours are deleted too (the newest never is); 0: `keep` alone decides.'),
    endpoint: line
      .default('')
      .describe(
        "The S3 endpoint as the members reach it, where it differs from the control node's (`restore.s3.endpoint`): a private address, a " +
          'VPC endpoint. Empty: the same.',
      ),
    verify: z
      .object({
        enabled: z
          .boolean()
          .default(false)
          .describe(
            'At each tick one voting follower of a healthy cluster restores ' +
              'the newest of its backups into a scratch directory on its data ' +
              'disk, reads it with a throwaway etcd on its loopback, ' +
              'checks its revision and HashKV against the manifest, and records the ' +
              'result in etcd (`status`, the alerts): what `backup --verify` does, without a control node. Needs `backup.enabled`.',
          ),
        schedule: line
          .regex(CALENDAR, 'must be a systemd calendar event, e.g. "daily", "*:0/15" or "*-*-* 04:30:00"')
          .default('*-*-* 04:30:00')
          .describe(
            'When, as a systemd calendar event (`OnCalendar=`); an alert fires when no drill has verified a backup for two periods.',
          ),
      })
      .strict()
      .default({})
      .describe('Restore drills on a schedule, inside the cluster: the newest backup proven to restore.'),
  })
  .strict()
  .default({})
  .describe("Scheduled backups taken inside the cluster by every member's agent (etcd-kvm-agent), to the bucket `restore.s3` names.");

/** A Prometheus duration (`30s`, `5m`, `1h30m`): what `for:` and `scrape_interval` take. */
const promDuration = line.regex(/^(\d+(ms|s|m|h|d|w|y))+$/, 'must be a Prometheus duration, e.g. "30s", "5m" or "1h30m"');
const alertFor = (fallback: string, what: string) => promDuration.default(fallback).describe(`How long ${what} before its alert fires.`);

/** Each alert's `for:`, by the alert's key (tasks/monitoring/rules.ts names the alerts). */
export const alertForSchema = z
  .object({
    member_down: alertFor('3m', "a member's etcd does not answer the scrape"),
    node_exporter_down: alertFor('5m', "a member's node exporter does not answer"),
    no_leader: alertFor('1m', 'a member sees no leader'),
    leader_changes: alertFor('5m', 'leadership has changed more than 3 times within 15 minutes'),
    database_near_quota: alertFor('10m', "a member's database stays above `monitoring.quota_fraction` of `space_quota`"),
    database_fragmented: alertFor('30m', "less than half of a member's database file stays in use"),
    nospace_alarm: alertFor('1m', 'a NOSPACE alarm is active'),
    corrupt_alarm: alertFor('1m', 'a CORRUPT alarm is active'),
    slow_wal_fsync: alertFor('10m', 'the 99th percentile of WAL fsyncs stays above 0.5 s'),
    slow_backend_commit: alertFor('10m', 'the 99th percentile of backend commits stays above 0.25 s'),
    proposals_failing: alertFor('15m', 'proposals keep failing'),
    learner_not_promoted: alertFor('15m', 'a learner stays unpromoted'),
    mixed_versions: alertFor('30m', 'members run different etcd versions (longer than a roll takes)'),
    certificate_expiring: alertFor('1h', 'a certificate stays within `monitoring.certificate_expiry_days` of its end'),
    backup_missing: alertFor('10m', 'no backup has succeeded for two schedule periods'),
    backup_drill_failed: alertFor('1m', "the cluster's last restore drill (`backup --verify`, `backup.verify`) failed"),
    backup_unverified: alertFor('10m', 'no restore drill has verified a backup for two `backup.verify` periods'),
    drift: alertFor('30m', "a member's managed files differ from what the last converged run wrote"),
  })
  .strict()
  .default({});

export const monitoringSchema = z
  .object({
    metrics_port: z
      .number()
      .int()
      .min(0)
      .max(65535)
      .default(2381)
      .describe(
        "etcd's `listen-metrics-urls` port: `/metrics` and `/health` over " +
          "plain HTTP on the member's address, no client certificate and no " +
          'etcd user (they carry no keys or values); 0: none.',
      ),
    scrape_interval: promDuration.default('30s').describe('How often the generated scrape configuration scrapes each target.'),
    runbook_url: line
      .regex(/^(https?:\/\/[^\s#]+)?$/, 'must be an http(s) URL without a fragment (each alert adds its own #anchor)')
      .default('')
      .describe(
        'Where your team publishes docs/monitoring.md (its page on your Git host, a wiki copy): every alert then carries `runbook_url` ' +
          'pointing at its own row there (`#etcdkvmmemberdown`…). Empty: the alerts carry `summary` and `description` only.',
      ),
    quota_fraction: z
      .number()
      .gt(0)
      .max(1)
      .default(0.8)
      .describe('The database-near-quota alert fires above this share of `etcd.space_quota`.'),
    fragmentation_floor_bytes: z
      .number()
      .int()
      .nonnegative()
      .max(MAX_QUOTA_BYTES, `is in bytes; at most etcd's largest quota (${MAX_QUOTA_BYTES})`)
      .default(100 * 1024 * 1024)
      .describe('The fragmentation alert needs at least this many free bytes in the database file, besides less than half of it in use.'),
    certificate_expiry_days: z
      .number()
      .int()
      .min(1)
      .max(3650)
      .default(30)
      .describe('The certificate alert fires when a certificate a member serves or uses ends within this many days.'),
    alert_for: alertForSchema.describe("Each alert's `for:` duration, by alert."),
  })
  .strict()
  .default({})
  .describe(
    "What an operator's Prometheus scrapes and which alerts it evaluates: `etcd-kvm monitoring` writes the scrape configuration and the " +
      'rules from these settings.',
  );

export const defragRuleSchema = z
  .object({
    free_bytes: z
      .number()
      .int()
      .nonnegative()
      .max(MAX_QUOTA_BYTES, `is in bytes; at most etcd's largest quota (${MAX_QUOTA_BYTES})`)
      .default(200 * 1024 * 1024)
      .describe('Fragmented: at least this many bytes of the database file are free (its size less its size in use)…'),
    free_fraction: z.number().min(0).max(1).default(0).describe('… and at least this share of the file is free.'),
    quota_fraction: z
      .number()
      .min(0)
      .max(1)
      .default(0.8)
      .describe('Or: the file is at least this share of `etcd.space_quota` and has some free space (0: never on size alone).'),
  })
  .strict()
  .default({});

export const maintenanceSchema = z
  .object({
    defrag: z
      .object({
        enabled: z
          .boolean()
          .default(false)
          .describe(
            "Every member's agent, at each tick, defragments its own database when `rule` holds for it and the cluster is healthy with a " +
              'leader: one member at a time under an etcd lock, followers first, the leader last (leadership moved away first).',
          ),
        schedule: line
          .regex(CALENDAR, 'must be a systemd calendar event, e.g. "daily", "*:0/15" or "*-*-* 03:30:00"')
          .default('*-*-* 03:30:00')
          .describe('When the agents look, as a systemd calendar event (`OnCalendar=`).'),
        rule: defragRuleSchema.describe(
          'When a member is defragmented, by the agents on their schedule and by `maintain --defrag` alike: (free ≥ `free_bytes` and ' +
            'free ÷ size ≥ `free_fraction`) or (size ≥ `quota_fraction` × quota and free > 0).',
        ),
      })
      .strict()
      .default({})
      .describe(
        'Defragmentation by rule on a schedule, inside the cluster. ' +
          'A NOSPACE alarm is the one unhealthy state it acts in: it defragments, and ' +
          'clears the alarm once every database is under the quota again.',
      ),
  })
  .strict()
  .default({})
  .describe("Scheduled maintenance inside the cluster, by the members' agent (etcd-kvm-agent).");

/** The document as written; `defaults` and `members` are validated separately by the loader. */
export const documentSchema = z
  .object({
    cluster: clusterSchema,
    etcd: etcdSchema,
    pki: pkiSchema,
    backup: backupSchema,
    monitoring: monitoringSchema,
    maintenance: maintenanceSchema,
    hypervisors: z.record(name, hypervisorSchema).describe('The KVM hosts, by name: how the tool logs into each over SSH and its libvirt.'),
    bastions: z
      .record(name, bastionSchema)
      .default({})
      .describe('Jump hosts on the way to hypervisors, by name; hypervisors name them in `jump`. Only SSH passes through them.'),
    /** The ssh_config to read hosts from: a path, or false; by default ~/.ssh/config where it exists. */
    ssh_config: z
      .union([z.literal(false), line.min(1)])
      .optional()
      .describe(
        "The ssh_config file to look the inventory's hosts up in (`HostName`, `Port`, `User`, `IdentityFile`, `UserKnownHostsFile`, " +
          "`ProxyJump`), or false for none; left out: `~/.ssh/config` where it exists. The inventory's values always win.",
      ),
    /** Application roles and users: the auth step's `users` part creates, changes and removes the ones the tool made. */
    roles: z
      .record(accessName, roleSchema)
      .default({})
      .describe('Application roles, by name: the `users` step creates, changes and removes the ones the tool made.'),
    users: z
      .record(accessName, userSchema)
      .default({})
      .describe(
        "Application users, by name: the `users` step creates, changes and removes the ones the tool made; `root` is the tool's own.",
      ),
    defaults: z
      .record(z.unknown())
      .default({})
      .describe('Any member field but `name` and `state`, for every member; a field set on a member replaces the default as a whole.'),
    members: z.array(z.record(z.unknown())).min(1, 'lists at least one member').describe("The cluster's members, one VM each."),
  })
  .strict();

export type MemberInput = z.infer<typeof memberSchema>;
export type HypervisorInput = z.infer<typeof hypervisorSchema>;
export type BastionInput = z.infer<typeof bastionSchema>;
export type EtcdSettings = z.infer<typeof etcdSchema>;
export type ClusterSettings = z.infer<typeof clusterSchema>;
export type PkiSettings = z.infer<typeof pkiSchema>;
export type BackupSettings = z.infer<typeof backupSchema>;
export type MonitoringSettings = z.infer<typeof monitoringSchema>;
export type MaintenanceSettings = z.infer<typeof maintenanceSchema>;
export type RoleInput = z.infer<typeof roleSchema>;
export type UserInput = z.infer<typeof userSchema>;
