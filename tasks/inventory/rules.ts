import type {
  BackupSettings,
  MaintenanceSettings,
  MonitoringSettings,
  BastionInput,
  ClusterSettings,
  EtcdSettings,
  HypervisorInput,
  MemberInput,
  PkiSettings,
  RoleInput,
  UserInput,
} from './schema.ts';
import { NODE_EXPORTER_PORT } from './urls.ts';
import type { Path, Problem } from './problems.ts';
import { s3ValueProblems, urlProblem, type UrlRules } from './s3-values.ts';
import { CONTROL_NODE, targetName } from '../core/step.ts';
import { isIPv4, isNetworkOrBroadcast, sameSubnet } from './ipv4.ts';
import { GUEST_SERVICE_ACCOUNTS, prefixEnd, reachesToolKeys, RESERVED_USER_NAMES, TOOL_KEY_PREFIX, TOOL_NAME_PREFIX } from './reserved.ts';

/**
 * Rules that span fields or members, checked after every field parsed on its own.
 * Each returns problems with paths; none stops at the first.
 */

export interface ParsedDocument {
  cluster: ClusterSettings;
  etcd: EtcdSettings;
  pki: PkiSettings;
  backup: BackupSettings;
  monitoring: MonitoringSettings;
  maintenance: MaintenanceSettings;
  hypervisors: Record<string, HypervisorInput>;
  bastions: Record<string, BastionInput>;
  ssh_config?: string | false | undefined;
  roles: Record<string, RoleInput>;
  users: Record<string, UserInput>;
  members: MemberInput[];
}

type Rule = (doc: ParsedDocument) => Problem[];

interface AddressedInterface {
  path: (string | number)[];
  ip: string;
  prefix_length: number;
  gateway: string;
  mac?: string | undefined;
}

function interfacesOf(member: MemberInput, index: number): AddressedInterface[] {
  return [
    ...member.libvirt_networks.map((nic, j) => ({ ...nic, path: ['members', index, 'libvirt_networks', j] })),
    ...member.macvtap_interfaces.map((nic, j) => ({ ...nic, path: ['members', index, 'macvtap_interfaces', j] })),
  ];
}

/** The address etcd binds to: the first interface, libvirt networks before macvtap as in the seed module. */
export function firstIp(member: MemberInput): string | undefined {
  return member.libvirt_networks[0]?.ip ?? member.macvtap_interfaces[0]?.ip;
}

function duplicates<T>(items: { value: T; path: (string | number)[] }[], describe: (value: T) => string): Problem[] {
  const firstSeen = new Map<T, (string | number)[]>();
  const problems: Problem[] = [];
  for (const item of items) {
    const earlier = firstSeen.get(item.value);
    if (earlier) {
      problems.push({
        path: item.path,
        message: `${describe(item.value)} is already used at ${earlier.join('.')}`,
        hint: 'each must be unique in the cluster',
      });
    } else {
      firstSeen.set(item.value, item.path);
    }
  }
  return problems;
}

const uniqueNames: Rule = (doc) =>
  duplicates(
    doc.members.map((member, i) => ({ value: member.name, path: ['members', i, 'name'] })),
    (name) => `member name '${name}'`,
  );

const uniqueAddresses: Rule = (doc) => {
  const nics = doc.members.flatMap(interfacesOf);
  return [
    ...duplicates(
      nics.map((nic) => ({ value: nic.ip, path: [...nic.path, 'ip'] })),
      (ip) => `IP ${ip}`,
    ),
    ...duplicates(
      nics.filter((nic) => nic.mac).map((nic) => ({ value: nic.mac!, path: [...nic.path, 'mac'] })),
      (mac) => `MAC ${mac}`,
    ),
  ];
};

/**
 * A member's address that is already the inventory's elsewhere: another interface's gateway (the
 * router of its network), or the address of a hypervisor or bastion the tool logs into. The same
 * interface's own gateway is addressesInsidePrefix's.
 */
const addressesAreNotTaken: Rule = (doc) => {
  const nics = doc.members.flatMap(interfacesOf);
  const taken = new Map<string, string>();
  for (const [kind, hosts] of [
    ['hypervisor', doc.hypervisors],
    ['bastion', doc.bastions],
  ] as const) {
    for (const [name, host] of Object.entries(hosts)) if (isIPv4(host.address)) taken.set(host.address, `the address of ${kind} ${name}`);
  }
  return nics.flatMap((nic): Problem[] => {
    const gatewayOf = nics.find((other) => other !== nic && other.gateway === nic.ip);
    const owner = gatewayOf ? `the gateway of ${gatewayOf.path.join('.')}` : taken.get(nic.ip);
    return owner
      ? [
          {
            path: [...nic.path, 'ip'],
            message: `${nic.ip} is ${owner}`,
            hint: 'two hosts with one address reach neither reliably: give the member an address of its own',
          },
        ]
      : [];
  });
};

const addressesInsidePrefix: Rule = (doc) =>
  doc.members.flatMap(interfacesOf).flatMap((nic): Problem[] => {
    const problems: Problem[] = [];
    if (isNetworkOrBroadcast(nic.ip, nic.prefix_length)) {
      problems.push({
        path: [...nic.path, 'ip'],
        message: `${nic.ip} is the network or broadcast address of its /${nic.prefix_length}`,
        hint: 'pick a host address',
      });
    }
    if (nic.gateway) {
      if (!sameSubnet(nic.ip, nic.gateway, nic.prefix_length)) {
        problems.push({
          path: [...nic.path, 'gateway'],
          message: `${nic.gateway} is outside ${nic.ip}/${nic.prefix_length}`,
          hint: "the gateway must be on the interface's own subnet",
        });
      } else if (nic.gateway === nic.ip) {
        problems.push({ path: [...nic.path, 'gateway'], message: "is the interface's own address" });
      }
    }
    return problems;
  });

