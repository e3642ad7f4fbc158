import type { Secret } from '../core/secret.ts';
import type { EtcdVersion } from '../upgrade/version.ts';
import type { Camelized } from './camel.ts';
import type * as Parsed from './schema.ts';

/**
 * The validated inventory, with defaults merged, derived values filled in and PEM files read, its fields
 * camelCased (inventory/camel.ts): `etcd.space_quota` in the file is `etcd.spaceQuota` here. Everything after
 * loading works on these types only; no module outside inventory/ reads the file's snake_case fields (the
 * layer test holds it).
 */

export type ClusterSettings = Camelized<Parsed.ClusterSettings>;
/**
 * etcd's settings, its versions parsed: `version` is a release wherever the tool installs one (a rule refuses any
 * other text with `binaries: release` or `install_dependencies`), and undefined only where nothing installs etcd
 * and the file names no release (`binaries: image`; the image's etcd is what runs). `stage_version` needs
 * `binaries: release`.
 */
export type EtcdSettings = Omit<Camelized<Parsed.EtcdSettings>, 'version' | 'stageVersion' | 'binaries'> &
  ({ binaries: 'release'; version: EtcdVersion; stageVersion?: EtcdVersion } | { binaries: 'image'; version?: EtcdVersion });
export type BackupSettings = Camelized<Parsed.BackupSettings>;
export type MonitoringSettings = Camelized<Parsed.MonitoringSettings>;
export type MaintenanceSettings = Camelized<Parsed.MaintenanceSettings>;
type PkiSettings = Camelized<Parsed.PkiSettings>;
/** An alert's setting as the file names it (`monitoring.alert_for.member_down`): what docs and messages show. */
export type AlertForField = keyof Parsed.MonitoringSettings['alert_for'];

/** An SSH host the tool connects to: a hypervisor, or a bastion on the way to one (paths resolved). */
export interface SshHost {
  name: string;
  address: string;
  port: number;
  user: string;
  privateKey: string;
  knownHosts: string;
  trustOnFirstUse: boolean;
}

export interface Hypervisor extends Omit<Camelized<Parsed.HypervisorInput>, 'jump' | keyof SshHost>, SshHost {
  name: string;
  /** The bastions on the way, in connection order. */
  jump: SshHost[];
}

/** Where a NIC attaches: a libvirt network (by name, or by uuid resolved on the host) or a macvtap device. */
export type InterfaceSource =
  | { kind: 'network'; networkName: string }
  | { kind: 'network-id'; networkId: string }
  | { kind: 'macvtap'; device: string };

export interface MemberInterface {
  source: InterfaceSource;
  ip: string;
  prefixLength: number;
  mac: string;
  gateway: string;
  dnsServers: string[];
}

export interface VolumeNames {
  pool: string;
  /** The OS disk: an existing volume (volume_id) or an overlay the tool creates on the base image. */
  os: { existing: string } | { name: string; base: { pool: string; volume: string }; sizeGib?: number };
  data?: { existing: string } | { name: string; sizeGib: number };
  cloudInit: { pool: string; name: string };
}

/** Operator-supplied certificate material for one member (the seed's `tls` block). */
export interface SuppliedTls {
  caCert: string;
  serverCert: string;
  serverKey: Secret;
}

export interface Member {
  /** Position in the inventory's `members` list, for error paths. */
  index: number;
  name: string;
  fqdn: string;
  hypervisor: Hypervisor;
  vcpus: number;
  memoryMib: number;
  interfaces: MemberInterface[];
  /** etcd binds to the first interface only, as the seed module does. */
  etcdIp: string;
  /** 'hypervisor': through an SSH forward on the hypervisor connection (libvirt NAT networks); 'direct': the control node routes to it. */
  reach: 'hypervisor' | 'direct';
  volumes: VolumeNames;
  /** The console login: `password` in plain text or `passwordHash` (crypt(3)), at most one not empty (a load rule). */
  admin: { user: string; publicKey: string; password: Secret; passwordHash: Secret };
  bootstrapsAuth: boolean;
  rootPassword: Secret;
  suppliedTls?: SuppliedTls;
  /** true: the guest installs etcd and the other services from upstream at first boot; false: the image has them. */
  installDependencies: boolean;
  /** The optional guest services, validated, with their PEM files read. */
  services: GuestServices;
}

/** The optional services a member runs besides etcd and the node exporter. */
export type GuestServices = Camelized<Pick<Parsed.MemberInput, 'chrony' | 'fluentbit' | 'fluentbit_dynamic_config' | 'vault_agent'>>;

/** Restoring the cluster from a snapshot: one setting for the whole cluster (a load rule makes every member's equal). */
export type RestoreSettings = Camelized<Parsed.MemberInput['restore']>;

/** An application role, user and permission, as the inventory gives them (`roles:` and `users:`). */
export type RoleSettings = Camelized<Parsed.RoleInput>;
export type UserSettings = Camelized<Parsed.UserInput>;
export type PermissionSettings = RoleSettings['permissions'][number];

export interface PemPair {
  certificate: string;
  key: Secret;
}

export interface Inventory {
  /** Absolute path of the inventory file. */
  path: string;
  stateDir: string;
  cluster: ClusterSettings;
  etcd: EtcdSettings;
  pki: Omit<PkiSettings, 'ca' | 'rootClient' | 'intermediateCa'> & {
    ca?: PemPair;
    rootClient?: PemPair;
    intermediateCa?: PemPair & { chain: string };
  };
  hypervisors: Hypervisor[];
  /** The members the cluster is to have (`state: present`), in the inventory's order. */
  members: Member[];
  /** Members marked `state: absent`: to leave the cluster; nothing else in the tool sees them. */
  absentMembers: Member[];
  restore: RestoreSettings;
  /** Scheduled backups by the members' agent, to where restore.s3 points. */
  backup: BackupSettings;
  /** What the operator's Prometheus scrapes and the alerts' settings. */
  monitoring: MonitoringSettings;
  /** Scheduled maintenance by the members' agent (defragmentation by rule). */
  maintenance: MaintenanceSettings;
  /** Application roles and users (not root), by name. */
  roles: Record<string, RoleSettings>;
  users: Record<string, UserSettings>;
}

/**
 * A NOSPACE alarm is cleared (by `maintain --disarm` or the agent) only once every database is under this
 * share of etcd.space_quota: cleared any closer, the next writes would raise it again at once.
 */
export const DISARM_BELOW_QUOTA = 0.9;

export { ETCD_DEFAULT_ELECTION_MS, ETCD_DEFAULT_HEARTBEAT_MS } from './etcd-timing.ts';
