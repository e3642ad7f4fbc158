import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { LineCounter, parseDocument } from 'yaml';
import { ZodArray, ZodDefault, ZodEffects, ZodObject, ZodOptional, ZodRecord, type ZodTypeAny } from 'zod';
import { InputError } from '../core/errors.ts';
import { readIfExists, unreadableReason } from '../core/files.ts';
import { Secret } from '../core/secret.ts';
import { parseVersion } from '../upgrade/version.ts';
import { camelized, camelizedByName } from './camel.ts';
import { derivedMac } from './mac.ts';
import { lookUpHost, parseJumpHop, parseSshConfig, type SshConfigFile } from './ssh-config.ts';
import type {
  EtcdSettings,
  GuestServices,
  Hypervisor,
  SshHost,
  Inventory,
  Member,
  MemberInterface,
  PemPair,
  RestoreSettings,
} from './model.ts';
import { atTheirSource, formatProblem, problemsFromZod, type Path, type Problem } from './problems.ts';
import { describeSpot, locator, type Locate } from './source-map.ts';
import { derivedMacCollisions, sameHostHypervisors, volumeCollisions } from './collisions.ts';
import { checkRules, firstIp, type ParsedDocument } from './rules.ts';
import { documentSchema, memberDefaultsSchema, memberSchema, type MemberInput } from './schema.ts';

/** Follows a zod schema along a document path to the keys the object there accepts. */
function keysAt(schema: ZodTypeAny, path: Path): string[] {
  let current: ZodTypeAny = schema;
  const unwrap = () => {
    for (;;) {
      if (current instanceof ZodDefault) current = current._def.innerType;
      else if (current instanceof ZodOptional) current = current._def.innerType;
      else if (current instanceof ZodEffects) current = current._def.schema;
      else return;
    }
  };
  unwrap();
  for (const part of path) {
    if (current instanceof ZodArray) current = current.element;
    else if (current instanceof ZodRecord) current = current.valueSchema;
    else if (current instanceof ZodObject && typeof part === 'string') current = current.shape[part] ?? current;
    unwrap();
  }
  return current instanceof ZodObject ? Object.keys(current.shape) : [];
}

export function expandHome(path: string): string {
  return path === '~' || path.startsWith('~/') ? join(homedir(), path.slice(1)) : path;
}

/** The document's data, and where each of its paths is written. */
function readYaml(path: string, shownAs: string): { data: unknown; locate: Locate } {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new InputError(`cannot read inventory ${path}: ${unreadableReason(error)}`, [
      "give the path of an inventory file with -i (inventories/lab.yaml is the lab's; docs/inventory.md lists every field)",
    ]);
  }
  const lines = new LineCounter();
  const document = parseDocument(text, { prettyErrors: true, uniqueKeys: true, lineCounter: lines });
  const [first, ...more] = document.errors;
  if (first) {
    // The first error with its place in the file; the parser's later errors mostly follow from it.
    const [head = first.message, ...snippet] = first.message.split('\n').filter((line) => line.trim() !== '');
    throw new InputError(
      `inventory ${path} is not valid YAML`,
      [
        head.replace(/ at line \d+, column \d+:?$/, ''),
        ...(more.length > 0 ? [`(${more.length} more parse errors after it, most of them caused by it: fix this one first)`] : []),
      ],
      [
        `in ${shownAs}:${first.linePos?.[0].line ?? '?'}:${first.linePos?.[0].col ?? '?'}\n` +
          `${snippet.map((line) => `    ${line}`).join('\n')}`,
      ],
    );
  }
  try {
    // The yaml library refuses more than 100 alias expansions (a "billion laughs" document) here.
    return { data: document.toJS({ maxAliasCount: 100 }), locate: locator(document, lines) };
  } catch (error) {
    throw new InputError(`inventory ${path} cannot be read as data`, [
      `${(error as Error).message.split('\n')[0]}: an alias is expanded too often; write the values out`,
    ]);
  }
}

