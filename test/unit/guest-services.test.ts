import test from 'ava';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse } from 'yaml';
import { Secret } from '../../tasks/core/secret.ts';
import { parseEnvironmentFile } from '../../tasks/render/etcd.ts';
import { renderMember } from '../../tasks/render/member.ts';
import { FORMAT_IF_BLANK } from '../../tasks/render/guest/data-volume.ts';
import { baseDocument, load, problemsOf, type Doc } from '../helpers/inventory.ts';
import { fileOf, firstBootStep, writeFilesOf } from '../helpers/render.ts';

/** The semantic content of every optional guest feature's rendered configuration. */

const pki = {
  caCert: 'CA-PEM\n',
  members: new Map([['etcd-1', { caCert: 'CA-PEM\n', cert: 'CERT-PEM\n', key: new Secret('KEY-PEM\n') }]]),
  identity: { cluster: 'test', adoptsUnmarked: false },
};

function withDefaults(settings: Record<string, unknown>, change?: (doc: Doc) => void): Doc {
  const doc = baseDocument();
  Object.assign(doc.defaults as object, settings);
  change?.(doc);
  return doc;
}

function userDataOf(doc: Doc) {
  const inventory = load(doc);
  const files = renderMember({ inventory, pki, firstStart: 'new' }, inventory.members[0]!);
  const userData = fileOf(files, 'user-data');
  return {
    config: parse(userData.content, { version: '1.1' }),
    writes: writeFilesOf(userData.content),
    display: userData.display,
    content: userData.content,
  };
}

const FLUENTBIT = {
  enabled: true,
  etcd_tag: 'etcd.lab',
  node_exporter_tag: 'node-exporter.lab',
  forward: {
    domain: 'logs.example.org',
    port: 24224,
    hostname: 'etcd-lab',
    shared_key: 'fb-shared-secret',
    ca_cert: '-----BEGIN CERTIFICATE-----\nFWD\n-----END CERTIFICATE-----\n',
  },
};
const VAULT = {
  enabled: true,
  vault_address: 'https://vault.example.org:8200',
  vault_ca_cert: '-----BEGIN CERTIFICATE-----\nVAULT\n-----END CERTIFICATE-----\n',
  auth_method: { config: { role_id: 'role-id-secret', secret_id: 'secret-id-secret' } },
};
const CHRONY = {
  enabled: true,
  servers: [{ url: 'ntp1.example.org', options: ['iburst', 'prefer'] }],
  pools: [{ url: 'pool.example.org', options: ['iburst', 'maxsources 3'] }],
  makestep: { threshold: 1.5, limit: 3 },
};

test('data volume: formatted only when blank, mounted on the data dir before etcd, which requires it', (t) => {
  const { config, writes } = userDataOf(withDefaults({ data_volume_size_gib: 2 }));
  t.is(config.fs_setup, undefined, "not fs_setup: cloud-init 22.4 forces mkfs on a whole disk with partition 'none'");
  t.deepEqual(config.bootcmd, [[...FORMAT_IF_BLANK, '/dev/vdb', 'etcd-data']]);
  t.deepEqual(config.mounts, [['LABEL=etcd-data', '/var/lib/etcd', 'ext4', 'defaults,nofail,x-systemd.before=etcd.service', '0', '2']]);
  t.regex(writes.get('/etc/systemd/system/etcd.service')!.content, /^RequiresMountsFor=\/var\/lib\/etcd$/m);
  // Ownership and mode are set after the mount, on the data disk's root.
  t.deepEqual(config.runcmd[0], ['install', '-d', '-o', 'etcd', '-g', 'etcd', '-m', '0700', '/var/lib/etcd']);

  const without = userDataOf(withDefaults({}));
  t.is(without.config.bootcmd, undefined);
  t.is(without.config.mounts, undefined);
  t.notRegex(without.writes.get('/etc/systemd/system/etcd.service')!.content, /RequiresMountsFor/);
});

test('chrony: the inventory servers and pools with their options, makestep, chrony restarted', (t) => {
  const { config, writes } = userDataOf(withDefaults({ chrony: CHRONY }));
  const conf = writes.get('/etc/chrony/chrony.conf')!;
  t.is(conf.permissions, '0644');
  const directives = conf.content.split('\n').filter((line) => line && !line.startsWith('#'));
  t.true(directives.includes('server ntp1.example.org iburst prefer'));
  t.true(directives.includes('pool pool.example.org iburst maxsources 3'));
  t.true(directives.includes('makestep 1.5 3'));
  // Only the inventory's sources: Debian's default pool is gone.
  t.deepEqual(directives.filter((line) => /^(server|pool) /.test(line)).length, 2);
  t.true(firstBootStep(config.runcmd, 'restart', 'chrony.service') >= 0);
  t.false(userDataOf(withDefaults({})).writes.has('/etc/chrony/chrony.conf'));
});

