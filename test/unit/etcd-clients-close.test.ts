import test from 'ava';
import { EtcdClients, EtcdClientsClosed, type TunnelConnections } from '../../tasks/etcd/client.ts';
import { loadInventory } from '../../tasks/inventory/load.ts';
import type { SshConnection } from '../../tasks/remote/ssh.ts';
import { Tunnel } from '../../tasks/remote/tunnel.ts';
import { unusedSshConnection } from '../helpers/unconnected.ts';

/**
 * A client still opening when the run closes its clients (a connection warmed for a step the run then
 * skipped) is closed as it comes: its listening tunnel would keep the process alive after the run.
 */

const inventory = loadInventory('inventories/lab.yaml');
const member = inventory.members[0]!;
const identity = () => ({ label: 'root certificate', caCert: '' });

test.serial('a client whose tunnel opens after close() is refused, and its tunnel is closed', async (t) => {
  t.is(member.reach, 'hypervisor');
  let connected!: (ssh: SshConnection) => void;
  const connection = new Promise<SshConnection>((resolve) => {
    connected = resolve;
  });
  const connections: TunnelConnections = { get: () => connection, unreachable: new Map() };
  const tunnels: { closed: boolean }[] = [];
  const open = Tunnel.open;
  Tunnel.open = async (...args) => {
    const tunnel = await open(...args);
    const seen = { closed: false };
    tunnels.push(seen);
    const close = tunnel.close.bind(tunnel);
    tunnel.close = () => {
      seen.closed = true;
      close();
    };
    return tunnel;
  };
  t.teardown(() => {
    Tunnel.open = open;
  });

  const clients = new EtcdClients(connections, inventory.etcd.clientPort, identity);
  const opening = clients.for(member);
  clients.close();
  connected(unusedSshConnection());
  await t.throwsAsync(opening, { instanceOf: EtcdClientsClosed });
  t.is(tunnels.length, 1, 'the tunnel was opened, after close()');
  t.true(tunnels[0]!.closed, 'and closed');
});

test.serial('after close() no client is opened at all', async (t) => {
  let asked = 0;
  const connections: TunnelConnections = {
    get: () => {
      asked++;
      return Promise.resolve(unusedSshConnection());
    },
    unreachable: new Map(),
  };
  const clients = new EtcdClients(connections, inventory.etcd.clientPort, identity);
  clients.close();
  await t.throwsAsync(clients.for(member), { instanceOf: EtcdClientsClosed });
  t.is(asked, 0);
});
