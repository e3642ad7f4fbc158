import test from 'ava';
import { InputError } from '../../tasks/core/errors.ts';
import { loadInventory } from '../../tasks/inventory/load.ts';
import { derivedMac } from '../../tasks/inventory/mac.ts';
import { baseDocument, load, problemsOf, type Doc } from '../helpers/inventory.ts';

function edit(change: (doc: Doc) => void): Doc {
  const doc = baseDocument();
  change(doc);
  return doc;
}

const member = (doc: Doc, i: number) => doc.members[i] as Record<string, unknown>;
const nicOf = (doc: Doc, i: number) => (member(doc, i).libvirt_networks as Record<string, unknown>[])[0]!;

test('the base document loads, with defaults and derived values filled in', (t) => {
  const inventory = load(baseDocument());
  t.is(inventory.members.length, 3);
  const first = inventory.members[0]!;
  t.is(first.vcpus, 1);
  t.is(first.admin.user, 'ubuntu');
  t.is(first.etcdIp, '10.10.0.11');
  t.is(first.hypervisor.name, 'hv');
  t.is(first.volumes.cloudInit.name, 'etcd-1-cloud-init.iso');
  t.is(inventory.etcd.spaceQuota, 8 * 1024 ** 3);
  t.is(inventory.etcd.autoCompactionRetention, '1000');
  t.true(inventory.etcd.clientCertAuth);
  t.regex(first.interfaces[0]!.mac, /^52:54:00(:[0-9a-f]{2}){3}$/);
});

test("the default etcd release is a supported 3.5 patch, one 3.6's upgrade guide lets step to 3.6; binaries stay the image's unless asked", (t) => {
  const { etcd } = load(baseDocument());
  t.deepEqual(etcd.version, { major: 3, minor: 5, patch: 33 });
  t.true(etcd.version!.patch >= 32);
  t.is(etcd.binaries, 'image');
  t.is(etcd.releaseUrl, 'https://github.com/etcd-io/etcd/releases/download');
  t.is(etcd.sha256, undefined);
});

test('derived MACs are stable across loads and distinct per member', (t) => {
  const a = load(baseDocument()).members.map((m) => m.interfaces[0]!.mac);
  const b = load(baseDocument()).members.map((m) => m.interfaces[0]!.mac);
  t.deepEqual(a, b);
  t.is(new Set(a).size, 3);
});

test('lab and seed example inventories load', (t) => {
  for (const path of ['inventories/lab.yaml', 'inventories/examples/libvirt-network.yaml', 'inventories/examples/macvtap.yaml']) {
    const inventory = loadInventory(path);
    t.is(inventory.members.length, 3, path);
  }
  const macvtap = loadInventory('inventories/examples/macvtap.yaml');
  t.deepEqual(macvtap.members[0]!.interfaces[0]!.source, { kind: 'macvtap', device: 'ens3' });
  t.is(macvtap.members[0]!.interfaces[0]!.mac, '52:54:00:de:e3:64');
  t.is(macvtap.members[0]!.interfaces[0]!.prefixLength, 24);
});

test('unknown keys are rejected with the nearest known key', (t) => {
  const problems = problemsOf(edit((doc) => (member(doc, 1).vcpu = 2)));
  t.deepEqual(problems, ["members[1].vcpu (member etcd-2): unknown key — did you mean 'vcpus'?"]);
  const nested = problemsOf(edit((doc) => (doc.etcd = { client_cert_atuh: false })));
  t.deepEqual(nested, ["etcd.client_cert_atuh: unknown key — did you mean 'client_cert_auth'?"]);
});

test('member names must be unique', (t) => {
  const problems = problemsOf(edit((doc) => (member(doc, 2).name = 'etcd-1')));
  t.deepEqual(problems, [
    "members[2].name (member etcd-1): member name 'etcd-1' is already used at members.0.name — each must be unique in the cluster",
  ]);
});

test('IPs must be unique', (t) => {
  const problems = problemsOf(edit((doc) => (nicOf(doc, 2).ip = '10.10.0.11')));
  t.is(problems.length, 1);
  t.regex(
    problems[0]!,
    /^members\[2\]\.libvirt_networks\[0\]\.ip \(member etcd-3\): IP 10\.10\.0\.11 is already used at members\.0\.libvirt_networks\.0\.ip/,
  );
});

test('MACs must be unique, whatever their case', (t) => {
  const problems = problemsOf(
    edit((doc) => {
      nicOf(doc, 0).mac = '52:54:00:aa:bb:cc';
      nicOf(doc, 1).mac = '52:54:00:AA:BB:CC';
    }),
  );
  t.is(problems.length, 1);
  t.regex(problems[0]!, /^members\[1\]\.libvirt_networks\[0\]\.mac \(member etcd-2\): MAC 52:54:00:aa:bb:cc is already used/);
});

test('an IP must be a host address inside its prefix', (t) => {
  t.deepEqual(problemsOf(edit((doc) => (nicOf(doc, 0).ip = '10.10.0.255'))), [
    'members[0].libvirt_networks[0].ip (member etcd-1): 10.10.0.255 is the network or broadcast address of its /24 — pick a host address',
  ]);
  t.deepEqual(problemsOf(edit((doc) => (nicOf(doc, 0).ip = '10.10.0.300'))), [
    'members[0].libvirt_networks[0].ip (member etcd-1): "10.10.0.300" is not an IPv4 address',
  ]);
});

test('the gateway must be inside the interface prefix', (t) => {
  t.deepEqual(problemsOf(edit((doc) => (nicOf(doc, 1).gateway = '10.20.0.1'))), [
    "members[1].libvirt_networks[0].gateway (member etcd-2): 10.20.0.1 is outside 10.10.0.12/24 — the gateway must be on the interface's own subnet",
  ]);
});