test('node exporter: enabled on every member; the upstream binary gets a unit of the same name', (t) => {
  const packaged = userDataOf(withDefaults({}));
  t.true(firstBootStep(packaged.config.runcmd, 'enable', 'prometheus-node-exporter.service') >= 0);
  // Debian's package already runs it with its own configuration: started, not restarted.
  t.true(firstBootStep(packaged.config.runcmd, 'start', 'prometheus-node-exporter.service') >= 0);
  t.false(packaged.writes.has('/etc/systemd/system/prometheus-node-exporter.service'));
  const upstream = userDataOf(withDefaults({ install_dependencies: true }));
  const unit = upstream.writes.get('/etc/systemd/system/prometheus-node-exporter.service')!.content;
  t.regex(
    unit,
    /^ExecStart=\/usr\/local\/bin\/node_exporter --web.listen-address=:9100 --collector.textfile.directory=\/var\/lib\/prometheus\/node-exporter$/m,
  );
  t.regex(unit, /^User=prometheus$/m);
});

test('fluent-bit: journal inputs tagged for etcd and the node exporter, forward output with TLS and the shared key in a root-only file', (t) => {
  const { config, writes, display } = userDataOf(withDefaults({ fluentbit: FLUENTBIT }));
  const file = writes.get('/etc/fluent-bit/etcd-kvm.yaml')!;
  t.like(file, { permissions: '0600', owner: 'root:root' });
  const fluentbit = parse(file.content);
  t.deepEqual(
    fluentbit.pipeline.inputs.map((input: Record<string, string>) => [input.name, input.tag, input.systemd_filter]),
    [
      ['systemd', 'etcd.lab', '_SYSTEMD_UNIT=etcd.service'],
      ['systemd', 'node-exporter.lab', '_SYSTEMD_UNIT=prometheus-node-exporter.service'],
    ],
  );
  t.deepEqual(fluentbit.pipeline.outputs, [
    {
      name: 'forward',
      match: '*',
      host: 'logs.example.org',
      port: 24224,
      self_hostname: 'etcd-lab',
      shared_key: 'fb-shared-secret',
      tls: 'on',
      'tls.verify': 'on',
      'tls.ca_file': '/etc/fluent-bit/forward-ca.crt',
    },
  ]);
  t.is(writes.get('/etc/fluent-bit/forward-ca.crt')!.content, FLUENTBIT.forward.ca_cert);
  t.regex(
    writes.get('/etc/systemd/system/fluent-bit.service.d/etcd-kvm.conf')!.content,
    /^ExecStart=\/opt\/fluent-bit\/bin\/fluent-bit -c \/etc\/fluent-bit\/etcd-kvm.yaml$/m,
  );
  t.true(firstBootStep(config.runcmd, 'enable', 'fluent-bit.service') >= 0);
  t.true(firstBootStep(config.runcmd, 'restart', 'fluent-bit.service') >= 0);
  t.false(display.includes('fb-shared-secret'));
});

const DYNAMIC_ETCD = {
  enabled: true,
  source: 'etcd',
  etcd: {
    key_prefix: '/fluent-bit/lab/',
    endpoints: ['10.0.0.5:2379', '10.0.0.6:2379'],
    ca_certificate: '-----BEGIN CERTIFICATE-----\nCONFIG-ETCD-CA\n-----END CERTIFICATE-----\n',
    client: { certificate: '-----BEGIN CERTIFICATE-----\nUPDATER\n-----END CERTIFICATE-----\n', key: 'updater-client-key' },
  },
};
const DYNAMIC_GIT = {
  enabled: true,
  source: 'git',
  git: {
    repo: 'git@git.example.org:ops/fluent-bit.git',
    ref: 'main',
    path: 'lab',
    trusted_gpg_keys: [
      '-----BEGIN PGP PUBLIC KEY BLOCK-----\nKEY-A\n-----END PGP PUBLIC KEY BLOCK-----\n',
      '-----BEGIN PGP PUBLIC KEY BLOCK-----\nKEY-B\n-----END PGP PUBLIC KEY BLOCK-----\n',
    ],
    auth: { client_ssh_key: 'git-deploy-key', server_ssh_fingerprint: 'git.example.org ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGitServerKey' },
  },
};
const UPDATER_OWNER = 'fluent-bit-updater:fluent-bit-updater';
const runs = (config: { runcmd: string[][] }, command: string) => config.runcmd.some((argv) => argv.join(' ') === command);