/** The ssh_config the inventory points at; by default ~/.ssh/config, only where it exists. */
function readSshConfig(setting: string | false | undefined, baseDir: string, problems: Problem[]): SshConfigFile | undefined {
  if (setting === false) return undefined;
  const path = setting === undefined ? join(homedir(), '.ssh', 'config') : resolve(baseDir, expandHome(setting));
  const text = readIfExists(path);
  if (text === undefined) {
    if (setting !== undefined)
      problems.push({
        path: ['ssh_config'],
        message: `cannot read ${path}`,
        hint: 'give the path of an ssh_config file, or false not to read one',
      });
    return undefined;
  }
  try {
    return parseSshConfig(text);
  } catch (error) {
    problems.push({
      path: ['ssh_config'],
      message: `${path} cannot be read as an ssh_config: ${(error as Error).message.split('\n')[0]}`,
      hint: 'fix the file, or set ssh_config: false',
    });
    return undefined;
  }
}

interface SshLoginInput {
  address: string;
  port?: number | undefined;
  user?: string | undefined;
  private_key?: string | undefined;
  known_hosts?: string | undefined;
  trust_on_first_use: boolean;
}

/**
 * A host's SSH login: the inventory's values (paths relative to it), then the ssh_config entry of its
 * address (HostName replaces an alias), then the defaults.
 */
export function sshHostOf(
  name: string,
  given: SshLoginInput,
  config: SshConfigFile | undefined,
  baseDir: string,
): SshHost & { proxyJump: string[] } {
  const found = config ? lookUpHost(config, given.address) : {};
  const inventoryPath = (path: string) => resolve(baseDir, expandHome(path));
  return {
    name,
    address: found.hostName ?? given.address,
    port: given.port ?? found.port ?? 22,
    user: given.user ?? found.user ?? 'root',
    privateKey: given.private_key !== undefined ? (given.private_key ? inventoryPath(given.private_key) : '') : (found.identityFile ?? ''),
    knownHosts:
      given.known_hosts !== undefined ? inventoryPath(given.known_hosts) : (found.knownHosts ?? inventoryPath('~/.ssh/known_hosts')),
    trustOnFirstUse: given.trust_on_first_use,
    proxyJump: found.proxyJump ?? [],
  };
}

/** Shallow merge: a key set on the member replaces the default as a whole, as Ansible's variable precedence does. */
function withDefaults(defaults: Record<string, unknown>, member: Record<string, unknown>): Record<string, unknown> {
  return { ...defaults, ...member };
}

function parseMembers(raw: Record<string, unknown>[], defaults: Record<string, unknown>, problems: Problem[]): MemberInput[] {
  const members: MemberInput[] = [];
  raw.forEach((entry, i) => {
    const result = memberSchema.safeParse(withDefaults(defaults, entry));
    if (result.success) members.push(result.data);
    else problems.push(...problemsFromZod(result.error.issues, ['members', i], (path) => keysAt(memberSchema, path)));
  });
  return members;
}

/** Reads a PEM given inline or as a path relative to the inventory. */
function pemOrFile(value: string, baseDir: string, path: Path, problems: Problem[]): string {
  if (value === '' || value.trimStart().startsWith('-----BEGIN')) return value;
  // Text around a PEM block ("Bag Attributes" from openssl pkcs12) or anything on several lines is no
  // path: and it may be a private key, so it is never echoed.
  if (value.includes('-----BEGIN') || value.includes('\n')) {
    problems.push({
      path,
      message: 'is neither PEM text starting with -----BEGIN nor a file path (the value is not shown: it may be a key)',
      hint: 'remove the lines before -----BEGIN (openssl pkcs12 writes "Bag Attributes" there), or give the path of a PEM file',
    });
    return '';
  }
  const file = resolve(baseDir, expandHome(value));
  try {
    return readFileSync(file, 'utf8');
  } catch {
    problems.push({
      path,
      message: `cannot read ${file}`,
      hint: 'give PEM text inline or a readable file path (relative to the inventory)',
    });
    return '';
  }
}

const OPENSSH_PUBLIC_KEY = /^(ssh-|ecdsa-|sk-)\S+ [A-Za-z0-9+/=]+( .*)?$/;

/** An OpenSSH public key given inline or as a path to a .pub file. */
function publicKeyOf(value: string, baseDir: string, path: Path, problems: Problem[]): string {
  const trimmed = value.trim();
  if (trimmed === '' || OPENSSH_PUBLIC_KEY.test(trimmed)) return trimmed;
  const file = resolve(baseDir, expandHome(trimmed));
  const content = readIfExists(file)?.trim();
  if (content === undefined || !OPENSSH_PUBLIC_KEY.test(content)) {
    problems.push({
      path,
      message: content === undefined ? `cannot read ${file}` : `${file} is not an OpenSSH public key`,
      hint: 'give a key line like "ssh-ed25519 AAAA… me@host" or the path of a .pub file',
    });
    return '';
  }
  return content;
}