/** The recap and the report show the control node as localhost: a member of that name could not be told from it there. */
const memberIsNotTheControlNode: Rule = (doc) =>
  doc.members.flatMap((member, i): Problem[] =>
    member.name === targetName(CONTROL_NODE)
      ? [
          {
            path: ['members', i, 'name'],
            message:
              `'${targetName(CONTROL_NODE)}' is how the recap and the report name the machine ` +
              `the tool runs on: that member's results could not be told from the control node's`,
            hint: 'give the member another name',
          },
        ]
      : [],
  );

/** cloud-init merges users of one name: the admin (sudo, SSH keys) must not be an account a service runs as. */
const adminIsNoServiceAccount: Rule = (doc) =>
  doc.members.flatMap((member, i): Problem[] =>
    GUEST_SERVICE_ACCOUNTS.includes(member.ssh_admin_user)
      ? [
          {
            path: ['members', i, 'ssh_admin_user'],
            message:
              `${member.ssh_admin_user} is an account of the guest's own (services run ` +
              `as ${GUEST_SERVICE_ACCOUNTS.filter((name) => name !== 'root').join(', ')}; root logins are disabled)`,
            hint: 'cloud-init would make the admin and that account one user: give the admin a name of its own, such as ubuntu or ops',
          },
        ]
      : [],
  );

/**
 * pki.extra_domains go into every member's certificate: a member's own name or FQDN there would let any
 * member pass as that one.
 */
const extraDomainsAreNoMemberNames: Rule = (doc) => {
  const owners = new Map<string, string>();
  for (const member of doc.members) {
    owners.set(member.name, `member ${member.name}'s name`);
    if (member.domain) owners.set(`${member.name}.${member.domain}`.toLowerCase(), `member ${member.name}'s FQDN`);
  }
  return doc.pki.extra_domains.flatMap((domain, k): Problem[] => {
    const owner = owners.get(domain.toLowerCase());
    return owner
      ? [
          {
            path: ['pki', 'extra_domains', k],
            message: `${domain} is ${owner}: every member's certificate would carry it, so any member could pass as that one`,
            hint:
              "extra_domains are names every member answers to (a load balancer's, " +
              "a round-robin DNS name); a member's own names are already in its own certificate",
          },
        ]
      : [];
  });
};

/**
 * In certificate mode a user is its certificate's CN, and the tool issues CN=<member> to members and
 * CN=root to itself: a user of such a name would be that member or root towards etcd. Names are
 * compared regardless of case, as the files named after users are where names ignore case (macOS).
 */
const userNamesAreTheirOwn: Rule = (doc) => {
  const members = new Set(doc.members.map((member) => member.name));
  const seen = new Map<string, string>();
  return Object.keys(doc.users).flatMap((user): Problem[] => {
    const folded = user.toLowerCase();
    const path = ['users', user];
    const earlier = seen.get(folded);
    seen.set(folded, earlier ?? user);
    const reserved = RESERVED_USER_NAMES[folded];
    if (reserved)
      return [{ path, message: `is reserved, whatever its case: ${reserved}`, hint: 'give application users names of their own' }];
    if (folded.startsWith(TOOL_NAME_PREFIX))
      return [
        {
          path,
          message:
            `starts with ${TOOL_NAME_PREFIX}, whatever its case: the tool names its own ` +
            `identities so (its members' peer certificates carry CN=${TOOL_NAME_PREFIX}-peer)`,
          hint: 'give application users names of their own',
        },
      ];
    if (members.has(folded))
      return [
        {
          path,
          message:
            `is the name of member ${folded}: members' certificates carry CN=${folded}, ` +
            `and etcd takes a client certificate's CN for the user`,
          hint: 'give application users names no member has',
        },
      ];
    if (earlier)
      return [
        {
          path,
          message:
            `differs from user ${earlier} only in case: their files (pki/clients/NAME.crt, ` +
            `a bundle's NAME.crt) are one file where names ignore case`,
          hint: 'give users names that differ in more than case',
        },
      ];
    return [];
  });
};

const everyMemberHasAnInterface: Rule = (doc) =>
  doc.members.flatMap((member, i): Problem[] =>
    interfacesOf(member, i).length === 0
      ? [{ path: ['members', i], message: 'has no network interface', hint: 'add an entry to libvirt_networks or macvtap_interfaces' }]
      : [],
  );

/** etcd binds to the first interface; on a macvtap NIC the member's own hypervisor cannot reach it. */
const macvtapMembersReachedDirectly: Rule = (doc) =>
  doc.members.flatMap((member, i): Problem[] =>
    member.libvirt_networks.length === 0 && member.macvtap_interfaces.length > 0 && member.reach_via === 'hypervisor'
      ? [
          {
            path: ['members', i, 'reach_via'],
            message: "is 'hypervisor', but etcd listens on a macvtap interface, which its own hypervisor cannot reach",
            hint: 'set reach_via: direct and run the tool from a machine on the macvtap network (not the hypervisor)',
          },
        ]
      : [],
  );