test('fluent-bit dynamic config from etcd: the watcher syncs the prefix with a client certificate, fluent-bit runs the synced entry point and hot-reloads', (t) => {
  const { config, writes, display } = userDataOf(withDefaults({ fluentbit: FLUENTBIT, fluentbit_dynamic_config: DYNAMIC_ETCD }));
  const updater = writes.get('/etc/fluent-bit-config-updater/config.yml')!;
  t.like(updater, { permissions: '0400', owner: UPDATER_OWNER });
  t.deepEqual(parse(updater.content), {
    log_level: 'info',
    filesystem: { path: '/etc/fluent-bit/dynamic', files_permission: '700', directories_permission: '700' },
    etcd_client: {
      prefix: '/fluent-bit/lab/',
      endpoints: ['10.0.0.5:2379', '10.0.0.6:2379'],
      connection_timeout: '60s',
      request_timeout: '60s',
      retry_interval: '4s',
      retries: 15,
      auth: {
        ca_cert: '/etc/fluent-bit-config-updater/etcd/ca.crt',
        client_cert: '/etc/fluent-bit-config-updater/etcd/client.crt',
        client_key: '/etc/fluent-bit-config-updater/etcd/client.key',
      },
    },
    notification_command: ['/usr/local/bin/reload-fluent-bit-configs'],
    notification_command_retries: 30,
  });
  t.is(writes.get('/etc/fluent-bit-config-updater/etcd/ca.crt')!.content, DYNAMIC_ETCD.etcd.ca_certificate);
  t.is(writes.get('/etc/fluent-bit-config-updater/etcd/client.crt')!.content, DYNAMIC_ETCD.etcd.client.certificate);
  t.like(writes.get('/etc/fluent-bit-config-updater/etcd/client.key'), {
    permissions: '0400',
    owner: UPDATER_OWNER,
    content: 'updater-client-key',
  });
  t.false(writes.has('/etc/fluent-bit-config-updater/etcd/password.yml'));
  t.false(display.includes('updater-client-key'));

  // The updater runs as its own user, which may only ask for fluent-bit's reload.
  t.deepEqual(config.users.map((user: { name: string }) => user.name).slice(1), ['fluent-bit-updater']);
  const unit = writes.get('/etc/systemd/system/fluent-bit-config-updater.service')!.content;
  t.regex(unit, /^User=fluent-bit-updater$/m);
  t.regex(unit, /^Environment=CONFS_AUTO_UPDATER_CONFIG_FILE=\/etc\/fluent-bit-config-updater\/config.yml$/m);
  t.regex(unit, /^ExecStart=\/usr\/local\/bin\/fluent-bit-config-updater$/m);
  t.regex(unit, /^StartLimitIntervalSec=0$/m, 'retried until etcd answers, however long that takes');
  t.like(writes.get('/etc/sudoers.d/etcd-kvm-fluent-bit-updater'), {
    permissions: '0440',
    content: '# Managed by etcd-kvm.\nfluent-bit-updater ALL=(root) NOPASSWD: /usr/bin/systemctl reload fluent-bit.service\n',
  });
  t.regex(
    writes.get('/usr/local/bin/reload-fluent-bit-configs')!.content,
    /^ {2}exec sudo --non-interactive \/usr\/bin\/systemctl reload fluent-bit.service$/m,
  );

  const dropIn = writes.get('/etc/systemd/system/fluent-bit.service.d/etcd-kvm.conf')!.content;
  t.regex(dropIn, /^ExecStart=\/opt\/fluent-bit\/bin\/fluent-bit --enable-hot-reload -c \/etc\/fluent-bit\/dynamic\/index.conf$/m);
  t.regex(dropIn, /^ExecReload=\/bin\/kill -HUP \$MAINPID$/m);
  t.true(runs(config, 'install -d -o fluent-bit-updater -g fluent-bit-updater -m 0700 /etc/fluent-bit/dynamic'));
  t.true(firstBootStep(config.runcmd, 'enable', 'fluent-bit-config-updater.service') >= 0);
  t.true(firstBootStep(config.runcmd, 'restart', 'fluent-bit-config-updater.service') >= 0);

  // Without dynamic configuration none of it is there and fluent-bit runs the static pipeline.
  const plain = userDataOf(withDefaults({ fluentbit: FLUENTBIT }));
  t.false([...plain.writes.keys()].some((path) => path.includes('fluent-bit-config-updater')));
  t.regex(
    plain.writes.get('/etc/systemd/system/fluent-bit.service.d/etcd-kvm.conf')!.content,
    /^ExecStart=\/opt\/fluent-bit\/bin\/fluent-bit -c \/etc\/fluent-bit\/etcd-kvm.yaml$/m,
  );
});

test('fluent-bit dynamic config from etcd with a password: a YAML credentials file only the updater reads', (t) => {
  const client = { username: 'fluent-bit', password: 'pw: with # yaml' };
  const { writes, content } = userDataOf(
    withDefaults({ fluentbit: FLUENTBIT, fluentbit_dynamic_config: { ...DYNAMIC_ETCD, etcd: { ...DYNAMIC_ETCD.etcd, client } } }),
  );
  const password = writes.get('/etc/fluent-bit-config-updater/etcd/password.yml')!;
  t.like(password, { permissions: '0400', owner: UPDATER_OWNER });
  t.deepEqual(parse(password.content), client);
  t.deepEqual(parse(writes.get('/etc/fluent-bit-config-updater/config.yml')!.content).etcd_client.auth, {
    ca_cert: '/etc/fluent-bit-config-updater/etcd/ca.crt',
    password_auth: '/etc/fluent-bit-config-updater/etcd/password.yml',
  });
  t.false(writes.has('/etc/fluent-bit-config-updater/etcd/client.key'));
  t.is(content.split(client.password).length, 2, 'the password is written once, in its 0400 file');
});

