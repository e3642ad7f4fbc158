import test from 'ava';
import { parse } from 'yaml';
import { loadInventory } from '../../tasks/inventory/load.ts';
import { fileOf, renderWithPki, writeFilesOf } from '../helpers/render.ts';

/**
 * One description of what a member contains: the guest step converges exactly what cloud-init writes
 * and starts at first boot, for every inventory we ship (the all-services one turns every feature on).
 */

for (const path of ['inventories/lab.yaml', 'inventories/examples/all-services.yaml']) {
  test(`${path}: the guest step's files and services are cloud-init's, file for file`, async (t) => {
    const { inventory, rendered, guests } = await renderWithPki(loadInventory(path));
    for (const member of inventory.members) {
      const userData = fileOf(rendered.get(member.name), 'user-data').content;
      const written = writeFilesOf(userData);
      const guest = guests.get(member.name)!;
      t.deepEqual(guest.files.map((f) => f.path).sort(), [...written.keys()].sort(), member.name);
      for (const file of guest.files) {
        const first = written.get(file.path)!;
        t.is(first.content, file.content, file.path);
        t.is(Number.parseInt(first.permissions!, 8), file.mode, file.path);
        t.is(first.owner ?? 'root:root', file.owner, file.path);
        t.false('notify' in first, `${file.path}: notify is not a cloud-init key`);
        // The display form masks exactly the secrets.
        t.is(file.secret, file.display !== file.content, file.path);
      }
      const runcmd = (parse(userData, { version: '1.1' }) as { runcmd: string[][] }).runcmd.map((argv) => argv.join(' '));
      t.true(guest.services.length > 0);
      for (const service of guest.services) {
        const enable = runcmd.indexOf(`sh -c systemctl is-enabled --quiet "$1" || systemctl enable "$1" sh ${service.unit}`);
        const configured = guest.files.some((file) => file.notify === service.unit);
        const start = runcmd.indexOf(`systemctl ${configured ? 'restart' : 'start'} ${service.unit}`);
        t.true(enable >= 0 && start > enable, `${service.unit} is enabled if it is not, then ${configured ? 'restarted (its configuration was written)' : 'started'} at first boot`);
        t.true(runcmd.slice(0, start).includes('systemctl daemon-reload'), `${service.unit} starts after systemd read its units`);
      }
      t.is(runcmd.filter((command) => command === 'systemctl daemon-reload').length, 1, 'systemd reloads once');
    }
  });
}

test('etcd starts at first boot last, after its data directory is prepared, and restarts one member at a time', async (t) => {
  const { inventory, rendered, guests } = await renderWithPki(loadInventory('inventories/lab.yaml'));
  const member = inventory.members[0]!;
  const runcmd = (parse(fileOf(rendered.get(member.name), 'user-data').content, { version: '1.1' }) as { runcmd: string[][] }).runcmd.map((argv) => argv.join(' '));
  t.true(runcmd.indexOf('install -d -o etcd -g etcd -m 0700 /var/lib/etcd') < runcmd.indexOf('systemctl restart etcd.service'));
  t.true(runcmd.includes('systemctl restart etcd.service'));
  // Last: its start returns once the cluster has formed, and the first boot the deploy waits for ends with it.
  t.is(runcmd.at(-1), 'systemctl restart etcd.service');
  t.true(runcmd.indexOf('systemctl restart chrony.service') < runcmd.indexOf('systemctl restart etcd.service'));
  const etcd = guests.get(member.name)!.services.find((service) => service.unit === 'etcd.service')!;
  t.true(etcd.rolling);
  t.deepEqual(etcd.environment?.path, '/etc/etcd/etcd.env');
  const notified = guests.get(member.name)!.files.filter((file) => file.notify === 'etcd.service').map((file) => file.path).sort();
  // Certificates and keys are re-read by etcd per connection: replacing them restarts nothing. The CA bundles are read at start.
  t.deepEqual(notified, ['/etc/etcd/tls/ca.crt', '/etc/etcd/tls/peer-ca.crt', '/etc/systemd/system/etcd.service']);
});