const networkByNameXorId: Rule = (doc) =>
  doc.members.flatMap((member, i) =>
    member.libvirt_networks.flatMap((nic, j): Problem[] => {
      const path = ['members', i, 'libvirt_networks', j];
      if (nic.network_name && nic.network_id) return [{ path, message: 'sets both network_name and network_id', hint: 'keep exactly one' }];
      if (!nic.network_name && !nic.network_id)
        return [{ path, message: 'sets neither network_name nor network_id', hint: 'name the libvirt network to attach to' }];
      return [];
    }),
  );

const somePresentMember: Rule = (doc) =>
  doc.members.length > 0 && doc.members.every((member) => member.state === 'absent')
    ? [
        {
          path: ['members'],
          message: 'marks every member state: absent',
          hint: 'a cluster keeps at least one member; to take it all down, use lab:down or virsh, not the deploy',
        },
      ]
    : [];

const bootstrapMemberPresent: Rule = (doc) =>
  doc.members.flatMap((member, i): Problem[] =>
    member.state === 'absent' && member.authentication_bootstrap.bootstrap
      ? [
          {
            path: ['members', i, 'authentication_bootstrap', 'bootstrap'],
            message: 'is true on a member marked state: absent',
            hint: 'move authentication_bootstrap to a member that stays (auth is already on; the flag only names who checks it)',
          },
        ]
      : [],
  );

const exactlyOneBootstrapMember: Rule = (doc) => {
  const bootstrappers = doc.members.flatMap((member, i) => (member.authentication_bootstrap.bootstrap ? [i] : []));
  if (!doc.cluster.is_initializing) return [];
  if (bootstrappers.length === 0) {
    return [
      {
        path: ['members'],
        message: 'no member has authentication_bootstrap.bootstrap: true',
        hint: 'a new cluster needs exactly one member that creates the root user and enables auth',
      },
    ];
  }
  return bootstrappers.slice(1).map((i) => ({
    path: ['members', i, 'authentication_bootstrap', 'bootstrap'],
    message: `is true on more than one member (first: ${doc.members[bootstrappers[0]!]!.name})`,
    hint: 'exactly one member bootstraps authentication',
  }));
};

const oneAdminPassword: Rule = (doc) =>
  doc.members.flatMap((member, i): Problem[] =>
    !member.admin_user_password.isEmpty && !member.admin_user_password_hash.isEmpty
      ? [
          {
            path: ['members', i, 'admin_user_password_hash'],
            message: 'cannot be given with admin_user_password',
            hint: 'keep the hash and remove admin_user_password: the plain one is written as it is into the seed ISO',
          },
        ]
      : [],
  );

const grpcGatewayNeedsPasswordMode: Rule = (doc) =>
  doc.etcd.grpc_gateway_enabled && doc.etcd.client_cert_auth
    ? [
        {
          path: ['etcd', 'grpc_gateway_enabled'],
          message: 'requires client_cert_auth: false',
          hint: 'the legacy REST gateway cannot present client certificates',
        },
      ]
    : [];

const rootPasswordInPasswordMode: Rule = (doc) =>
  doc.etcd.client_cert_auth
    ? []
    : doc.members.flatMap((member, i): Problem[] =>
        member.authentication_bootstrap.bootstrap && member.authentication_bootstrap.root_password.isEmpty
          ? [
              {
                path: ['members', i, 'authentication_bootstrap', 'root_password'],
                message: 'is required when etcd.client_cert_auth is false',
                hint: 'password mode creates the root user with this password',
              },
            ]
          : [],
      );

const usersHoldDefinedRoles: Rule = (doc) =>
  Object.entries(doc.users).flatMap(([user, settings]) =>
    settings.roles.flatMap((role, i): Problem[] =>
      role in doc.roles
        ? []
        : [
            {
              path: ['users', user, 'roles', i],
              message: `names role ${role}, which roles: does not define`,
              hint: `define it under roles: (roles are ${Object.keys(doc.roles).join(', ') || 'none yet'})`,
            },
          ],
    ),
  );

/**
 * The tool keeps its own keys under TOOL_KEY_PREFIX, among them the record of the users and roles it
 * made, which decides what it deletes: no application role may reach them, by key or by prefix.
 */
const permissionsAvoidToolKeys: Rule = (doc) =>
  Object.entries(doc.roles).flatMap(([role, settings]) =>
    settings.permissions.flatMap((permission, j): Problem[] => {
      const [field, value] =
        permission.prefix !== undefined ? (['prefix', permission.prefix] as const) : (['key', permission.key ?? ''] as const);
      const key = Buffer.from(value);
      if (!reachesToolKeys(key, field === 'prefix' ? prefixEnd(key) : Buffer.alloc(0))) return [];
      return [
        {
          path: ['roles', role, 'permissions', j, field],
          message:
            `${field} ${JSON.stringify(value)} reaches the tool's own keys under ` +
            `${TOOL_KEY_PREFIX} (among them its record of the users and roles it manages)`,
          hint:
            `keep application keys outside ${TOOL_KEY_PREFIX}, e.g. a prefix such as /app1/: ` +
            `a role that can write the record could make the tool delete users`,
        },
      ];
    }),
  );

