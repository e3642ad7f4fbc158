import test from 'ava';
import { parse } from 'yaml';
import { loadInventory } from '../../tasks/inventory/load.ts';
import { ENABLE_UNLESS_ENABLED } from '../../tasks/render/guest/fragment.ts';
import type { RenderedFile } from '../../tasks/render/member.ts';
import { fileOf, firstBootStep, renderWithPki, writeFilesOf } from '../helpers/render.ts';

/**
 * One description of what a member contains: the guest step converges exactly what cloud-init writes
 * and starts at first boot, for every inventory we ship (the all-services one turns every feature on).
 * Both are held against what each inventory's members must contain, written out here by hand: the two
 * come from the same fragments, so comparing them with each other alone would miss a file gone from both.
 */

/** A file every member holds: its path, mode, owner, whether it is a secret (never shown), and the unit it restarts. */
type Held = [path: string, mode: number, owner: string, secret: boolean, notify?: string];

const ETCD_FILES: Held[] = [
  ['/etc/etcd/tls/ca.crt', 0o644, 'root:root', false, 'etcd.service'],
  ['/etc/etcd/tls/server.crt', 0o644, 'root:root', false],
  ['/etc/etcd/tls/server.key', 0o400, 'etcd:etcd', true],
  ['/etc/etcd/tls/peer-ca.crt', 0o644, 'root:root', false, 'etcd.service'],
  ['/etc/etcd/tls/peer.crt', 0o644, 'root:root', false],
  ['/etc/etcd/tls/peer.key', 0o400, 'etcd:etcd', true],
  ['/etc/etcd/etcd.env', 0o644, 'root:root', false],
  ['/etc/systemd/system/etcd.service', 0o644, 'root:root', false, 'etcd.service'],
];
const CHRONY: Held = ['/etc/chrony/chrony.conf', 0o644, 'root:root', false, 'chrony.service'];
/** Every certificate's end, for the node exporter's textfile collector. */
const CERTIFICATE_METRICS: Held = ['/var/lib/prometheus/node-exporter/etcd-kvm-certificates.prom', 0o644, 'root:root', false];

const expected: Record<string, { files: Held[]; services: string[] }> = {
  'inventories/lab.yaml': {
    // node exporter from the image's package (no unit file of ours), chrony pointed at the lab's servers.
    files: [...ETCD_FILES, CHRONY, CERTIFICATE_METRICS],
    services: ['etcd.service', 'prometheus-node-exporter.service', 'chrony.service'],
  },
  'inventories/examples/all-services.yaml': {
    files: [
      ['/usr/local/sbin/etcd-kvm-install-upstream', 0o755, 'root:root', false],
      ...ETCD_FILES,
      ['/etc/systemd/system/prometheus-node-exporter.service', 0o644, 'root:root', false, 'prometheus-node-exporter.service'],
      CHRONY,
      ['/etc/fluent-bit/etcd-kvm.yaml', 0o600, 'root:root', true, 'fluent-bit.service'],
      ['/etc/fluent-bit/forward-ca.crt', 0o644, 'root:root', false, 'fluent-bit.service'],
      ['/etc/systemd/system/fluent-bit.service.d/etcd-kvm.conf', 0o644, 'root:root', false, 'fluent-bit.service'],
      // Private to the updater, but no secret in it: its credentials come from Vault agent.
      [
        '/etc/fluent-bit-config-updater/config.yml',
        0o400,
        'fluent-bit-updater:fluent-bit-updater',
        false,
        'fluent-bit-config-updater.service',
      ],
      ['/etc/fluent-bit-config-updater/etcd/ca.crt', 0o644, 'root:root', false, 'fluent-bit-config-updater.service'],
      ['/etc/vault-agent.d/fluent-bit-config-updater.json', 0o644, 'root:root', false, 'vault-agent.service'],
      ['/usr/local/bin/reload-fluent-bit-configs', 0o755, 'root:root', false],
      ['/etc/sudoers.d/etcd-kvm-fluent-bit-updater', 0o440, 'root:root', false],
      ['/etc/systemd/system/fluent-bit-config-updater.service', 0o644, 'root:root', false, 'fluent-bit-config-updater.service'],
      ['/etc/vault-agent.d/agent.json', 0o644, 'root:root', false, 'vault-agent.service'],
      ['/etc/vault-agent.d/role-id', 0o400, 'vault:vault', true, 'vault-agent.service'],
      ['/etc/vault-agent.d/secret-id', 0o400, 'vault:vault', true, 'vault-agent.service'],
      ['/etc/systemd/system/vault-agent.service', 0o644, 'root:root', false, 'vault-agent.service'],
      CERTIFICATE_METRICS,
    ],
    services: [
      'etcd.service',
      'prometheus-node-exporter.service',
      'chrony.service',
      'fluent-bit.service',
      'fluent-bit-config-updater.service',
      'vault-agent.service',
    ],
  },
};