function buildInterfaces(clusterName: string, member: MemberInput): MemberInterface[] {
  const networks = member.libvirt_networks.map((nic) => ({
    source: nic.network_name
      ? { kind: 'network' as const, networkName: nic.network_name }
      : { kind: 'network-id' as const, networkId: nic.network_id },
    ip: nic.ip,
    prefixLength: nic.prefix_length,
    mac: nic.mac,
    gateway: nic.gateway,
    dnsServers: nic.dns_servers,
  }));
  const macvtaps = member.macvtap_interfaces.map((nic) => ({
    source: { kind: 'macvtap' as const, device: nic.interface },
    ip: nic.ip,
    prefixLength: nic.prefix_length,
    mac: nic.mac,
    gateway: nic.gateway,
    dnsServers: nic.dns_servers,
  }));
  return [...networks, ...macvtaps].map((nic, i) => ({ ...nic, mac: nic.mac ?? derivedMac(clusterName, member.name, i) }));
}

function buildMember(
  doc: ParsedDocument,
  hypervisors: Hypervisor[],
  member: MemberInput,
  index: number,
  baseDir: string,
  problems: Problem[],
): Member {
  const hypervisor = hypervisors.find((h) => h.name === member.hypervisor) ?? hypervisors[0]!;
  const pool = member.volume_pool || hypervisor.pool;
  const path = ['members', index];
  const tlsSet = member.tls.server_cert !== '';
  return {
    index,
    name: member.name,
    fqdn: member.domain ? `${member.name}.${member.domain}` : '',
    hypervisor,
    vcpus: member.vcpus,
    memoryMib: member.memory,
    interfaces: buildInterfaces(doc.cluster.name, member),
    etcdIp: firstIp(member)!,
    reach: member.reach_via,
    volumes: {
      pool,
      os: member.volume_id
        ? { existing: member.volume_id }
        : {
            name: `${member.name}-os.qcow2`,
            base: member.base_image!,
            ...(member.os_volume_size_gib ? { sizeGib: member.os_volume_size_gib } : {}),
          },
      ...(member.data_volume_id
        ? { data: { existing: member.data_volume_id } }
        : member.data_volume_size_gib > 0
          ? { data: { name: `${member.name}-data.qcow2`, sizeGib: member.data_volume_size_gib } }
          : {}),
      cloudInit: { pool: member.cloud_init_volume_pool || pool, name: member.cloud_init_volume_name || `${member.name}-cloud-init.iso` },
    },
    admin: {
      user: member.ssh_admin_user,
      publicKey: publicKeyOf(member.ssh_admin_public_key, baseDir, [...path, 'ssh_admin_public_key'], problems),
      password: member.admin_user_password,
      passwordHash: member.admin_user_password_hash,
    },
    bootstrapsAuth: member.authentication_bootstrap.bootstrap,
    rootPassword: member.authentication_bootstrap.root_password,
    ...(tlsSet
      ? {
          suppliedTls: {
            caCert: pemOrFile(member.tls.ca_cert, baseDir, [...path, 'tls', 'ca_cert'], problems),
            serverCert: pemOrFile(member.tls.server_cert, baseDir, [...path, 'tls', 'server_cert'], problems),
            serverKey: new Secret(pemOrFile(member.tls.server_key, baseDir, [...path, 'tls', 'server_key'], problems)),
          },
        }
      : {}),
    installDependencies: member.install_dependencies,
    services: servicesWithPems(member, baseDir, path, problems),
  };
}

/** The optional services' PEM fields, read from their files like the member's own TLS material. */
function servicesWithPems(member: MemberInput, baseDir: string, path: Path, problems: Problem[]): GuestServices {
  const pem = (value: string, ...below: (string | number)[]) => pemOrFile(value, baseDir, [...path, ...below], problems);
  const { chrony, fluentbit, fluentbit_dynamic_config: dynamic, vault_agent: vault } = member;
  return camelized({
    chrony,
    fluentbit: {
      ...fluentbit,
      forward: { ...fluentbit.forward, ca_cert: pem(fluentbit.forward.ca_cert, 'fluentbit', 'forward', 'ca_cert') },
    },
    fluentbit_dynamic_config: {
      ...dynamic,
      etcd: {
        ...dynamic.etcd,
        ca_certificate: pem(dynamic.etcd.ca_certificate, 'fluentbit_dynamic_config', 'etcd', 'ca_certificate'),
        client: {
          ...dynamic.etcd.client,
          certificate: pem(dynamic.etcd.client.certificate, 'fluentbit_dynamic_config', 'etcd', 'client', 'certificate'),
        },
      },
      git: {
        ...dynamic.git,
        trusted_gpg_keys: dynamic.git.trusted_gpg_keys.map((key, k) => pem(key, 'fluentbit_dynamic_config', 'git', 'trusted_gpg_keys', k)),
      },
    },
    vault_agent: { ...vault, vault_ca_cert: pem(vault.vault_ca_cert, 'vault_agent', 'vault_ca_cert') },
  });
}