test('an initializing cluster needs exactly one bootstrap member', (t) => {
  t.deepEqual(problemsOf(edit((doc) => delete member(doc, 0).authentication_bootstrap)), [
    'members: no member has authentication_bootstrap.bootstrap: true — a new cluster needs exactly one member that creates the root user and enables auth',
  ]);
  t.deepEqual(problemsOf(edit((doc) => (member(doc, 2).authentication_bootstrap = { bootstrap: true }))), [
    'members[2].authentication_bootstrap.bootstrap (member etcd-3): is true on more than one member (first: etcd-1) — exactly one member bootstraps authentication',
  ]);
  // A cluster that already exists may name no bootstrap member.
  t.notThrows(() =>
    load(
      edit((doc) => {
        (doc.cluster as Record<string, unknown>).is_initializing = false;
        delete member(doc, 0).authentication_bootstrap;
      }),
    ),
  );
});

test('the gRPC gateway requires client_cert_auth: false', (t) => {
  t.deepEqual(problemsOf(edit((doc) => (doc.etcd = { grpc_gateway_enabled: true }))), [
    'etcd.grpc_gateway_enabled: requires client_cert_auth: false — the legacy REST gateway cannot present client certificates',
  ]);
});

test('password mode requires root_password on the bootstrap member', (t) => {
  t.deepEqual(problemsOf(edit((doc) => (doc.etcd = { client_cert_auth: false }))), [
    'members[0].authentication_bootstrap.root_password (member etcd-1): is required when etcd.client_cert_auth is false — password mode creates the root user with this password',
  ]);
  const inventory = load(
    edit((doc) => {
      doc.etcd = { client_cert_auth: false, grpc_gateway_enabled: true };
      member(doc, 0).authentication_bootstrap = { bootstrap: true, root_password: 's3cret' };
    }),
  );
  t.is(inventory.members[0]!.rootPassword.reveal(), 's3cret');
  t.is(String(inventory.members[0]!.rootPassword), '<redacted>');
});

test('application roles and users: every problem with its path, root refused, passwords as the mode wants', (t) => {
  const problems = problemsOf(
    edit((doc) => {
      doc.roles = {
        app1: {
          permissions: [
            { prefix: '/app1/', access: 'readwrite' },
            { key: '/a', prefix: '/b', access: 'read' },
            { prefix: '/c', access: 'all' },
          ],
        },
        root: { permissions: [] },
      };
      doc.users = { alice: { roles: ['app1', 'app2'], password: 'not-in-cert-mode' }, 'bad name': { roles: [] } };
    }),
  );
  t.deepEqual(
    problems.sort(),
    [
      'roles.app1.permissions[1]: gives exactly one of key (one key) or prefix (every key under it)',
      "roles.app1.permissions[2].access: Invalid enum value. Expected 'read' | 'write' | 'readwrite', received 'all'",
      'roles.root: root is the user and role the tool bootstraps authentication with; give application users and roles names of their own',
      'users.bad name: must be letters, digits, ".", "_" or "-", starting with a letter or digit, at most 64 characters',
    ].sort(),
  );
  const crossRules = problemsOf(
    edit((doc) => {
      doc.roles = { app1: { permissions: [{ prefix: '/app1/', access: 'readwrite' }] } };
      doc.users = { alice: { roles: ['app1', 'app2'], password: 'not-in-cert-mode' } };
    }),
  );
  t.deepEqual(crossRules, [
    'users.alice.roles[1]: names role app2, which roles: does not define — define it under roles: (roles are app1)',
    'users.alice.password: is not used when etcd.client_cert_auth is true — the user logs in with its client certificate (CN=alice), issued by the tool: remove the password',
  ]);
  const passwordMode = problemsOf(
    edit((doc) => {
      doc.etcd = { client_cert_auth: false };
      member(doc, 0).authentication_bootstrap = { bootstrap: true, root_password: 's3cret' };
      doc.users = { alice: {} };
    }),
  );
  t.deepEqual(passwordMode, [
    'users.alice.password: is required when etcd.client_cert_auth is false — password mode: the user logs in with this password',
  ]);
  const inventory = load(
    edit((doc) => {
      doc.roles = { app1: { permissions: [{ prefix: '/app1/', access: 'readwrite' }] } };
      doc.users = { alice: { roles: ['app1'] } };
    }),
  );
  t.deepEqual(inventory.users.alice!.roles, ['app1']);
  t.deepEqual(inventory.roles.app1!.permissions, [{ prefix: '/app1/', access: 'readwrite' }]);
});

test('pki.intermediate_ca is the one way to sign when given: not with pki.ca or pki.intermediate, and complete', (t) => {
  const problems = problemsOf(
    edit((doc) => {
      doc.pki = {
        intermediate: true,
        ca: { certificate: '-----BEGIN CERTIFICATE-----', key: '-----BEGIN PRIVATE KEY-----' },
        intermediate_ca: { certificate: '-----BEGIN CERTIFICATE-----' },
      };
    }),
  );
  t.deepEqual(problems, [
    "pki.ca: cannot be given with pki.intermediate_ca — the operator's intermediate signs, and the last certificate of intermediate_ca.chain is the root members and clients trust",
    'pki.intermediate: cannot be true with pki.intermediate_ca — pki.intermediate makes an intermediate; pki.intermediate_ca is one the operator brings',
    'pki.intermediate_ca.key: is required — PEM text or a file path',
    'pki.intermediate_ca.chain: is required — PEM text or a file path',
  ]);
});

test('initial_members, when given, must match the members', (t) => {
  const problems = problemsOf(
    edit((doc) => {
      (doc.cluster as Record<string, unknown>).initial_members = [
        { name: 'etcd-1', ip: '10.10.0.99' },
        { name: 'etcd-9', ip: '10.10.0.12' },
      ];
    }),
  );
  t.deepEqual(problems, [
    "cluster.initial_members[0].ip: 10.10.0.99 differs from etcd-1's first interface address 10.10.0.11",
    "cluster.initial_members[1].name: 'etcd-9' is not a member of this inventory — initial_members must list the members below, or be left out to derive it",
    "members[1].name (member etcd-2): 'etcd-2' is missing from cluster.initial_members",
    "members[2].name (member etcd-3): 'etcd-3' is missing from cluster.initial_members",
  ]);
});