for (const [path, wanted] of Object.entries(expected)) {
  test(`${path}: the guest step's files and services are the expected ones, and cloud-init's, file for file`, async (t) => {
    const { inventory, rendered, guests } = await renderWithPki(loadInventory(path));
    t.is(inventory.members.length, 3);
    for (const member of inventory.members) {
      const userData = fileOf(rendered.get(member.name), 'user-data').content;
      const written = writeFilesOf(userData);
      const guest = guests.get(member.name)!;
      // The guest step's files, in order, as they must be; the display form masks exactly the secrets.
      t.deepEqual(
        guest.files.map(
          (file): Held =>
            file.notify
              ? [file.path, file.mode, file.owner, file.display !== file.content, file.notify]
              : [file.path, file.mode, file.owner, file.display !== file.content],
        ),
        wanted.files,
        member.name,
      );
      t.deepEqual(
        guest.files.map((file) => file.secret),
        wanted.files.map(([, , , secret]) => secret),
        `${member.name}: secrets`,
      );
      // cloud-init's write_files, from the parsed user-data: the same paths, modes and owners, and no notify key.
      t.deepEqual(
        [...written.values()].map((file) => [
          file.path,
          Number.parseInt(file.permissions!, 8),
          file.owner ?? 'root:root',
          'notify' in file,
        ]),
        wanted.files.map(([path, mode, owner]) => [path, mode, owner, false]),
        `${member.name}: write_files`,
      );
      // By content: what cloud-init writes at first boot is what the guest step converges to.
      for (const file of guest.files) t.is(written.get(file.path)?.content, file.content, file.path);
      t.deepEqual(
        guest.services.map((service) => service.unit),
        wanted.services,
        `${member.name}: services`,
      );
      const argvs = (parse(userData, { version: '1.1' }) as { runcmd: string[][] }).runcmd;
      const runcmd = argvs.map((argv) => argv.join(' '));
      for (const service of guest.services) {
        const enable = firstBootStep(argvs, 'enable', service.unit);
        const configured = guest.files.some((file) => file.notify === service.unit);
        const start = firstBootStep(argvs, configured ? 'restart' : 'start', service.unit);
        t.true(
          enable >= 0 && start > enable,
          `${service.unit} is enabled if it is not, then ${configured ? 'restarted (its configuration was written)' : 'started'} at first boot`,
        );
        t.is(firstBootStep(argvs, configured ? 'start' : 'restart', service.unit), -1, `${service.unit}: one way of starting it`);
        t.true(runcmd.slice(0, start).includes('systemctl daemon-reload'), `${service.unit} starts after systemd read its units`);
      }
      t.is(runcmd.filter((command) => command === 'systemctl daemon-reload').length, 1, 'systemd reloads once');
      // One command enables them all (asking every unit's state at once); at most one starts and one restarts the others.
      t.is(argvs.filter((argv) => argv[0] === 'sh' && argv.includes(ENABLE_UNLESS_ENABLED)).length, 1);
      t.true(runcmd.filter((command) => command.startsWith('systemctl start ')).length <= 1);
      t.true(runcmd.filter((command) => /^systemctl restart (?!etcd\.service$)/.test(command)).length <= 1);
    }
  });
}

test('a joiner booted ahead of its turn starts its etcd at first boot without waiting for it (not a member yet), as existing; the others wait', async (t) => {
  const inventory = loadInventory('inventories/lab.yaml');
  const runcmdOf = (rendered: Map<string, RenderedFile[]>) =>
    (parse(fileOf(rendered.get('etcd-2'), 'user-data').content, { version: '1.1' }) as { runcmd: string[][] }).runcmd.map((argv) =>
      argv.join(' '),
    );
  const environmentOf = (rendered: Map<string, RenderedFile[]>) =>
    writeFilesOf(fileOf(rendered.get('etcd-2'), 'user-data').content).get('/etc/etcd/etcd.env')!.content;
  const joining = (await renderWithPki(inventory, 'booted-ahead')).rendered;
  t.is(runcmdOf(joining).at(-1), 'systemctl --no-block restart etcd.service');
  t.regex(environmentOf(joining), /^ETCD_INITIAL_CLUSTER_STATE="?existing"?$/m);
  for (const start of ['new', 'existing'] as const) {
    const rendered = (await renderWithPki(inventory, start)).rendered;
    t.is(runcmdOf(rendered).at(-1), 'systemctl restart etcd.service', start);
    t.regex(environmentOf(rendered), new RegExp(`^ETCD_INITIAL_CLUSTER_STATE="?${start}"?$`, 'm'));
  }
});

test('etcd starts at first boot last, after its data directory is prepared, and restarts one member at a time', async (t) => {
  const { inventory, rendered, guests } = await renderWithPki(loadInventory('inventories/lab.yaml'));
  const member = inventory.members[0]!;
  const argvs = (parse(fileOf(rendered.get(member.name), 'user-data').content, { version: '1.1' }) as { runcmd: string[][] }).runcmd;
  const runcmd = argvs.map((argv) => argv.join(' '));
  t.true(runcmd.indexOf('install -d -o etcd -g etcd -m 0700 /var/lib/etcd') < runcmd.indexOf('systemctl restart etcd.service'));
  t.true(runcmd.includes('systemctl restart etcd.service'));
  // Last: its start returns once the cluster has formed, and the first boot the deploy waits for ends with it.
  t.is(runcmd.at(-1), 'systemctl restart etcd.service');
  t.true(firstBootStep(argvs, 'restart', 'chrony.service') < runcmd.indexOf('systemctl restart etcd.service'));
  const etcd = guests.get(member.name)!.services.find((service) => service.unit === 'etcd.service')!;
  t.true(etcd.rolling);
  t.deepEqual(etcd.environment?.path, '/etc/etcd/etcd.env');
  const notified = guests
    .get(member.name)!
    .files.filter((file) => file.notify === 'etcd.service')
    .map((file) => file.path)
    .sort();
  // Certificates and keys are re-read by etcd per connection: replacing them restarts nothing. The CA bundles are read at start.
  t.deepEqual(notified, ['/etc/etcd/tls/ca.crt', '/etc/etcd/tls/peer-ca.crt', '/etc/systemd/system/etcd.service']);
});