/** Certificate mode: a user is its certificate's CN, with no password; password mode: a password is how it logs in. */
const userPasswordsFitTheMode: Rule = (doc) =>
  Object.entries(doc.users).flatMap(([user, settings]): Problem[] => {
    if (doc.etcd.client_cert_auth && !settings.password.isEmpty) {
      return [
        {
          path: ['users', user, 'password'],
          message: 'is not used when etcd.client_cert_auth is true',
          hint: `the user logs in with its client certificate (CN=${user}), issued by the tool: remove the password`,
        },
      ];
    }
    if (!doc.etcd.client_cert_auth && settings.password.isEmpty) {
      return [
        {
          path: ['users', user, 'password'],
          message: 'is required when etcd.client_cert_auth is false',
          hint: 'password mode: the user logs in with this password',
        },
      ];
    }
    return [];
  });

const oneSourceOfSigning: Rule = (doc) => {
  if (!doc.pki.intermediate_ca) return [];
  const problems: Problem[] = [];
  if (doc.pki.ca)
    problems.push({
      path: ['pki', 'ca'],
      message: 'cannot be given with pki.intermediate_ca',
      hint: "the operator's intermediate signs, and the last certificate of intermediate_ca.chain is the root members and clients trust",
    });
  if (doc.pki.intermediate)
    problems.push({
      path: ['pki', 'intermediate'],
      message: 'cannot be true with pki.intermediate_ca',
      hint: 'pki.intermediate makes an intermediate; pki.intermediate_ca is one the operator brings',
    });
  for (const field of ['certificate', 'key', 'chain'] as const) {
    if (doc.pki.intermediate_ca[field] === '')
      problems.push({ path: ['pki', 'intermediate_ca', field], message: 'is required', hint: 'PEM text or a file path' });
  }
  return problems;
};

const jumpsNameBastions: Rule = (doc) =>
  Object.entries(doc.hypervisors).flatMap(([hypervisor, settings]) =>
    settings.jump.flatMap((bastion, i): Problem[] => {
      if (!(bastion in doc.bastions))
        return [
          {
            path: ['hypervisors', hypervisor, 'jump', i],
            message: `names bastion ${bastion}, which bastions: does not define`,
            hint: `define it under bastions: (bastions are ${Object.keys(doc.bastions).join(', ') || 'none yet'})`,
          },
        ];
      if (settings.jump.indexOf(bastion) !== i)
        return [
          {
            path: ['hypervisors', hypervisor, 'jump', i],
            message: `names bastion ${bastion} twice`,
            hint: 'each jump host once, in the order they are passed through',
          },
        ];
      return [];
    }),
  );

const initialMembersMatch: Rule = (doc) => {
  const listed = doc.cluster.initial_members;
  if (listed.length === 0) return [];
  const problems: Problem[] = [];
  const byName = new Map(doc.members.map((member) => [member.name, member]));
  listed.forEach((entry, i) => {
    const member = byName.get(entry.name);
    const path = ['cluster', 'initial_members', i];
    if (!member) {
      problems.push({
        path: [...path, 'name'],
        message: `'${entry.name}' is not a member of this inventory`,
        hint: 'initial_members must list the members below, or be left out to derive it',
      });
    } else if (firstIp(member) !== entry.ip) {
      problems.push({
        path: [...path, 'ip'],
        message: `${entry.ip} differs from ${entry.name}'s first interface address ${firstIp(member)}`,
      });
    }
  });
  const listedNames = new Set(listed.map((entry) => entry.name));
  doc.members.forEach((member, i) => {
    if (!listedNames.has(member.name) && doc.cluster.is_initializing) {
      problems.push({ path: ['members', i, 'name'], message: `'${member.name}' is missing from cluster.initial_members` });
    }
  });
  return problems;
};

const hypervisorExists: Rule = (doc) => {
  const names = Object.keys(doc.hypervisors);
  return doc.members.flatMap((member, i): Problem[] => {
    if (member.hypervisor === undefined) {
      return names.length === 1
        ? []
        : [
            {
              path: ['members', i, 'hypervisor'],
              message: 'is required when the inventory has several hypervisors',
              hint: `one of: ${names.join(', ')}`,
            },
          ];
    }
    return names.includes(member.hypervisor)
      ? []
      : [
          {
            path: ['members', i, 'hypervisor'],
            message: `'${member.hypervisor}' is not defined under hypervisors`,
            hint: `one of: ${names.join(', ') || '(none defined)'}`,
          },
        ];
  });
};

const osVolumeSource: Rule = (doc) =>
  doc.members.flatMap((member, i): Problem[] =>
    !member.volume_id && !member.base_image
      ? [
          {
            path: ['members', i, 'base_image'],
            message: 'is required when volume_id is not set',
            hint: "name the pool and volume of the OS image the member's disk is layered on",
          },
        ]
      : [],
  );

const suppliedTlsIsComplete: Rule = (doc) =>
  doc.members.flatMap((member, i): Problem[] => {
    const set = [member.tls.ca_cert, member.tls.server_cert, member.tls.server_key].filter(Boolean).length;
    return set === 0 || set === 3
      ? []
      : [
          {
            path: ['members', i, 'tls'],
            message: 'sets only some of ca_cert, server_cert, server_key',
            hint: 'give all three, or none to have the tool issue them',
          },
        ];
  });

/** A URL's host, or '' when it does not parse (the schema checked only its scheme). */
function hostOf(url: string): string {
  try {
    return new URL(url).hostname;
  } catch {
    return '';
  }
}

/** The control node itself: what travels to it over loopback crosses no network. */
const LOOPBACK_HOST = /^(localhost|127(\.\d{1,3}){3}|\[::1\])$/i;