test('fluent-bit dynamic config with credentials from Vault: agent templates render them for the updater and restart it', (t) => {
  const dynamic = {
    ...DYNAMIC_ETCD,
    etcd: {
      ...DYNAMIC_ETCD.etcd,
      client: { certificate: DYNAMIC_ETCD.etcd.client.certificate },
      vault_agent_secret_path: 'kv/data/etcd/fluent-bit',
    },
  };
  const { config, writes } = userDataOf(withDefaults({ fluentbit: FLUENTBIT, vault_agent: VAULT, fluentbit_dynamic_config: dynamic }));
  t.deepEqual(parse(writes.get('/etc/fluent-bit-config-updater/config.yml')!.content).etcd_client.auth, {
    ca_cert: '/etc/fluent-bit-config-updater/etcd/ca.crt',
    client_cert: '/etc/fluent-bit-config-updater/vault/client.crt',
    client_key: '/etc/fluent-bit-config-updater/vault/client.key',
  });
  const restart = { command: ['sudo', '--non-interactive', '/usr/bin/systemctl', 'restart', 'fluent-bit-config-updater.service'] };
  t.deepEqual(JSON.parse(writes.get('/etc/vault-agent.d/fluent-bit-config-updater.json')!.content), {
    template: [
      {
        destination: '/etc/fluent-bit-config-updater/vault/client.crt',
        perms: '0640',
        contents: '{{ with secret "kv/data/etcd/fluent-bit" }}{{ .Data.data.certificate }}{{ end }}\n',
      },
      {
        destination: '/etc/fluent-bit-config-updater/vault/client.key',
        perms: '0640',
        contents: '{{ with secret "kv/data/etcd/fluent-bit" }}{{ .Data.data.key }}{{ end }}\n',
        exec: restart,
      },
    ],
  });
  // Vault writes into a setgid directory of the updater's group; it may restart the updater, nothing else.
  t.true(runs(config, 'install -d -o vault -g fluent-bit-updater -m 2750 /etc/fluent-bit-config-updater/vault'));
  t.regex(
    writes.get('/etc/sudoers.d/etcd-kvm-fluent-bit-updater')!.content,
    /^vault ALL=\(root\) NOPASSWD: \/usr\/bin\/systemctl restart fluent-bit-config-updater.service$/m,
  );
  t.false(writes.has('/etc/fluent-bit-config-updater/etcd/client.key'));
  t.false(writes.has('/etc/fluent-bit-config-updater/etcd/client.crt'));

  const byPassword = userDataOf(
    withDefaults({
      fluentbit: FLUENTBIT,
      vault_agent: VAULT,
      fluentbit_dynamic_config: { ...dynamic, etcd: { ...dynamic.etcd, client: {} } },
    }),
  );
  const [template] = JSON.parse(byPassword.writes.get('/etc/vault-agent.d/fluent-bit-config-updater.json')!.content).template;
  t.is(template.destination, '/etc/fluent-bit-config-updater/vault/password.yml');
  t.is(
    template.contents,
    '{{ with secret "kv/data/etcd/fluent-bit" }}username: {{ .Data.data.username }}\npassword: {{ .Data.data.password }}\n{{ end }}',
  );
});

test('fluent-bit dynamic config from git: gitsync every minute, deploy key only the updater reads, pinned server key, trusted GPG keys', (t) => {
  const { config, writes, display } = userDataOf(withDefaults({ fluentbit: FLUENTBIT, fluentbit_dynamic_config: DYNAMIC_GIT }));
  t.deepEqual(parse(writes.get('/etc/fluent-bit-config-updater/config.yml')!.content), {
    log_level: 'info',
    filesystem: { path: '/etc/fluent-bit/dynamic', files_permission: '700', directories_permission: '700' },
    git: {
      repo: 'git@git.example.org:ops/fluent-bit.git',
      ref: 'main',
      path: 'lab',
      auth: {
        ssh_key: '/etc/fluent-bit-config-updater/git/client_ssh_key',
        known_key: '/etc/fluent-bit-config-updater/git/server_ssh_fingerprint',
      },
      accepted_signatures: '/etc/fluent-bit-config-updater/git/trusted_gpg_keys',
    },
    notification_command: ['/usr/local/bin/reload-fluent-bit-configs'],
    notification_command_retries: 30,
  });
  t.like(writes.get('/etc/fluent-bit-config-updater/git/client_ssh_key'), {
    permissions: '0400',
    owner: UPDATER_OWNER,
    content: 'git-deploy-key',
  });
  t.is(
    writes.get('/etc/fluent-bit-config-updater/git/server_ssh_fingerprint')!.content,
    `${DYNAMIC_GIT.git.auth.server_ssh_fingerprint}\n`,
  );
  t.is(writes.get('/etc/fluent-bit-config-updater/git/trusted_gpg_keys/key0.asc')!.content, DYNAMIC_GIT.git.trusted_gpg_keys[0]!);
  t.is(writes.get('/etc/fluent-bit-config-updater/git/trusted_gpg_keys/key1.asc')!.content, DYNAMIC_GIT.git.trusted_gpg_keys[1]!);
  const service = writes.get('/etc/systemd/system/fluent-bit-config-updater.service')!.content;
  t.regex(service, /^Type=oneshot$/m);
  t.regex(service, /^Environment=GITSYNC_CONFIG_FILE=\/etc\/fluent-bit-config-updater\/config.yml$/m);
  t.regex(writes.get('/etc/systemd/system/fluent-bit-config-updater.timer')!.content, /^OnCalendar=\*-\*-\* \*:\*:00$/m);
  t.true(firstBootStep(config.runcmd, 'enable', 'fluent-bit-config-updater.timer') >= 0);
  t.true(firstBootStep(config.runcmd, 'restart', 'fluent-bit-config-updater.timer') >= 0);
  t.false(display.includes('git-deploy-key'));
  // No trusted keys: unsigned commits are accepted, as in the module, and no key directory is configured.
  const unsigned = userDataOf(
    withDefaults({ fluentbit: FLUENTBIT, fluentbit_dynamic_config: { ...DYNAMIC_GIT, git: { ...DYNAMIC_GIT.git, trusted_gpg_keys: [] } } }),
  );
  t.is(parse(unsigned.writes.get('/etc/fluent-bit-config-updater/config.yml')!.content).git.accepted_signatures, undefined);
});