/** The cluster's restore settings: every member's are equal (a rule), so the first member's, with its CA read. */
function restoreOf(members: readonly MemberInput[], baseDir: string, problems: Problem[]): RestoreSettings {
  const restore = members[0]!.restore;
  return camelized({
    ...restore,
    s3: { ...restore.s3, ca_cert: pemOrFile(restore.s3.ca_cert, baseDir, ['members', 0, 'restore', 's3', 'ca_cert'], problems) },
  });
}

function pemPair(
  pair: { certificate: string; key: string } | undefined,
  baseDir: string,
  path: Path,
  problems: Problem[],
): PemPair | undefined {
  if (!pair) return undefined;
  return {
    certificate: pemOrFile(pair.certificate, baseDir, [...path, 'certificate'], problems),
    key: new Secret(pemOrFile(pair.key, baseDir, [...path, 'key'], problems)),
  };
}

/** What a refusal needs to say where each problem is written. */
interface Source {
  path: string;
  shownAs: string;
  locate: Locate;
  rawMembers: readonly unknown[];
  rawDefaults: unknown;
  memberNames: (string | undefined)[];
}

function fail(source: Source, found: Problem[]): never {
  const problems = atTheirSource(found, source.rawMembers, source.rawDefaults, source.memberNames);
  const count = problems.length === 1 ? '1 problem' : `${problems.length} problems`;
  throw new InputError(
    `inventory ${source.path} has ${count}; nothing was changed`,
    problems.map((problem) => formatProblem(problem, source.memberNames)),
    problems.map((problem) => {
      const spot = source.locate(problem.path);
      return spot && describeSpot(source.shownAs, spot);
    }),
  );
}

/**
 * The document checked against the schema, member by member against the sound defaults, then by the
 * cross-field rules: every problem at once, or the parsed document.
 */
function validatedDocument(raw: unknown, source: Source, problems: Problem[]): ParsedDocument {
  const top = documentSchema.safeParse(raw ?? {});
  if (!top.success) problems.push(...problemsFromZod(top.error.issues, [], (p) => keysAt(documentSchema, p)));
  const rawDefaults = top.success ? top.data.defaults : {};
  const defaults = memberDefaultsSchema.safeParse(rawDefaults);
  const soundDefaults = { ...rawDefaults };
  if (!defaults.success) {
    problems.push(...problemsFromZod(defaults.error.issues, ['defaults'], (p) => keysAt(memberDefaultsSchema, p)));
    // Members are still checked, against the defaults that are sound, so one run reports everything
    // without repeating a default's problem once per member.
    for (const issue of defaults.error.issues) {
      const key = issue.code === 'unrecognized_keys' ? issue.keys : [issue.path[0]];
      for (const k of key) if (typeof k === 'string') delete soundDefaults[k];
    }
  }
  const members = top.success ? parseMembers(top.data.members, soundDefaults, problems) : [];
  // Cross-member rules need every member parsed; problems in defaults alone do not stop them.
  if (!top.success || members.length !== top.data.members.length) fail(source, problems);
  const doc: ParsedDocument = { ...top.data, members };
  problems.push(...checkRules(doc));
  if (problems.length > 0) fail(source, problems);
  return doc;
}