/**
 * Releases over plain http: anyone on the path can serve any archive with a SHA256SUMS that matches it. Only
 * with the archive's digest pinned (etcd.sha256), or from the control node itself.
 */
const releasesOverHttpArePinned: Rule = (doc) => {
  const { binaries, release_url: url, sha256 } = doc.etcd;
  if (binaries !== 'release' || !url.startsWith('http://') || sha256 !== undefined) return [];
  // A URL that is not sound is urlsAreSound's to refuse, and this message would show it (credentials and all).
  if (LOOPBACK_HOST.test(hostOf(url)) || urlProblem(url, RELEASE_URL) !== undefined) return [];
  return [
    {
      path: ['etcd', 'release_url'],
      message: `is plain http (${url}): anyone on the way can serve another archive with a SHA256SUMS that matches it`,
      hint: "use https, or pin the archive's digest in etcd.sha256 (a mirror on this machine, 127.0.0.1, is fine as it is)",
    },
  ];
};

const RELEASE_URL: UrlRules = {
  example: 'https://github.com/etcd-io/etcd/releases/download',
  credentialsGo: 'printed in messages and logs',
  credentialsHint: 'serve the releases where no credentials are needed: a mirror of your own, over https',
  query: false,
};

/**
 * The other URLs the inventory gives, parsed as the S3 endpoints are: etcd's releases (printed in messages,
 * the release's directory and archive appended to it) and the runbooks' page (in every alert rule).
 */
const urlsAreSound: Rule = (doc) => {
  const found: [Path, string, UrlRules][] = [
    [['etcd', 'release_url'], doc.etcd.release_url, RELEASE_URL],
    [
      ['monitoring', 'runbook_url'],
      doc.monitoring.runbook_url,
      {
        example: 'https://git.example.org/ops/etcd-kvm/blob/main/docs/monitoring.md',
        credentialsGo: 'in every alert',
        credentialsHint: 'give the page a URL anyone who gets the alert may read',
        query: true,
      },
    ],
  ];
  return found.flatMap(([path, url, rules]) => {
    const problem = url ? urlProblem(url, rules) : undefined;
    return problem ? [{ path, ...problem }] : [];
  });
};

/**
 * One defragmentation rule: `maintain --defrag` used to read a threshold of its own while the agents read
 * maintenance.defrag.rule, so one cluster had two. The old field is refused with its exact replacement,
 * rather than read silently one way or the other.
 */
const oneDefragRule: Rule = (doc) => {
  const minFree = doc.etcd.defrag_min_free;
  if (minFree === undefined) return [];
  return [
    {
      path: ['etcd', 'defrag_min_free'],
      message: "has moved: `maintain --defrag` and the members' agents both read maintenance.defrag.rule now",
      hint:
        `remove it and write maintenance: { defrag: { rule: { free_bytes: ${minFree}, free_fraction: 0, ` +
        `quota_fraction: 0 } } } for the same threshold (the rule's defaults: 200 MiB free, or 80 % of the quota)`,
    },
  ];
};

/** A duration as etcd's flags take it ("1h30m", "90s"), in seconds; the schema allows nothing else. */
const goDurationSeconds = (text: string) =>
  [...text.matchAll(/(\d+)([hms])/g)].reduce((sum, [, n, unit]) => sum + Number(n) * { h: 3600, m: 60, s: 1 }[unit as 'h' | 'm' | 's'], 0);

/** The periodic check hashes every member's whole data: more often than a minute, it is a load of its own. */
const periodicCorruptionCheckIsRare: Rule = (doc) => {
  const interval = doc.etcd.corruption_checks.periodic_interval;
  if (interval === '0' || goDurationSeconds(interval) >= 60) return [];
  return [
    {
      path: ['etcd', 'corruption_checks', 'periodic_interval'],
      message: `is ${interval}: each check hashes every member's whole data`,
      hint: 'give at least "1m" (etcd recommends a couple of hours), or "0" for none; compact_hash is the cheap, frequent check',
    },
  ];
};

const distinctPorts: Rule = (doc) => {
  const { client_port: client, peer_port: peer } = doc.etcd;
  const metrics = doc.monitoring.metrics_port;
  return [
    ...(client === peer ? [{ path: ['etcd', 'peer_port'], message: `equals client_port (${client})` }] : []),
    ...(metrics !== 0 && [client, peer, NODE_EXPORTER_PORT].includes(metrics)
      ? [
          {
            path: ['monitoring', 'metrics_port'],
            message: `equals another port of the member (${metrics})`,
            hint:
              `etcd's client (${client}) and peer (${peer}) ports and the node ` +
              `exporter's (${NODE_EXPORTER_PORT}) are taken; etcd's convention is 2381`,
          },
        ]
      : []),
  ];
};

/** etcd refuses to start with an election timeout under five heartbeats (its tuning guide asks for about ten). */
const electionOutlastsHeartbeats: Rule = (doc) => {
  const { heartbeat_interval: heartbeat, election_timeout: election } = doc.etcd;
  return election < 5 * heartbeat
    ? [
        {
          path: ['etcd', 'election_timeout'],
          message: `is ${election} ms, under 5 heartbeats (heartbeat_interval ${heartbeat} ms): etcd refuses to start`,
          hint: `etcd's tuning guide: about 10 heartbeats, here ${10 * heartbeat} ms`,
        },
      ]
    : [];
};