test('a libvirt network is named by network_name xor network_id', (t) => {
  t.deepEqual(problemsOf(edit((doc) => (nicOf(doc, 0).network_id = '3b1c4a4e-0000-4000-8000-000000000001'))), [
    'members[0].libvirt_networks[0] (member etcd-1): sets both network_name and network_id — keep exactly one',
  ]);
  t.deepEqual(problemsOf(edit((doc) => delete nicOf(doc, 0).network_name)), [
    'members[0].libvirt_networks[0] (member etcd-1): sets neither network_name nor network_id — name the libvirt network to attach to',
  ]);
  const byId = problemsOf(
    edit((doc) => {
      delete nicOf(doc, 0).network_name;
      nicOf(doc, 0).network_id = 'etcd-lab';
    }),
  );
  t.is(byId.length, 1);
  t.regex(
    byId[0]!,
    /^members\[0\]\.libvirt_networks\[0\]\.network_id \(member etcd-1\): is a libvirt network UUID \(virsh net-uuid NAME\)/,
  );
});

test('a member whose etcd listens on macvtap must be reached directly: its hypervisor cannot talk to it', (t) => {
  const macvtapOnly = (doc: Doc) => {
    member(doc, 1).libvirt_networks = [];
    member(doc, 1).macvtap_interfaces = [{ interface: 'ens3', ip: '10.20.0.12', prefix_length: 24, mac: '52:54:00:de:e3:65' }];
  };
  t.deepEqual(problemsOf(edit(macvtapOnly)), [
    "members[1].reach_via (member etcd-2): is 'hypervisor', but etcd listens on a macvtap interface, which its own hypervisor cannot reach — set reach_via: direct and run the tool from a machine on the macvtap network (not the hypervisor)",
  ]);
  t.notThrows(() =>
    load(
      edit((doc) => {
        macvtapOnly(doc);
        member(doc, 1).reach_via = 'direct';
      }),
    ),
  );
  // A libvirt network first: etcd listens there, and the hypervisor reaches it.
  t.notThrows(() =>
    load(
      edit(
        (doc) =>
          (member(doc, 1).macvtap_interfaces = [{ interface: 'ens3', ip: '10.20.0.12', prefix_length: 24, mac: '52:54:00:de:e3:65' }]),
      ),
    ),
  );
});

test('every member needs an interface', (t) => {
  t.deepEqual(problemsOf(edit((doc) => (member(doc, 1).libvirt_networks = []))), [
    'members[1] (member etcd-2): has no network interface — add an entry to libvirt_networks or macvtap_interfaces',
  ]);
});

test('a member must name a defined hypervisor when there are several', (t) => {
  t.deepEqual(problemsOf(edit((doc) => (member(doc, 0).hypervisor = 'nope'))), [
    "members[0].hypervisor (member etcd-1): 'nope' is not defined under hypervisors — one of: hv",
  ]);
  t.deepEqual(problemsOf(edit((doc) => ((doc.hypervisors as Record<string, unknown>).hv2 = { address: '127.0.0.2' }))).length, 3);
});

test('a member without volume_id needs a base image', (t) => {
  t.deepEqual(problemsOf(edit((doc) => delete (doc.defaults as Record<string, unknown>).base_image)).length, 3);
  t.notThrows(() => load(edit((doc) => (member(doc, 0).volume_id = 'etcd-1'))));
});

test('every problem is reported at once, with field-level type errors', (t) => {
  const problems = problemsOf(
    edit((doc) => {
      member(doc, 0).vcpus = 'two';
      member(doc, 1).memory = 10;
      member(doc, 2).bogus = true;
    }),
  );
  t.deepEqual(problems, [
    'members[0].vcpus (member etcd-1): Expected number, received string',
    'members[1].memory (member etcd-2): is in MiB; etcd needs at least 256',
    'members[2].bogus (member etcd-3): unknown key — known keys here: name, state, hypervisor, vcpus, memory, domain, volume_id, volume_pool, base_image, os_volume_size_gib, data_volume_id, data_volume_size_gib, libvirt_networks, macvtap_interfaces, cloud_init_volume_pool, cloud_init_volume_name, ssh_admin_user, admin_user_password, admin_user_password_hash, ssh_admin_public_key, authentication_bootstrap, tls, restore, chrony, fluentbit, fluentbit_dynamic_config, vault_agent, install_dependencies, reach_via',
  ]);
});

test('missing required fields and broken YAML are reported with their location', (t) => {
  const doc = baseDocument();
  delete (doc.cluster as Record<string, unknown>).initial_token;
  t.deepEqual(problemsOf(doc), ['cluster.initial_token: is required (string)']);
  const error = t.throws(() => load('cluster: [unclosed\n'), { instanceOf: InputError });
  t.regex(error!.message, /is not valid YAML/);
  t.regex(error!.locations[0]!, /^in \S+inventory\.yaml:2:1\n/);
});

test('every seed module input is expressible', (t) => {
  const inventory = load(
    edit((doc) => {
      doc.etcd = {
        auto_compaction_mode: 'periodic',
        auto_compaction_retention: '1h',
        space_quota: 1024 ** 3,
        grpc_gateway_enabled: false,
        client_cert_auth: true,
      };
      Object.assign(member(doc, 0), {
        vcpus: 4,
        memory: 4096,
        volume_id: 'etcd-1-os',
        data_volume_id: 'etcd-1-data',
        macvtap_interfaces: [
          {
            interface: 'ens3',
            prefix_length: '24',
            ip: '10.20.0.5',
            mac: '52:54:00:DE:E3:64',
            gateway: '10.20.0.1',
            dns_servers: ['10.20.0.1'],
          },
        ],
        cloud_init_volume_pool: 'ci',
        cloud_init_volume_name: 'custom.iso',
        ssh_admin_user: 'ops',
        admin_user_password: 'console-only',
        ssh_admin_public_key: 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBQ8b6Tt3v8cYbyZ5KJpyB2rMh3Y6m0l1C4dA2cXvFzC ops@example',
        tls: { ca_cert: '', server_cert: '', server_key: '' },
        restore: {
          enabled: false,
          s3: {
            endpoint: 'https://s3.local',
            bucket: 'bkt',
            object_prefix: 'p',
            region: 'r',
            access_key: 'a',
            secret_key: 's',
            ca_cert: '',
          },
          encryption_key: 'k',
          backup_timestamp: '',
        },
        chrony: {
          enabled: false,
          servers: [{ url: 'ntp.local', options: ['iburst'] }],
          pools: [{ url: 'pool.local', options: [] }],
          makestep: { threshold: 1, limit: 3 },
        },
        fluentbit: {
          enabled: false,
          etcd_tag: 'etcd',
          node_exporter_tag: 'ne',
          forward: { domain: 'f', port: 24224, hostname: 'h', shared_key: 'k', ca_cert: '' },
        },
        fluentbit_dynamic_config: {
          enabled: false,
          source: 'git',
          etcd: {
            key_prefix: 'p',
            endpoints: ['e'],
            ca_certificate: '',
            client: { certificate: '', key: '', username: 'u', password: 'p' },
            vault_agent_secret_path: '',
          },
          git: { repo: 'r', ref: 'main', path: '/', trusted_gpg_keys: [], auth: { client_ssh_key: '', server_ssh_fingerprint: 'f' } },
        },
        vault_agent: {
          enabled: false,
          auth_method: { config: { role_id: 'r', secret_id: 's' } },
          vault_address: 'https://vault',
          vault_ca_cert: '',
        },
        install_dependencies: false,
      });
    }),
  );
  const first = inventory.members[0]!;
  t.is(first.interfaces.length, 2);
  t.is(first.etcdIp, '10.10.0.11', 'etcd binds to the first interface (libvirt networks come first)');
  t.deepEqual(first.volumes.os, { existing: 'etcd-1-os' });
  t.deepEqual(first.volumes.cloudInit, { pool: 'ci', name: 'custom.iso' });
  t.is(first.admin.password.reveal(), 'console-only');
});