test('install_dependencies with dynamic configuration: the updater release is fetched and checked against its sums', (t) => {
  const etcdSource = userDataOf(
    withDefaults(
      { install_dependencies: true, fluentbit: FLUENTBIT, fluentbit_dynamic_config: DYNAMIC_ETCD },
      (doc) => (doc.etcd = { version: 'v3.5.17' }),
    ),
  );
  const script = etcdSource.writes.get('/usr/local/sbin/etcd-kvm-install-upstream')!.content;
  t.true(
    script.includes(
      'https://github.com/Ferlab-Ste-Justine/configurations-auto-updater/releases/download/v0.5.0/configurations-auto-updater_0.5.0_linux_amd64.tar.gz',
    ),
  );
  t.true(
    script.includes(
      'https://github.com/Ferlab-Ste-Justine/configurations-auto-updater/releases/download/v0.5.0/configurations-auto-updater_0.5.0_SHA256SUMS',
    ),
  );
  t.true(script.includes('verify updater.sha256sums configurations-auto-updater_0.5.0_linux_amd64.tar.gz'));
  t.regex(script, /^install -m 0755 "\$work\/configurations-auto-updater" \/usr\/local\/bin\/fluent-bit-config-updater$/m);
  const gitSource = userDataOf(
    withDefaults(
      { install_dependencies: true, fluentbit: FLUENTBIT, fluentbit_dynamic_config: DYNAMIC_GIT },
      (doc) => (doc.etcd = { version: 'v3.5.17' }),
    ),
  );
  t.true(
    gitSource.writes
      .get('/usr/local/sbin/etcd-kvm-install-upstream')!
      .content.includes('/Ferlab-Ste-Justine/gitsync/releases/download/v0.1.0/gitsync_0.1.0_linux_amd64.tar.gz'),
  );
  const without = userDataOf(
    withDefaults({ install_dependencies: true, fluentbit: FLUENTBIT }, (doc) => (doc.etcd = { version: 'v3.5.17' })),
  );
  t.false(without.writes.get('/usr/local/sbin/etcd-kvm-install-upstream')!.content.includes('Ferlab'));
});

test('vault agent: AppRole auto-auth from files only the vault user reads, address and CA, token sink', (t) => {
  const { config, writes, display } = userDataOf(withDefaults({ vault_agent: VAULT }));
  const agent = JSON.parse(writes.get('/etc/vault-agent.d/agent.json')!.content);
  t.deepEqual(agent.vault, { address: 'https://vault.example.org:8200', ca_cert: '/etc/vault-agent.d/vault-ca.crt' });
  t.deepEqual(agent.auto_auth.method, [
    {
      type: 'approle',
      config: {
        role_id_file_path: '/etc/vault-agent.d/role-id',
        secret_id_file_path: '/etc/vault-agent.d/secret-id',
        remove_secret_id_file_after_reading: false,
      },
    },
  ]);
  t.deepEqual(agent.auto_auth.sink, [{ type: 'file', config: { path: '/run/vault-agent/token', mode: 0o640 } }]);
  t.deepEqual(writes.get('/etc/vault-agent.d/role-id'), {
    path: '/etc/vault-agent.d/role-id',
    permissions: '0400',
    owner: 'vault:vault',
    defer: true,
    content: 'role-id-secret',
  });
  t.deepEqual(writes.get('/etc/vault-agent.d/secret-id'), {
    path: '/etc/vault-agent.d/secret-id',
    permissions: '0400',
    owner: 'vault:vault',
    defer: true,
    content: 'secret-id-secret',
  });
  t.is(writes.get('/etc/vault-agent.d/vault-ca.crt')!.content, VAULT.vault_ca_cert);
  t.regex(
    writes.get('/etc/systemd/system/vault-agent.service')!.content,
    /^ExecStart=\/usr\/bin\/vault agent -config=\/etc\/vault-agent.d$/m,
  );
  t.true(firstBootStep(config.runcmd, 'enable', 'vault-agent.service') >= 0);
  t.true(firstBootStep(config.runcmd, 'restart', 'vault-agent.service') >= 0);
  t.false(display.includes('role-id-secret') || display.includes('secret-id-secret'));
});