/** A renewal period as long as a certificate's life would issue every certificate again on every run. */
const renewalInsideValidity: Rule = (doc) => {
  const { validity_period: validity, early_renewal_period: renewal } = doc.pki;
  const reissue = 'every run would issue every certificate again';
  return renewal >= validity
    ? [
        {
          path: ['pki', 'early_renewal_period'],
          message: `is ${renewal} hours, not shorter than validity_period (${validity} hours): ${reissue}`,
          hint: `a sixth of the life is common, here ${Math.floor(validity / 6)} hours`,
        },
      ]
    : [];
};

/** A required setting of an enabled feature: [path below the member, is it missing?, hint]. */
type Requirement = [path: (string | number)[], missing: boolean, hint: string];

function requirementsOf(member: MemberInput): Requirement[] {
  const { chrony, fluentbit, vault_agent: vault, restore } = member;
  const requirements: Requirement[] = [];
  if (chrony.enabled)
    requirements.push([
      ['chrony', 'servers'],
      chrony.servers.length + chrony.pools.length === 0,
      'list at least one server or pool (url and options)',
    ]);
  if (fluentbit.enabled) {
    const forward = fluentbit.forward;
    requirements.push(
      [['fluentbit', 'forward', 'domain'], forward.domain === '', 'the fluentd/fluent-bit server logs are forwarded to'],
      [['fluentbit', 'forward', 'port'], forward.port === 0, 'the forward port of that server (24224 by convention)'],
      [['fluentbit', 'forward', 'hostname'], forward.hostname === '', 'the hostname this member presents to the server'],
      [['fluentbit', 'forward', 'shared_key'], forward.shared_key.isEmpty, 'the shared key of the forward protocol'],
      [['fluentbit', 'etcd_tag'], fluentbit.etcd_tag === '', "the tag of etcd's logs"],
      [['fluentbit', 'node_exporter_tag'], fluentbit.node_exporter_tag === '', "the tag of the node exporter's logs"],
    );
  }
  const dynamic = member.fluentbit_dynamic_config;
  if (dynamic.enabled) {
    requirements.push([['fluentbit', 'enabled'], !fluentbit.enabled, 'dynamic configuration configures fluent-bit: enable fluentbit too']);
    const below = ['fluentbit_dynamic_config', dynamic.source];
    if (dynamic.source === 'etcd') {
      const { etcd } = dynamic;
      requirements.push(
        [[...below, 'key_prefix'], etcd.key_prefix === '', 'the etcd key prefix the configuration files are stored under'],
        [[...below, 'endpoints'], etcd.endpoints.length === 0, 'the etcd endpoints (host:port) that hold the configuration'],
        [[...below, 'ca_certificate'], etcd.ca_certificate === '', "the CA of those etcd servers' certificates"],
      );
    } else {
      const { git } = dynamic;
      requirements.push(
        [[...below, 'repo'], git.repo === '', 'the SSH URL of the repository holding the configuration'],
        [[...below, 'ref'], git.ref === '', 'the branch or tag to follow'],
        [[...below, 'auth', 'client_ssh_key'], git.auth.client_ssh_key.isEmpty, 'the private key the updater clones with'],
        [
          [...below, 'auth', 'server_ssh_fingerprint'],
          git.auth.server_ssh_fingerprint === '',
          "the git server's host key (a known_hosts line), so the clone cannot be redirected",
        ],
      );
    }
  }
  if (vault.enabled) {
    requirements.push(
      [['vault_agent', 'vault_address'], vault.vault_address === '', 'the https address of the Vault server'],
      [['vault_agent', 'auth_method', 'config', 'role_id'], vault.auth_method.config.role_id.isEmpty, 'the AppRole role_id'],
      [['vault_agent', 'auth_method', 'config', 'secret_id'], vault.auth_method.config.secret_id.isEmpty, 'the AppRole secret_id'],
    );
  }
  if (restore.enabled) {
    const s3 = restore.s3;
    requirements.push(
      [['restore', 's3', 'endpoint'], s3.endpoint === '', 'the S3 endpoint URL (https://… or http://…)'],
      [['restore', 's3', 'bucket'], s3.bucket === '', 'the bucket the etcd-backup snapshots are in'],
      [['restore', 's3', 'object_prefix'], s3.object_prefix === '', 'the prefix of the snapshot objects (<prefix>-<timestamp>.dump)'],
      [['restore', 's3', 'access_key'], s3.access_key.isEmpty, 'the S3 access key'],
      [['restore', 's3', 'secret_key'], s3.secret_key.isEmpty, 'the S3 secret key'],
    );
  }
  return requirements;
}

const enabledFeaturesAreComplete: Rule = (doc) =>
  doc.members.flatMap((member, i) =>
    requirementsOf(member)
      .filter(([, missing]) => missing)
      .map(([path, , hint]): Problem => ({ path: ['members', i, ...path], message: 'is required by the enabled feature', hint })),
  );

/** The etcd source needs exactly one way to authenticate: a certificate and key, a username and password, or Vault. */
/** The hint for a key or password set beside vault_agent_secret_path. */
const CREDENTIALS_FROM_VAULT =
  'the credentials come from Vault: leave client.key and client.password empty ' +
  '(set client.certificate only to choose certificate auth)';

