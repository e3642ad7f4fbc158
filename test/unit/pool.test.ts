import test from 'ava';
import { ConnectionPool, PoolClosed, type Pooled } from '../../tasks/remote/pool.ts';

/** A stand-in connection that records whether it was closed. */
function fakeConnection() {
  const state = { closed: false };
  const close = () => {
    state.closed = true;
  };
  const connection: Pooled = { close, client: { once: () => undefined } };
  return { connection, state };
}

test('after the run ends no connection is opened: work still in flight cannot keep the process alive', async (t) => {
  const pool = new ConnectionPool<Pooled>({ forgetFailures: true });
  let opened = 0;
  // One connection still being opened when the run ends: closed as soon as it is there.
  let finish: (ssh: Pooled) => void = () => undefined;
  const late = fakeConnection();
  const pending = pool.get('member etcd-1', () => {
    opened++;
    return new Promise<Pooled>((resolve) => (finish = resolve));
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