test('install_dependencies: pinned upstream etcd and node exporter checked against their release sums, vendor apt repos for enabled services', (t) => {
  const { config, writes } = userDataOf(
    withDefaults(
      { install_dependencies: true, fluentbit: FLUENTBIT, vault_agent: VAULT, chrony: CHRONY },
      (doc) => (doc.etcd = { version: 'v3.5.17' }),
    ),
  );
  t.deepEqual(
    config.users.slice(1).map((user: { name: string; system: boolean }) => [user.name, user.system]),
    [
      ['etcd', true],
      ['prometheus', true],
      ['vault', true],
    ],
  );
  t.deepEqual(config.packages, ['curl', 'ca-certificates', 'qemu-guest-agent', 'chrony']);
  const installer = writes.get('/usr/local/sbin/etcd-kvm-install-upstream')!;
  t.is(installer.permissions, '0755');
  const script = installer.content;
  t.true(script.includes('https://github.com/etcd-io/etcd/releases/download/v3.5.17/etcd-v3.5.17-linux-amd64.tar.gz'));
  t.true(script.includes('https://github.com/etcd-io/etcd/releases/download/v3.5.17/SHA256SUMS'));
  t.true(script.includes('verify etcd.sha256sums etcd-v3.5.17-linux-amd64.tar.gz'));
  t.true(script.includes('https://github.com/prometheus/node_exporter/releases/download/v1.8.2/node_exporter-1.8.2.linux-amd64.tar.gz'));
  t.regex(script, /apt-get install -y --no-install-recommends fluent-bit=3\.1\.9 vault=1\.17\.6-1$/m);
  t.regex(script, /^echo 'deb \[signed-by=\/etc\/apt\/keyrings\/hashicorp.asc\] https:\/\/apt.releases.hashicorp.com bookworm main'/m);
  // Installed before anything is configured or started; etcd then runs from /usr/local/bin.
  t.deepEqual(config.runcmd[0], ['/usr/local/sbin/etcd-kvm-install-upstream']);
  t.regex(writes.get('/etc/systemd/system/etcd.service')!.content, /^ExecStart=\/usr\/local\/bin\/etcd$/m);
  t.regex(userDataOf(withDefaults({})).writes.get('/etc/systemd/system/etcd.service')!.content, /^ExecStart=\/usr\/bin\/etcd$/m);
  t.false(userDataOf(withDefaults({})).writes.has('/usr/local/sbin/etcd-kvm-install-upstream'));
});

test('password mode: clients are not asked for certificates; restore mode: etcd waits for a restored data dir', (t) => {
  const password = userDataOf(
    withDefaults({}, (doc) => {
      doc.etcd = { client_cert_auth: false };
      doc.members[0]!.authentication_bootstrap = { bootstrap: true, root_password: 'pw' };
    }),
  );
  const env = parseEnvironmentFile(password.writes.get('/etc/etcd/etcd.env')!.content);
  t.is(env.get('ETCD_CLIENT_CERT_AUTH'), 'false');
  t.false(env.has('ETCD_TRUSTED_CA_FILE'));
  // The peer port never trusts the clients' CA: members only, in password mode too.
  t.is(env.get('ETCD_PEER_TRUSTED_CA_FILE'), '/etc/etcd/tls/peer-ca.crt');
  t.false(password.content.includes('pw\n'), 'the root password is not written into the guest');

  // Distinctive values: a one-letter key would be found anywhere, and its absence would prove nothing.
  const s3 = {
    endpoint: 'http://127.0.0.1:9000',
    bucket: 'bkt',
    object_prefix: 'etcd',
    access_key: 'AKIA-E2E-ACCESS-KEY',
    secret_key: 'S3-SECRET-KEY-NEVER-IN-A-GUEST',
  };
  const restoring = userDataOf(withDefaults({ restore: { enabled: true, s3, encryption_key: 'ab'.repeat(32) } }));
  t.regex(restoring.writes.get('/etc/systemd/system/etcd.service')!.content, /^ConditionPathExists=\/var\/lib\/etcd\/member$/m);
  // S3 credentials never reach the guest: the tool fetches the snapshot itself.
  for (const value of [s3.endpoint, s3.access_key, s3.secret_key]) t.false(restoring.content.includes(value), value);
});

test('secrets in the guest are never in a world-readable file', (t) => {
  const secrets = ['KEY-PEM', 'fb-shared-secret', 'role-id-secret', 'secret-id-secret', 'updater-client-key', 'git-deploy-key'];
  for (const dynamic of [DYNAMIC_ETCD, DYNAMIC_GIT]) {
    const { writes } = userDataOf(
      withDefaults({ fluentbit: FLUENTBIT, fluentbit_dynamic_config: dynamic, vault_agent: VAULT, install_dependencies: true }),
    );
    for (const file of writes.values()) {
      const holdsSecret = secrets.some((secret) => file.content.includes(secret));
      if (holdsSecret) t.true(['0400', '0600'].includes(file.permissions ?? ''), `${file.path} is ${file.permissions}`);
    }
  }
});