const dynamicConfigCredentialsAreSound: Rule = (doc) =>
  doc.members.flatMap((member, i): Problem[] => {
    const dynamic = member.fluentbit_dynamic_config;
    if (!dynamic.enabled || dynamic.source !== 'etcd') return [];
    const path = ['members', i, 'fluentbit_dynamic_config', 'etcd'];
    const { client, vault_agent_secret_path: vaultPath } = dynamic.etcd;
    const hasCertificate = client.certificate !== '' || !client.key.isEmpty;
    const hasPassword = client.username !== '' || !client.password.isEmpty;
    if (vaultPath !== '') {
      const problems: Problem[] = [];
      if (!member.vault_agent.enabled)
        problems.push({
          path: [...path, 'vault_agent_secret_path'],
          message: 'needs vault_agent.enabled: true',
          hint: 'Vault agent renders the credentials from this secret',
        });
      if (!client.key.isEmpty || !client.password.isEmpty)
        problems.push({
          path: [...path, 'client'],
          message: 'holds a key or password although vault_agent_secret_path is set',
          hint: CREDENTIALS_FROM_VAULT,
        });
      return problems;
    }
    if (hasCertificate && hasPassword)
      return [
        {
          path: [...path, 'client'],
          message: 'sets both a certificate and a username/password',
          hint: 'the updater authenticates one way: keep certificate and key, or username and password',
        },
      ];
    if (hasCertificate) {
      return [
        ...(client.certificate === ''
          ? [
              {
                path: [...path, 'client', 'certificate'],
                message: 'is missing while client.key is set',
                hint: 'the client certificate (PEM or a path)',
              },
            ]
          : []),
        ...(client.key.isEmpty
          ? [
              {
                path: [...path, 'client', 'key'],
                message: 'is missing while client.certificate is set',
                hint: 'the private key of the client certificate',
              },
            ]
          : []),
      ];
    }
    if (hasPassword) {
      return [
        ...(client.username === ''
          ? [
              {
                path: [...path, 'client', 'username'],
                message: 'is missing while client.password is set',
                hint: 'the etcd user the updater reads the prefix as',
              },
            ]
          : []),
        ...(client.password.isEmpty
          ? [{ path: [...path, 'client', 'password'], message: 'is missing while client.username is set', hint: "that user's password" }]
          : []),
      ];
    }
    return [
      {
        path: [...path, 'client'],
        message: 'has no credentials',
        hint: 'give certificate and key, username and password, or vault_agent_secret_path',
      },
    ];
  });

const RFC3339_UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;

const restoreSettingsAreSound: Rule = (doc) =>
  doc.members.flatMap((member, i): Problem[] => {
    const { restore } = member;
    if (!restore.enabled) return [];
    const problems: Problem[] = [];
    const path = ['members', i, 'restore'];
    if (!doc.cluster.is_initializing)
      problems.push({
        path: [...path, 'enabled'],
        message: 'requires cluster.is_initializing: true',
        hint: 'a restore founds a new cluster from the snapshot; an existing cluster keeps its data',
      });
    if (restore.backup_timestamp && !RFC3339_UTC.test(restore.backup_timestamp))
      problems.push({
        path: [...path, 'backup_timestamp'],
        message: `${JSON.stringify(restore.backup_timestamp)} is not an RFC 3339 UTC timestamp`,
        hint: 'as in the object name, e.g. 2026-11-21T10:00:00Z; leave empty for the latest',
      });
    if (restore.encryption_key.isEmpty)
      problems.push({
        path: [...path, 'encryption_key'],
        message: 'is empty while restore.enabled is true',
        hint: "a restore reads only backups whose manifest verifies with this key (etcd-backup's 64-hex-digit master key)",
      });
    else if (!/^[0-9a-fA-F]{64}$/.test(restore.encryption_key.reveal()))
      problems.push({
        path: [...path, 'encryption_key'],
        message: 'is not 32 bytes of hex (64 hex digits)',
        hint: "etcd-backup's master key format",
      });
    return problems;
  });

/** The S3 settings parsed for what they are (s3-values.ts), wherever they are written, restoring or not: `backup` uses them too. */
const s3ValuesAreParsed: Rule = (doc) => [
  ...doc.members.flatMap((member, i) => s3ValueProblems(member.restore.s3, ['members', i, 'restore', 's3'])),
  ...(doc.backup.endpoint ? s3ValueProblems({ endpoint: doc.backup.endpoint, bucket: '', object_prefix: '', region: '' }, ['backup']) : []),
];

/** Where a member's snapshots are and how they are sealed, as one comparable string (secrets included, never shown). */
function s3Target(member: MemberInput): string {
  const { s3, encryption_key: key } = member.restore;
  return JSON.stringify([
    s3.endpoint,
    s3.bucket,
    s3.object_prefix,
    s3.region,
    s3.access_key.reveal(),
    s3.secret_key.reveal(),
    s3.ca_cert,
    key.reveal(),
  ]);
}

/** Every member restores from the same snapshot: their restore settings must agree. */
const restoreIsClusterWide: Rule = (doc) => {
  const restoring = doc.members.filter((member) => member.restore.enabled);
  if (restoring.length === 0) return [];
  const settingsOf = (member: MemberInput) => `${s3Target(member)} ${member.restore.backup_timestamp}`;
  const first = settingsOf(restoring[0]!);
  const hint = 'all members restore from the same snapshot: set restore once under defaults';
  return doc.members.flatMap((member, i): Problem[] => {
    if (!member.restore.enabled)
      return [{ path: ['members', i, 'restore', 'enabled'], message: 'is false while other members restore', hint }];
    return settingsOf(member) === first
      ? []
      : [{ path: ['members', i, 'restore'], message: `differs from ${restoring[0]!.name}'s restore settings`, hint }];
  });
};