/** Each hypervisor's login and its way there: the inventory's jump list, or else the ssh_config's ProxyJump. */
function hypervisorsOf(doc: ParsedDocument, baseDir: string, problems: Problem[]): Hypervisor[] {
  const sshConfig = readSshConfig(doc.ssh_config, baseDir, problems);
  return Object.entries(doc.hypervisors).map(
    ([name, { jump, address, port, user, private_key, known_hosts, trust_on_first_use, ...settings }]): Hypervisor => {
      const login = sshHostOf(name, { address, port, user, private_key, known_hosts, trust_on_first_use }, sshConfig, baseDir);
      const hops =
        jump.length > 0
          ? jump.map((bastion) => sshHostOf(bastion, doc.bastions[bastion]!, sshConfig, baseDir))
          : login.proxyJump.map((hop) => {
              const { host, ...given } = parseJumpHop(hop);
              return sshHostOf(host, { address: host, ...given, trust_on_first_use: false }, sshConfig, baseDir);
            });
      const { proxyJump: _, ...host } = login;
      return { ...camelized(settings), ...host, jump: hops.map(({ proxyJump: __, ...bastion }) => bastion) };
    },
  );
}

/** The PKI settings with the operator's PEM files read (CA, root client, intermediate CA and its chain). */
function pkiOf(doc: ParsedDocument, baseDir: string, problems: Problem[]): Inventory['pki'] {
  const { ca, root_client, intermediate_ca, ...pkiSettings } = doc.pki;
  const intermediateCa = pemPair(intermediate_ca, baseDir, ['pki', 'intermediate_ca'], problems);
  return {
    ...camelized(pkiSettings),
    ca: pemPair(ca, baseDir, ['pki', 'ca'], problems),
    rootClient: pemPair(root_client, baseDir, ['pki', 'root_client'], problems),
    ...(intermediateCa && intermediate_ca
      ? {
          intermediateCa: {
            ...intermediateCa,
            chain: pemOrFile(intermediate_ca.chain, baseDir, ['pki', 'intermediate_ca', 'chain'], problems),
          },
        }
      : {}),
  };
}

/** etcd's settings with its versions parsed: the rules have made sure each is a release where one is needed. */
function etcdOf(doc: ParsedDocument): EtcdSettings {
  const { version, stageVersion, binaries, ...settings } = camelized(doc.etcd);
  const parsed = parseVersion(version);
  if (binaries === 'image') return { ...settings, binaries, ...(parsed ? { version: parsed } : {}) };
  const staged = stageVersion === undefined ? undefined : parseVersion(stageVersion);
  if (!parsed) throw new Error(`etcd.version ${version} passed the rules without being a release tag`);
  return { ...settings, binaries, version: parsed, ...(staged ? { stageVersion: staged } : {}) };
}

/**
 * Reads and validates an inventory. Every problem is collected and reported at once, with its path,
 * before anything else runs; the result is fully resolved (defaults, derived MACs, PEM files).
 */
export function loadInventory(inventoryPath: string): Inventory {
  const path = resolve(inventoryPath);
  const baseDir = dirname(path);
  const { data: raw, locate } = readYaml(path, inventoryPath);
  const problems: Problem[] = [];
  const rawMembers = Array.isArray((raw as { members?: unknown })?.members)
    ? ((raw as { members: unknown[] }).members as Record<string, unknown>[])
    : [];
  const memberNames = rawMembers.map((member) => (typeof member?.name === 'string' ? member.name : undefined));
  const rawDefaults = (raw as { defaults?: unknown })?.defaults;
  const source: Source = { path, shownAs: inventoryPath, locate, rawMembers, rawDefaults, memberNames };
  const doc = validatedDocument(raw, source, problems);
  const { members } = doc;
  const hypervisors = hypervisorsOf(doc, baseDir, problems);
  const built = members.map((member, i) => buildMember(doc, hypervisors, member, i, baseDir, problems));
  const inventory: Inventory = {
    path,
    stateDir: doc.cluster.state_dir ? resolve(baseDir, expandHome(doc.cluster.state_dir)) : join(baseDir, '.etcd-kvm', doc.cluster.name),
    cluster: camelized(doc.cluster),
    etcd: etcdOf(doc),
    pki: pkiOf(doc, baseDir, problems),
    hypervisors,
    members: built.filter((_, i) => members[i]!.state === 'present'),
    absentMembers: built.filter((_, i) => members[i]!.state === 'absent'),
    restore: restoreOf(members, baseDir, problems),
    backup: camelized(doc.backup),
    monitoring: camelized(doc.monitoring),
    maintenance: camelized(doc.maintenance),
    roles: camelizedByName(doc.roles),
    users: camelizedByName(doc.users),
  };
  problems.push(...sameHostHypervisors(hypervisors), ...volumeCollisions(built), ...derivedMacCollisions(doc.cluster.name, built));
  if (problems.length > 0) fail(source, problems);
  return inventory;
}
