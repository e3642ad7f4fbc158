import test from 'ava';
import { Secret } from '../../tasks/core/secret.ts';
import { InputError } from '../../tasks/core/errors.ts';
import { clientBundle } from '../../tasks/pki/bundle.ts';
import { PkiStore } from '../../tasks/pki/store.ts';
import { inspectCertificate } from '../../tasks/pki/x509.ts';
import { renderWithPki } from '../helpers/render.ts';
import { baseDocument, load } from '../helpers/inventory.ts';

/** The client bundle: its files, modes and the environment etcdctl reads, parsed back. */

const withAlice = (passwordMode: boolean) => {
  const doc = baseDocument();
  doc.roles = { app1: { permissions: [{ prefix: '/app1/', access: 'readwrite' }] } };
  doc.users = { alice: passwordMode ? { roles: ['app1'], password: 'alice-pw' } : { roles: ['app1'] } };
  if (passwordMode) {
    doc.etcd = { client_cert_auth: false };
    doc.members[0]!.authentication_bootstrap = { bootstrap: true, root_password: 'root-pw' };
  }
  return load(doc);
};

/** What `set -a; . etcdctl.env` sets, for values the bundle writes (single-quoted or bare). */
const environmentOf = (text: string) =>
  new Map(
    text
      .split('\n')
      .filter((line) => line && !line.startsWith('#'))
      .map((line) => {
        const [, name, value] = /^([A-Z_]+)=(.*)$/.exec(line)!;
        return [name!, value!.replace(/^'(.*)'$/, '$1')] as const;
      }),
  );

test('certificate mode: ca.crt, the user certificate (CN = the user) and its key 0600, and an etcdctl.env naming every member and the three files', async (t) => {
  const { inventory } = await renderWithPki(withAlice(false));
  const files = clientBundle(inventory, new PkiStore(inventory.stateDir), 'alice', '/tmp/bundle dir');
  t.deepEqual(
    files.map((file) => `${file.name} ${file.mode.toString(8)}`),
    ['ca.crt 644', 'alice.crt 644', 'alice.key 600', 'etcdctl.env 644'],
  );
  const cert = files.find((file) => file.name === 'alice.crt')!.content as string;
  t.is(inspectCertificate(cert).commonName, 'alice');
  t.true(files.find((file) => file.name === 'alice.key')!.content instanceof Secret);
  const env = files.find((file) => file.name === 'etcdctl.env')!.content as string;
  t.deepEqual(Object.fromEntries(environmentOf(env)), {
    ETCDCTL_API: '3',
    ETCDCTL_ENDPOINTS: 'https://10.10.0.11:2379,https://10.10.0.12:2379,https://10.10.0.13:2379',
    ETCDCTL_CACERT: '/tmp/bundle dir/ca.crt',
    ETCDCTL_CERT: '/tmp/bundle dir/alice.crt',
    ETCDCTL_KEY: '/tmp/bundle dir/alice.key',
  });
  t.false(env.includes('PRIVATE KEY'));
});

test('password mode: no certificate, ETCDCTL_USER without the password; the password is in no file', async (t) => {
  const { inventory } = await renderWithPki(withAlice(true));
  const files = clientBundle(inventory, new PkiStore(inventory.stateDir), 'alice', '/tmp/b');
  t.deepEqual(
    files.map((file) => file.name),
    ['ca.crt', 'etcdctl.env'],
  );
  const env = environmentOf(files[1]!.content as string);
  t.is(env.get('ETCDCTL_USER'), 'alice');
  t.false(env.has('ETCDCTL_CERT'));
  t.false(files.some((file) => String(file.content).includes('alice-pw')));
});

test('an unknown user, or a state directory without the certificate yet, is bad input naming what to do', async (t) => {
  const { inventory } = await renderWithPki(withAlice(false));
  t.throws(() => clientBundle(inventory, new PkiStore(inventory.stateDir), 'mallory', '/tmp/b'), {
    instanceOf: InputError,
    message: /--user mallory: the inventory has no such user; users are root, alice/,
  });
  const fresh = withAlice(false);
  t.throws(() => clientBundle(fresh, new PkiStore('/nonexistent-state'), 'alice', '/tmp/b'), {
    instanceOf: InputError,
    message: /no CA yet: run the deploy first/,
  });
});