const backupSettingsAreSound: Rule = (doc) => {
  if (!doc.backup.enabled) return [];
  const problems: Problem[] = [];
  if (!doc.etcd.client_cert_auth)
    problems.push({
      path: ['backup', 'enabled'],
      message: 'needs etcd.client_cert_auth: true',
      hint:
        'the agent logs into etcd with a client certificate of its own (CN=etcd-kvm-agent); ' +
        'in password mode it has no identity yet: not implemented',
    });
  const first = doc.members[0];
  if (!first) return problems;
  const { s3 } = first.restore;
  const missing: string[] = [
    ...(['endpoint', 'bucket', 'object_prefix'] as const).filter((field) => !s3[field]),
    ...(['access_key', 'secret_key'] as const).filter((field) => s3[field].isEmpty),
  ];
  for (const field of missing)
    problems.push({
      path: ['members', 0, 'restore', 's3', field],
      message: 'is empty while backup.enabled is true',
      hint: 'the agent uploads where restore.s3 points: set restore.s3 under defaults',
    });
  if (first.restore.encryption_key.isEmpty)
    problems.push({
      path: ['members', 0, 'restore', 'encryption_key'],
      message: 'is empty while backup.enabled is true',
      hint:
        "every backup is sealed and authenticated with it (etcd-backup's " +
        '64-hex-digit master key): set restore.encryption_key under defaults',
    });
  doc.members.forEach((member, i) => {
    if (s3Target(member) !== s3Target(first))
      problems.push({
        path: ['members', i, 'restore'],
        message: `its s3 settings or encryption_key differ from ${first.name}'s`,
        hint: 'every member backs up to the same place: set restore.s3 and restore.encryption_key once under defaults',
      });
  });
  return problems;
};

const drillsNeedBackups: Rule = (doc) =>
  doc.backup.verify.enabled && !doc.backup.enabled
    ? [
        {
          path: ['backup', 'verify', 'enabled'],
          message: 'needs backup.enabled: true',
          hint:
            "a scheduled drill restores the cluster's newest backup, " +
            'with the bucket and keys the agents back up with: turn backups on too',
        },
      ]
    : [];

const defragNeedsTheAgentsIdentity: Rule = (doc) =>
  doc.maintenance.defrag.enabled && !doc.etcd.client_cert_auth
    ? [
        {
          path: ['maintenance', 'defrag', 'enabled'],
          message: 'needs etcd.client_cert_auth: true',
          hint:
            'the agent logs into etcd with a client certificate of its own (CN=etcd-kvm-agent); ' +
            'in password mode it has no identity yet: not implemented',
        },
      ]
    : [];

const installNeedsReleaseVersion: Rule = (doc) =>
  (doc.etcd.binaries === 'release' || doc.members.some((member) => member.install_dependencies)) &&
  !/^v\d+\.\d+\.\d+$/.test(doc.etcd.version)
    ? [
        {
          path: ['etcd', 'version'],
          message: `${JSON.stringify(doc.etcd.version)} is not an etcd release tag`,
          hint:
            `${doc.etcd.binaries === 'release' ? 'binaries: release installs' : 'install_dependencies downloads'} ` +
            `that release: use a tag like v3.5.33`,
        },
      ]
    : [];

const stageNeedsReleaseBinaries: Rule = (doc) => {
  const staged = doc.etcd.stage_version;
  if (staged === undefined) return [];
  const path = ['etcd', 'stage_version'];
  if (doc.etcd.binaries !== 'release')
    return [{ path, message: 'needs etcd.binaries: release', hint: 'only a release the tool installs can be staged ahead of its roll' }];
  if (!/^v\d+\.\d+\.\d+$/.test(staged))
    return [{ path, message: `${JSON.stringify(staged)} is not an etcd release tag`, hint: 'stage a release by its tag, like v3.5.33' }];
  return [];
};

export const RULES: readonly Rule[] = [
  uniqueNames,
  memberIsNotTheControlNode,
  uniqueAddresses,
  addressesAreNotTaken,
  addressesInsidePrefix,
  everyMemberHasAnInterface,
  macvtapMembersReachedDirectly,
  networkByNameXorId,
  exactlyOneBootstrapMember,
  bootstrapMemberPresent,
  somePresentMember,
  oneAdminPassword,
  grpcGatewayNeedsPasswordMode,
  rootPasswordInPasswordMode,
  usersHoldDefinedRoles,
  permissionsAvoidToolKeys,
  userNamesAreTheirOwn,
  userPasswordsFitTheMode,
  adminIsNoServiceAccount,
  extraDomainsAreNoMemberNames,
  oneSourceOfSigning,
  jumpsNameBastions,
  initialMembersMatch,
  hypervisorExists,
  osVolumeSource,
  suppliedTlsIsComplete,
  distinctPorts,
  electionOutlastsHeartbeats,
  renewalInsideValidity,
  releasesOverHttpArePinned,
  urlsAreSound,
  oneDefragRule,
  periodicCorruptionCheckIsRare,
  enabledFeaturesAreComplete,
  dynamicConfigCredentialsAreSound,
  restoreSettingsAreSound,
  s3ValuesAreParsed,
  restoreIsClusterWide,
  backupSettingsAreSound,
  drillsNeedBackups,
  defragNeedsTheAgentsIdentity,
  installNeedsReleaseVersion,
  stageNeedsReleaseBinaries,
];

export function checkRules(doc: ParsedDocument): Problem[] {
  return RULES.flatMap((rule) => rule(doc));
}