// A value set under defaults is reported there once, with the members that took it.
test('invalid combinations of the optional features are reported with their paths', (t) => {
  t.deepEqual(
    problemsOf(withDefaults({ chrony: { enabled: true } })).filter((p) => p.startsWith('members[0]') || p.startsWith('defaults.')),
    [
      'defaults.chrony.servers (inherited by etcd-1, etcd-2, etcd-3): is required by the enabled feature — list at least one server or pool (url and options)',
    ],
  );
  t.deepEqual(
    problemsOf(withDefaults({ fluentbit: { enabled: true, forward: { domain: 'logs' } } }))
      .filter((p) => p.startsWith('members[0]') || p.startsWith('defaults.'))
      .map((p) => p.split(' ')[0]),
    [
      'defaults.fluentbit.forward.port',
      'defaults.fluentbit.forward.hostname',
      'defaults.fluentbit.forward.shared_key',
      'defaults.fluentbit.etcd_tag',
      'defaults.fluentbit.node_exporter_tag',
    ],
  );
  t.deepEqual(
    problemsOf(withDefaults({ vault_agent: { enabled: true } }))
      .filter((p) => p.startsWith('members[0]') || p.startsWith('defaults.'))
      .map((p) => p.split(' ')[0]),
    [
      'defaults.vault_agent.vault_address',
      'defaults.vault_agent.auth_method.config.role_id',
      'defaults.vault_agent.auth_method.config.secret_id',
    ],
  );
  t.deepEqual(
    problemsOf(withDefaults({ restore: { enabled: true } }))
      .filter((p) => p.startsWith('members[0]') || p.startsWith('defaults.'))
      .map((p) => p.split(' ')[0]),
    [
      'defaults.restore.s3.endpoint',
      'defaults.restore.s3.bucket',
      'defaults.restore.s3.object_prefix',
      'defaults.restore.s3.access_key',
      'defaults.restore.s3.secret_key',
      'defaults.restore.encryption_key',
    ],
  );
  const s3 = { endpoint: 'http://127.0.0.1:9000', bucket: 'bkt', object_prefix: 'etcd', access_key: 'a', secret_key: 's' };
  const key = 'ab'.repeat(32);
  t.deepEqual(
    problemsOf(
      withDefaults(
        { restore: { enabled: true, s3, backup_timestamp: 'yesterday', encryption_key: 'abc' } },
        (doc) => ((doc.cluster as Record<string, unknown>).is_initializing = false),
      ),
    ).filter((p) => p.startsWith('members[0]') || p.startsWith('defaults.')),
    [
      'defaults.restore.enabled (inherited by etcd-1, etcd-2, etcd-3): requires cluster.is_initializing: true — a restore founds a new cluster from the snapshot; an existing cluster keeps its data',
      'defaults.restore.backup_timestamp (inherited by etcd-1, etcd-2, etcd-3): "yesterday" is not an RFC 3339 UTC timestamp — as in the object name, e.g. 2026-11-21T10:00:00Z; leave empty for the latest',
      "defaults.restore.encryption_key (inherited by etcd-1, etcd-2, etcd-3): is not 32 bytes of hex (64 hex digits) — etcd-backup's master key format",
    ],
  );
  t.deepEqual(problemsOf(withDefaults({}, (doc) => (doc.members[1]!.restore = { enabled: true, s3, encryption_key: key }))), [
    'members[0].restore.enabled (member etcd-1): is false while other members restore — all members restore from the same snapshot: set restore once under defaults',
    'members[2].restore.enabled (member etcd-3): is false while other members restore — all members restore from the same snapshot: set restore once under defaults',
  ]);
  t.deepEqual(
    problemsOf(
      withDefaults(
        { restore: { enabled: true, s3, encryption_key: key } },
        (doc) => (doc.members[2]!.restore = { enabled: true, s3: { ...s3, bucket: 'other' }, encryption_key: key }),
      ),
    ),
    [
      "members[2].restore (member etcd-3): differs from etcd-1's restore settings — all members restore from the same snapshot: set restore once under defaults",
    ],
  );
  t.deepEqual(problemsOf(withDefaults({ install_dependencies: true }, (doc) => (doc.etcd = { version: 'latest' }))), [
    'etcd.version: "latest" is not an etcd release tag — install_dependencies downloads that release: use a tag like v3.5.33',
  ]);
  t.deepEqual(problemsOf(withDefaults({}, (doc) => (doc.etcd = { stage_version: 'v3.5.30' }))), [
    'etcd.stage_version: needs etcd.binaries: release — only a release the tool installs can be staged ahead of its roll',
  ]);
  t.deepEqual(problemsOf(withDefaults({}, (doc) => (doc.etcd = { binaries: 'release', version: 'v3.5.16', stage_version: '3.5.30' }))), [
    'etcd.stage_version: "3.5.30" is not an etcd release tag — stage a release by its tag, like v3.5.33',
  ]);
  const staged = load(withDefaults({}, (doc) => (doc.etcd = { binaries: 'release', version: 'v3.5.16', stage_version: 'v3.5.30' })));
  t.deepEqual(staged.etcd.binaries === 'release' && staged.etcd.stageVersion, { major: 3, minor: 5, patch: 30 });
});

