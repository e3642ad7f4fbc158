import test from 'ava';
import { ConnectionPool, PoolClosed } from '../../tasks/remote/pool.ts';
import type { SshConnection } from '../../tasks/remote/ssh.ts';

/** A stand-in connection that records whether it was closed. */
function fakeConnection() {
  const state = { closed: false };
  const close = () => {
    state.closed = true;
  };
  const connection = { close, client: { once: () => undefined } } as unknown as SshConnection;
  return { connection, state };
}

test('after the run ends no connection is opened: work still in flight cannot keep the process alive', async (t) => {
  const pool = new ConnectionPool({ forgetFailures: true });
  let opened = 0;
  // One connection still being opened when the run ends: closed as soon as it is there.
  let finish: (ssh: SshConnection) => void = () => undefined;
  const late = fakeConnection();
  const pending = pool.get('member etcd-1', () => {
    opened++;
    return new Promise<SshConnection>((resolve) => (finish = resolve));
  });
  const closing = pool.closeAll();
  finish(late.connection);
  await pending;
  await closing;
  t.true(late.state.closed);
  const open = async () => {
    opened++;
    return fakeConnection().connection;
  };
  await t.throwsAsync(pool.get('member etcd-2', open), { instanceOf: PoolClosed });
  t.is(opened, 1);
});