// Input that can't hurt: bounded numbers, one-line strings where files are line-based, safe paths.

const refusals: { name: string; edit: (doc: Doc) => void; problem: string }[] = [
  {
    name: 'a newline in data_dir (it would add lines to the etcd unit)',
    edit: (doc) => (doc.etcd = { data_dir: '/var/lib/etcd\nExecStartPre=/bin/sh -c evil' }),
    problem: 'etcd.data_dir: must be one line without control characters (a newline here would add lines to the files it is written into)',
  },
  {
    name: 'data_dir the root directory',
    edit: (doc) => (doc.etcd = { data_dir: '/' }),
    problem:
      "etcd.data_dir: / is a system directory; etcd's data directory is made etcd's own (mode 0700): use a directory of its own such as /var/lib/etcd",
  },
  {
    name: 'data_dir not normalised',
    edit: (doc) => (doc.etcd = { data_dir: '/var/lib/../lib/etcd/' }),
    problem: 'etcd.data_dir: must be a normalised path (no //, ., .. or trailing /): did you mean /var/lib/etcd?',
  },
  {
    name: 'data_dir relative',
    edit: (doc) => (doc.etcd = { data_dir: 'var/lib/etcd' }),
    problem: 'etcd.data_dir: must be an absolute path',
  },
  {
    name: 'a newline in a chrony server',
    edit: (doc) => (member(doc, 0).chrony = { enabled: true, servers: [{ url: 'ntp\nallow all' }] }),
    problem:
      'members[0].chrony.servers[0].url (member etcd-1): must be one line without control characters (a newline here would add lines to the files it is written into)',
  },
  {
    name: 'a newline in ssh_admin_user',
    edit: (doc) => (member(doc, 1).ssh_admin_user = 'admin\nroot ALL=(ALL) ALL'),
    problem:
      'members[1].ssh_admin_user (member etcd-2): must be a Linux user name: lowercase letters, digits, "_" or "-", starting with a letter or "_", at most 32 characters',
  },
  {
    name: 'a sudoers rule in ssh_admin_user',
    edit: (doc) => (member(doc, 1).ssh_admin_user = 'ops ALL=(ALL) NOPASSWD:ALL,'),
    problem:
      'members[1].ssh_admin_user (member etcd-2): must be a Linux user name: lowercase letters, digits, "_" or "-", starting with a letter or "_", at most 32 characters',
  },
  {
    name: 'memory beyond 4 TiB',
    edit: (doc) => (member(doc, 0).memory = 1e21),
    problem: 'members[0].memory (member etcd-1): is in MiB; at most 4 TiB',
  },
  {
    name: "a quota above etcd's maximum",
    edit: (doc) => (doc.etcd = { space_quota: 1e300 }),
    problem: "etcd.space_quota: is in bytes; etcd's documented maximum is 8 GiB (8589934592)",
  },
  {
    name: 'an election timeout under five heartbeats (etcd would not start)',
    edit: (doc) => (doc.etcd = { heartbeat_interval: 300, election_timeout: 1000 }),
    problem:
      "etcd.election_timeout: is 1000 ms, under 5 heartbeats (heartbeat_interval 300 ms): etcd refuses to start — etcd's tuning guide: about 10 heartbeats, here 3000 ms",
  },
  {
    name: "an election timeout beyond etcd's maximum",
    edit: (doc) => (doc.etcd = { election_timeout: 60_000 }),
    problem: "etcd.election_timeout: is in milliseconds; etcd's maximum is 50000",
  },
  {
    name: 'a validity period beyond 1000 years',
    edit: (doc) => (doc.pki = { validity_period: 1e15 }),
    problem: 'pki.validity_period: is in hours; at most 8760000 (1000 years)',
  },
  {
    name: 'a renewal period as long as the certificates live: every run would issue them all again',
    edit: (doc) => (doc.pki = { validity_period: 720, early_renewal_period: 720 }),
    problem:
      'pki.early_renewal_period: is 720 hours, not shorter than validity_period (720 hours): every run would issue every certificate again — a sixth of the life is common, here 120 hours',
  },
  {
    name: 'the old renewal default beside a short life set alone',
    edit: (doc) => (doc.pki = { validity_period: 2000, early_renewal_period: 8760 }),
    problem:
      'pki.early_renewal_period: is 8760 hours, not shorter than validity_period (2000 hours): every run would issue every certificate again — a sixth of the life is common, here 333 hours',
  },
  {
    name: 'releases over plain http from another machine, without a pinned digest',
    edit: (doc) => (doc.etcd = { version: 'v3.5.30', binaries: 'release', release_url: 'http://mirror.example/etcd' }),
    problem:
      "etcd.release_url: is plain http (http://mirror.example/etcd): anyone on the way can serve another archive with a SHA256SUMS that matches it — use https, or pin the archive's digest in etcd.sha256 (a mirror on this machine, 127.0.0.1, is fine as it is)",
  },
  {
    name: 'a release URL with credentials in it: refused without showing them, and the plain-http refusal says nothing of it',
    edit: (doc) => (doc.etcd = { version: 'v3.5.30', binaries: 'release', release_url: 'http://me:s3cret@mirror.example/etcd' }),
    problem:
      'etcd.release_url: carries credentials in its user-info (the URL is not shown): they would be printed in messages and logs in clear — serve the releases where no credentials are needed: a mirror of your own, over https',
  },
  {
    name: 'a release URL with a query: the release directory and archive are appended to it',
    edit: (doc) => (doc.etcd = { release_url: 'https://mirror.example/etcd?token=1' }),
    problem: 'etcd.release_url: has a query — give the endpoint alone; requests add their own',
  },
  {
    name: 'a runbook URL with credentials in it: they would be in every alert',
    edit: (doc) => (doc.monitoring = { runbook_url: 'https://wiki:pw@wiki.example/etcd' }),
    problem:
      'monitoring.runbook_url: carries credentials in its user-info (the URL is not shown): they would be in every alert in clear — give the page a URL anyone who gets the alert may read',
  },
  {
    name: 'a health_timeout that would overflow a timer',
    edit: (doc) => ((doc.cluster as Record<string, unknown>).health_timeout = 1e12),
    problem: 'cluster.health_timeout: is in seconds; at most a day',
  },
  {
    name: 'vCPUs beyond 256',
    edit: (doc) => (member(doc, 2).vcpus = 100_000),
    problem: 'members[2].vcpus (member etcd-3): at most 256 (libvirt and QEMU limits are around there)',
  },
];
for (const row of refusals) {
  test(`refused: ${row.name}`, (t) => {
    t.deepEqual(problemsOf(edit(row.edit)), [row.problem]);
  });
}