test('invalid fluent-bit dynamic configurations are reported with their paths', (t) => {
  const memberProblems = (settings: Record<string, unknown>) =>
    problemsOf(withDefaults(settings)).filter((p) => p.startsWith('members[0]') || p.startsWith('defaults.'));
  const fieldsOf = (settings: Record<string, unknown>) => memberProblems(settings).map((p) => p.split(' ')[0]);
  t.deepEqual(fieldsOf({ fluentbit_dynamic_config: { enabled: true, etcd: { client: { username: 'u', password: 'p' } } } }), [
    'members[0].fluentbit.enabled',
    'defaults.fluentbit_dynamic_config.etcd.key_prefix',
    'defaults.fluentbit_dynamic_config.etcd.endpoints',
    'defaults.fluentbit_dynamic_config.etcd.ca_certificate',
  ]);
  t.deepEqual(fieldsOf({ fluentbit: FLUENTBIT, fluentbit_dynamic_config: { enabled: true, source: 'git' } }), [
    'defaults.fluentbit_dynamic_config.git.repo',
    'defaults.fluentbit_dynamic_config.git.ref',
    'defaults.fluentbit_dynamic_config.git.auth.client_ssh_key',
    'defaults.fluentbit_dynamic_config.git.auth.server_ssh_fingerprint',
  ]);
  const etcdWith = (client: Record<string, unknown>, vault_agent_secret_path = '') => ({
    fluentbit: FLUENTBIT,
    fluentbit_dynamic_config: { ...DYNAMIC_ETCD, etcd: { ...DYNAMIC_ETCD.etcd, client, vault_agent_secret_path } },
  });
  t.deepEqual(memberProblems(etcdWith({})), [
    'defaults.fluentbit_dynamic_config.etcd.client (inherited by etcd-1, etcd-2, etcd-3): has no credentials — give certificate and key, username and password, or vault_agent_secret_path',
  ]);
  t.deepEqual(memberProblems(etcdWith({ ...DYNAMIC_ETCD.etcd.client, username: 'u', password: 'p' })), [
    'defaults.fluentbit_dynamic_config.etcd.client (inherited by etcd-1, etcd-2, etcd-3): sets both a certificate and a username/password — the updater authenticates one way: keep certificate and key, or username and password',
  ]);
  t.deepEqual(fieldsOf(etcdWith({ certificate: DYNAMIC_ETCD.etcd.client.certificate })), [
    'defaults.fluentbit_dynamic_config.etcd.client.key',
  ]);
  t.deepEqual(fieldsOf(etcdWith({ username: 'u' })), ['defaults.fluentbit_dynamic_config.etcd.client.password']);
  t.deepEqual(memberProblems(etcdWith({ key: 'k' }, 'kv/data/x')), [
    'defaults.fluentbit_dynamic_config.etcd.vault_agent_secret_path (inherited by etcd-1, etcd-2, etcd-3): needs vault_agent.enabled: true — Vault agent renders the credentials from this secret',
    'defaults.fluentbit_dynamic_config.etcd.client (inherited by etcd-1, etcd-2, etcd-3): holds a key or password although vault_agent_secret_path is set — the credentials come from Vault: leave client.key and client.password empty (set client.certificate only to choose certificate auth)',
  ]);
  t.notThrows(() => load(withDefaults({ ...etcdWith({}, 'kv/data/x'), vault_agent: VAULT })));
  t.notThrows(() => load(withDefaults(etcdWith(DYNAMIC_ETCD.etcd.client))));
});

test('the data disk guard, run for real on a file: formats a blank disk once, never a disk that holds a file system', (t) => {
  const disk = join(mkdtempSync(join(tmpdir(), 'etcd-kvm-disk-')), 'vdb.img');
  writeFileSync(disk, Buffer.alloc(16 * 1024 * 1024));
  const guard = () => spawnSync(FORMAT_IF_BLANK[0], [...FORMAT_IF_BLANK.slice(1), disk, 'etcd-data'], { encoding: 'utf8' });
  const uuid = () => spawnSync('blkid', ['-p', '-s', 'UUID', '-o', 'value', disk], { encoding: 'utf8' }).stdout.trim();
  t.is(guard().status, 0);
  const first = uuid();
  t.regex(first, /^[0-9a-f-]{36}$/);
  t.regex(spawnSync('blkid', ['-p', '-s', 'LABEL', '-o', 'value', disk], { encoding: 'utf8' }).stdout, /^etcd-data$/m);
  t.is(guard().status, 0);
  t.is(uuid(), first, 'the second boot leaves the file system as it is');
});