test('an inline private key with text before its PEM block is refused without echoing it', (t) => {
  const key =
    'Bag Attributes\n    localKeyID: 01 02\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n';
  const problems = problemsOf(edit((doc) => (member(doc, 0).tls = { ca_cert: key, server_cert: key, server_key: key })));
  t.true(problems.length >= 3);
  t.regex(
    problems.find((p) => p.startsWith('members[0].tls.server_key'))!,
    /neither PEM text starting with -----BEGIN nor a file path \(the value is not shown/,
  );
  for (const problem of problems) t.false(problem.includes('MIIEvQIBADANBgkqhkiG9w0BAQEFAASC'), problem);
});

test('a YAML alias bomb is bad input (exit 2), not a crash', (t) => {
  const bomb = [
    'a: &a ["x","x","x","x","x","x","x","x","x","x"]',
    ...'bcdefgh'.split('').map((c, i) => `${c}: &${c} [${Array(10).fill(`*${'abcdefg'[i]}`).join(',')}]`),
    'cluster: *h',
    '',
  ].join('\n');
  const error = t.throws(() => load(bomb), { instanceOf: InputError });
  t.regex(error!.message, /cannot be read as data/);
  t.regex(error!.problems[0]!, /alias/i);
});

test('state: absent takes a member out of the cluster the tool deploys, not out of validation', (t) => {
  const inventory = load(edit((doc) => (member(doc, 2).state = 'absent')));
  t.deepEqual(
    inventory.members.map((m) => m.name),
    ['etcd-1', 'etcd-2'],
  );
  t.deepEqual(
    inventory.absentMembers.map((m) => m.name),
    ['etcd-3'],
  );
  // Its address is still its own: nobody else may take it while it leaves.
  t.regex(
    problemsOf(
      edit((doc) => {
        member(doc, 2).state = 'absent';
        nicOf(doc, 1).ip = '10.10.0.13';
      }),
    )[0]!,
    /IP 10\.10\.0\.13 is already used/,
  );
  t.deepEqual(problemsOf(edit((doc) => (member(doc, 0).state = 'absent'))), [
    'members[0].authentication_bootstrap.bootstrap (member etcd-1): is true on a member marked state: absent — move authentication_bootstrap to a member that stays (auth is already on; the flag only names who checks it)',
  ]);
  t.deepEqual(
    problemsOf(edit((doc) => (member(doc, 1).state = 'gone'))).map((p) => p.split(':')[0]),
    ['members[1].state (member etcd-2)'],
  );
});

test("a seed ISO name that is another volume's, or shared through defaults, is refused: the tool deletes and rewrites seeds", (t) => {
  t.deepEqual(problemsOf(edit((doc) => (member(doc, 1).cloud_init_volume_name = 'etcd-1-os.qcow2'))), [
    "members[1].cloud_init_volume_name (member etcd-2): names volume default/etcd-1-os.qcow2 on hypervisor hv, which is etcd-1's OS disk: the tool deletes and rewrites a seed ISO whenever it changes — give each member a seed ISO name of its own (the default is etcd-2-cloud-init.iso); never set it under defaults",
  ]);
  const shared = problemsOf(edit((doc) => ((doc.defaults as Record<string, unknown>).cloud_init_volume_name = 'seed.iso')));
  t.deepEqual(
    shared.map((p) => p.split(':')[0]),
    // At defaults, where it is written; one line per member, as each line names that member's own default.
    ['defaults.cloud_init_volume_name (inherited by etcd-2)', 'defaults.cloud_init_volume_name (inherited by etcd-3)'],
  );
  t.regex(shared[0]!, /which is etcd-1's seed ISO/);
  t.is(
    load(edit((doc) => (member(doc, 1).cloud_init_volume_name = 'etcd-2-seed.iso'))).members[1]!.volumes.cloudInit.name,
    'etcd-2-seed.iso',
  );
});

// The admin's console password as a crypt(3) hash: only the hash reaches the seed ISO.

const SHA512_HASH = '$6$Zx8sQ2pLr4Tn$sFSBY8nzruOY1ZjsL68Qf0mWG20R1ZBkYxGJZ0csqqKGKk9S/f1MMB5W/1qvWS9LnDaVJ0bOs8KDNInld/MMw0';
const YESCRYPT_HASH = '$y$j9T$F5Jx5fExrKuPp53xLKQ..1$PmNgGTLMFjJn.URBv11CpTEm5RwlKtPjRtztKe6.b33';

const acceptedHashes: { name: string; hash: string }[] = [
  { name: 'SHA-512 (openssl passwd -6)', hash: SHA512_HASH },
  { name: 'SHA-512 with rounds', hash: SHA512_HASH.replace('$6$', '$6$rounds=656000$') },
  { name: 'yescrypt (mkpasswd -m yescrypt)', hash: YESCRYPT_HASH },
];
for (const row of acceptedHashes) {
  test(`admin_user_password_hash accepts ${row.name}, kept as a secret`, (t) => {
    const admin = load(edit((doc) => (member(doc, 0).admin_user_password_hash = row.hash))).members[0]!.admin;
    t.is(admin.passwordHash.reveal(), row.hash);
    t.true(admin.password.isEmpty);
  });
}

const HASH_MESSAGE =
  'must be a crypt(3) hash, $6$… (SHA-512) or $y$… (yescrypt), as mkpasswd -m sha-512 prints it (the value is not shown)';
const refusedHashes: { name: string; edit: (doc: Doc) => void; problem: string }[] = [
  {
    name: 'a plain password',
    edit: (doc) => (member(doc, 0).admin_user_password_hash = 'hunter2'),
    problem: `members[0].admin_user_password_hash (member etcd-1): ${HASH_MESSAGE}`,
  },
  {
    name: 'an MD5 crypt',
    edit: (doc) => (member(doc, 0).admin_user_password_hash = '$1$saltsalt$qjXMvbEw8oaL.CzflDugX/'),
    problem: `members[0].admin_user_password_hash (member etcd-1): ${HASH_MESSAGE}`,
  },
  {
    name: 'a truncated SHA-512 hash',
    edit: (doc) => (member(doc, 0).admin_user_password_hash = SHA512_HASH.slice(0, -1)),
    problem: `members[0].admin_user_password_hash (member etcd-1): ${HASH_MESSAGE}`,
  },
  {
    name: 'a hash with a line after it',
    edit: (doc) => (member(doc, 0).admin_user_password_hash = `${SHA512_HASH}\nroot::0:0::/root:/bin/sh`),
    problem: `members[0].admin_user_password_hash (member etcd-1): ${HASH_MESSAGE}`,
  },
  {
    name: 'both the plain password and its hash',
    edit: (doc) => Object.assign(member(doc, 1), { admin_user_password: 'hunter2', admin_user_password_hash: SHA512_HASH }),
    problem:
      'members[1].admin_user_password_hash (member etcd-2): cannot be given with admin_user_password — keep the hash and remove admin_user_password: the plain one is written as it is into the seed ISO',
  },
];
for (const row of refusedHashes) {
  test(`refused: ${row.name} as admin_user_password_hash`, (t) => {
    t.deepEqual(problemsOf(edit(row.edit)), [row.problem]);
  });
}

// Names the tool keeps for itself, and objects two things of the inventory would share by accident.

const defaultsOf = (doc: Doc) => doc.defaults as Record<string, unknown>;
const USER_HINT = 'give application users names no member has';
const collisions: { name: string; edit: (doc: Doc) => void; problems: string[] }[] = [
  {
    name: "a user named like a member: its certificate would carry the member's CN",
    edit: (doc) => (doc.users = { 'etcd-1': {} }),
    problems: [
      `users.etcd-1: is the name of member etcd-1: members' certificates carry CN=etcd-1, and etcd takes a client certificate's CN for the user — ${USER_HINT}`,
    ],
  },
  {
    name: 'a user named like a member in other case',
    edit: (doc) => (doc.users = { 'ETCD-2': {} }),
    problems: [
      `users.ETCD-2: is the name of member etcd-2: members' certificates carry CN=etcd-2, and etcd takes a client certificate's CN for the user — ${USER_HINT}`,
    ],
  },
  {
    name: 'a user named like a member that is leaving',
    edit: (doc) => {
      member(doc, 2).state = 'absent';
      doc.users = { 'etcd-3': {} };
    },
    problems: [
      `users.etcd-3: is the name of member etcd-3: members' certificates carry CN=etcd-3, and etcd takes a client certificate's CN for the user — ${USER_HINT}`,
    ],
  },
  {
    name: 'a user named Root',
    edit: (doc) => (doc.users = { Root: {} }),
    problems: [
      'users.Root: is reserved, whatever its case: the user the tool bootstraps authentication with (its client certificate has CN=root) — give application users names of their own',
    ],
  },
  {
    name: 'a user named ca, whose bundle would replace ca.crt',
    edit: (doc) => (doc.users = { ca: {} }),
    problems: [
      "users.ca: is reserved, whatever its case: the cluster CA's file in a client bundle (ca.crt), which this user's certificate would replace — give application users names of their own",
    ],
  },
  {
    name: "a user named like the members' peer certificates",
    edit: (doc) => (doc.users = { 'Etcd-KVM-peer': {} }),
    problems: [
      "users.Etcd-KVM-peer: starts with etcd-kvm, whatever its case: the tool names its own identities so (its members' peer certificates carry CN=etcd-kvm-peer) — give application users names of their own",
    ],
  },
  {
    name: 'two users differing only in case',
    edit: (doc) => (doc.users = { alice: {}, Alice: {} }),
    problems: [
      "users.Alice: differs from user alice only in case: their files (pki/clients/NAME.crt, a bundle's NAME.crt) are one file where names ignore case — give users names that differ in more than case",
    ],
  },
  {
    name: "a member named localhost, the control node's name",
    edit: (doc) => (member(doc, 2).name = 'localhost'),
    problems: [
      "members[2].name (member localhost): 'localhost' is how the recap and the report name the machine the tool runs on: that member's results could not be told from the control node's — give the member another name",
    ],
  },
  {
    name: "a member address that is another member's gateway",
    edit: (doc) => (nicOf(doc, 2).gateway = '10.10.0.12'),
    problems: [
      'members[1].libvirt_networks[0].ip (member etcd-2): 10.10.0.12 is the gateway of members.2.libvirt_networks.0 — two hosts with one address reach neither reliably: give the member an address of its own',
    ],
  },
  {
    name: "a member address that is the hypervisor's",
    edit: (doc) => (doc.hypervisors = { hv: { address: '10.10.0.13' } }),
    problems: [
      'members[2].libvirt_networks[0].ip (member etcd-3): 10.10.0.13 is the address of hypervisor hv — two hosts with one address reach neither reliably: give the member an address of its own',
    ],
  },
  {
    name: 'a multicast MAC',
    edit: (doc) => (nicOf(doc, 0).mac = '01:00:5e:00:00:01'),
    problems: [
      'members[0].libvirt_networks[0].mac (member etcd-1): is a multicast (group) address, which every host on the network receives; a NIC needs a unicast one like 52:54:00:12:34:56',
    ],
  },
  {
    name: "an explicit MAC that another member's derived one equals",
    edit: (doc) => (nicOf(doc, 0).mac = derivedMac('test', 'etcd-2', 0)),
    problems: [
      `members[1].libvirt_networks[0] (member etcd-2): its derived MAC ${derivedMac('test', 'etcd-2', 0)} is already used at members.0.libvirt_networks.0 — set mac: on this interface to an address of its own`,
    ],
  },
  {
    name: 'one volume_id for every member, through defaults: said once, at defaults, with the members that took it',
    edit: (doc) => (defaultsOf(doc).volume_id = 'shared.qcow2'),
    problems: [
      "defaults.volume_id (inherited by etcd-2, etcd-3): names volume default/shared.qcow2 on hypervisor hv, which is etcd-1's OS disk: one volume would be two disks, written by both — give each disk a volume of its own; never set volume_id under defaults",
    ],
  },
  {
    name: "a data volume that is another member's OS disk",
    edit: (doc) => (member(doc, 1).data_volume_id = 'etcd-1-os.qcow2'),
    problems: [
      "members[1].data_volume_id (member etcd-2): names volume default/etcd-1-os.qcow2 on hypervisor hv, which is etcd-1's OS disk: one volume would be two disks, written by both — give each disk a volume of its own; never set data_volume_id under defaults",
    ],
  },
  {
    name: "a data volume that is the member's own OS disk",
    edit: (doc) => Object.assign(member(doc, 0), { volume_id: 'disk.qcow2', data_volume_id: 'disk.qcow2' }),
    problems: [
      "members[0].data_volume_id (member etcd-1): names volume default/disk.qcow2 on hypervisor hv, which is etcd-1's OS disk: one volume would be two disks, written by both — give each disk a volume of its own; never set data_volume_id under defaults",
    ],
  },
  {
    name: 'one disk file for two members in different pools',
    edit: (doc) => {
      Object.assign(member(doc, 0), { volume_id: '/var/lib/libvirt/images/etcd.qcow2', volume_pool: 'a' });
      Object.assign(member(doc, 1), { volume_id: '/var/lib/libvirt/images/etcd.qcow2', volume_pool: 'b' });
    },
    problems: [
      "members[1].volume_id (member etcd-2): names file /var/lib/libvirt/images/etcd.qcow2 on hypervisor hv, which is etcd-1's OS disk: one volume would be two disks, written by both — give each disk a volume of its own; never set volume_id under defaults",
    ],
  },
  {
    name: "a base image that is a member's OS disk",
    edit: (doc) => (defaultsOf(doc).base_image = { pool: 'default', volume: 'etcd-1-os.qcow2' }),
    problems: [
      "defaults.base_image (inherited by etcd-1): names volume default/etcd-1-os.qcow2 on hypervisor hv, which is etcd-1's OS disk: the member's disk would be layered on a disk a VM writes — base_image is the OS image members' disks are layered on, never a member's own disk",
    ],
  },
  {
    name: 'a seed ISO that is the base image',
    edit: (doc) => Object.assign(member(doc, 1), { cloud_init_volume_pool: 'images', cloud_init_volume_name: 'base.qcow2' }),
    problems: [
      'members[1].cloud_init_volume_name (member etcd-2): names volume images/base.qcow2 on hypervisor hv, which is the base image: the tool deletes and rewrites a seed ISO whenever it changes — give each member a seed ISO name of its own (the default is etcd-2-cloud-init.iso); never set it under defaults',
    ],
  },
  {
    name: 'two hypervisor names for one libvirt',
    edit: (doc) => {
      doc.hypervisors = { hv: { address: '127.0.0.1' }, hv2: { address: '127.0.0.1' } };
      member(doc, 2).hypervisor = 'hv2';
      defaultsOf(doc).hypervisor = 'hv';
    },
    problems: [
      'hypervisors.hv2.address: reaches the libvirt of hypervisor hv (127.0.0.1:22, qemu:///system) — one host is one hypervisor: list all its members under one name',
    ],
  },
  {
    name: "an extra domain that is a member's name",
    edit: (doc) => (doc.pki = { extra_domains: ['etcd.example.org', 'etcd-2'] }),
    problems: [
      "pki.extra_domains[1]: etcd-2 is member etcd-2's name: every member's certificate would carry it, so any member could pass as that one — extra_domains are names every member answers to (a load balancer's, a round-robin DNS name); a member's own names are already in its own certificate",
    ],
  },
  {
    name: "an extra domain that is a member's FQDN",
    edit: (doc) => {
      defaultsOf(doc).domain = 'example.org';
      doc.pki = { extra_domains: ['ETCD-1.example.org'] };
    },
    problems: [
      "pki.extra_domains[0]: ETCD-1.example.org is member etcd-1's FQDN: every member's certificate would carry it, so any member could pass as that one — extra_domains are names every member answers to (a load balancer's, a round-robin DNS name); a member's own names are already in its own certificate",
    ],
  },
  {
    name: "the admin user is etcd's service account",
    edit: (doc) => (member(doc, 0).ssh_admin_user = 'etcd'),
    problems: [
      "members[0].ssh_admin_user (member etcd-1): etcd is an account of the guest's own (services run as etcd, prometheus, vault, fluent-bit-updater; root logins are disabled) — cloud-init would make the admin and that account one user: give the admin a name of its own, such as ubuntu or ops",
    ],
  },
  {
    name: 'the admin user is root',
    edit: (doc) => (defaultsOf(doc).ssh_admin_user = 'root'),
    problems: [
      "defaults.ssh_admin_user (inherited by etcd-1, etcd-2, etcd-3): root is an account of the guest's own (services run as etcd, prometheus, vault, fluent-bit-updater; root logins are disabled) — cloud-init would make the admin and that account one user: give the admin a name of its own, such as ubuntu or ops",
    ],
  },
];
for (const row of collisions) {
  test(`refused, shared by accident: ${row.name}`, (t) => {
    t.deepEqual(problemsOf(edit(row.edit)), row.problems);
  });
}

const notShared: { name: string; edit: (doc: Doc) => void }[] = [
  { name: 'one base image for every member (defaults)', edit: () => undefined },
  { name: 'users whose names are their own', edit: (doc) => (doc.users = { alice: {}, bob: {}, 'etcd-app': {} }) },
  {
    name: 'one host reached on two ports (two hypervisors)',
    edit: (doc) =>
      Object.assign(doc, {
        hypervisors: { hv: { address: '127.0.0.1' }, hv2: { address: '127.0.0.1', port: 2222 } },
        defaults: { ...defaultsOf(doc), hypervisor: 'hv' },
      }),
  },
  {
    name: 'the same volume_id on two hypervisors',
    edit: (doc) =>
      Object.assign(doc, {
        hypervisors: { hv: { address: '127.0.0.1' }, hv2: { address: '127.0.0.2' } },
        defaults: { ...defaultsOf(doc), hypervisor: 'hv' },
        members: doc.members.map((m, i) => ({
          ...m,
          volume_id: 'etcd.qcow2',
          hypervisor: ['hv', 'hv2', 'hv2'][i],
          ...(i === 2 ? { volume_pool: 'other' } : {}),
        })),
      }),
  },
  { name: 'an extra domain every member answers to', edit: (doc) => (doc.pki = { extra_domains: ['etcd.example.org'] }) },
];
for (const row of notShared) {
  test(`accepted, nothing shared: ${row.name}`, (t) => {
    t.notThrows(() => load(edit(row.edit)));
  });
}

// No application role may reach the tool's own keys: the record of managed users decides deletions.

const TOOL_KEYS_HINT =
  'keep application keys outside etcd-kvm/, e.g. a prefix such as /app1/: a role that can write the record could make the tool delete users';
const reachesTool = (field: 'key' | 'prefix', value: string) =>
  `roles.app.permissions[0].${field}: ${field} ${JSON.stringify(value)} reaches the tool's own keys under etcd-kvm/ (among them its record of the users and roles it manages) — ${TOOL_KEYS_HINT}`;
const permissionRows: { permission: Record<string, string>; problems: string[] }[] = [
  { permission: { prefix: 'etcd', access: 'readwrite' }, problems: [reachesTool('prefix', 'etcd')] },
  { permission: { prefix: 'e', access: 'write' }, problems: [reachesTool('prefix', 'e')] },
  { permission: { prefix: 'etcd-kvm', access: 'readwrite' }, problems: [reachesTool('prefix', 'etcd-kvm')] },
  { permission: { prefix: 'etcd-kvm/', access: 'read' }, problems: [reachesTool('prefix', 'etcd-kvm/')] },
  { permission: { prefix: 'etcd-kvm/managed-access/x', access: 'write' }, problems: [reachesTool('prefix', 'etcd-kvm/managed-access/x')] },
  { permission: { key: 'etcd-kvm/managed-access', access: 'write' }, problems: [reachesTool('key', 'etcd-kvm/managed-access')] },
  { permission: { key: 'etcd-kvm/auth-probe', access: 'read' }, problems: [reachesTool('key', 'etcd-kvm/auth-probe')] },
  {
    permission: { prefix: '', access: 'readwrite' },
    problems: ['roles.app.permissions[0].prefix: String must contain at least 1 character(s)'],
  },
  // Next to the prefix, not in it: "." sorts before "/", "0" right after.
  { permission: { prefix: 'etcd-kvm.', access: 'readwrite' }, problems: [] },
  { permission: { prefix: 'etcd-kvm0', access: 'readwrite' }, problems: [] },
  { permission: { key: 'etcd-kvm', access: 'readwrite' }, problems: [] },
  { permission: { prefix: '/app1/', access: 'readwrite' }, problems: [] },
];
for (const row of permissionRows) {
  test(`a role's permission on ${JSON.stringify(row.permission)}: ${row.problems.length > 0 ? 'refused' : 'accepted'}`, (t) => {
    const doc = edit((d) => (d.roles = { app: { permissions: [row.permission] } }));
    const problems = (() => {
      try {
        load(doc);
        return [];
      } catch (error) {
        return [...(error as InputError).problems];
      }
    })();
    t.deepEqual(problems, row.problems);
  });
}

test('releases over plain http are taken pinned (etcd.sha256) or from this machine; https always', (t) => {
  const digest = 'a'.repeat(64);
  const accepted = [
    { version: 'v3.5.30', binaries: 'release', release_url: 'http://mirror.example/etcd', sha256: digest },
    { version: 'v3.5.30', binaries: 'release', release_url: 'http://127.0.0.1:8999/releases' },
    { version: 'v3.5.30', binaries: 'release', release_url: 'http://localhost/releases' },
    { version: 'v3.5.30', binaries: 'release', release_url: 'https://mirror.example/etcd' },
    // Image binaries read no release at all.
    { release_url: 'http://mirror.example/etcd' },
  ];
  for (const etcd of accepted) t.notThrows(() => load(edit((doc) => (doc.etcd = etcd))), JSON.stringify(etcd));
});

test("a runbook page's URL may have a query (a wiki's ?title=): the alerts add their #anchor after it", (t) => {
  const inventory = load(edit((doc) => (doc.monitoring = { runbook_url: 'https://wiki.example/index.php?title=etcd' })));
  t.is(inventory.monitoring.runbookUrl, 'https://wiki.example/index.php?title=etcd');
});
