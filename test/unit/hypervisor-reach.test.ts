import test from 'ava';
import { hopsTo } from '../../tasks/remote/hypervisors.ts';
import { placementWarnings } from '../../tasks/inventory/placement.ts';
import { baseDocument, load, problemsOf } from '../helpers/inventory.ts';

/** Bastions (ssh -J): the chain of connections to a hypervisor, each hop checked against its own known_hosts. */

const withBastions = (jump: string[]) => {
  const doc = baseDocument();
  doc.bastions = {
    edge: { address: 'edge.example', port: 2200, user: 'jump', private_key: '/keys/edge', known_hosts: '/kh/edge' },
    inner: { address: '10.0.0.5', known_hosts: '/kh/inner' },
  };
  doc.hypervisors = { hv: { address: '10.1.0.7', jump, known_hosts: '/kh/hv', private_key: '/keys/hv' } };
  return doc;
};

test('no bastion: one hop, the hypervisor itself, keyed by its name', (t) => {
  const [hypervisor] = load(baseDocument()).hypervisors;
  t.deepEqual(
    hopsTo(hypervisor!).map((hop) => [hop.key, hop.target.label, `${hop.target.host}:${hop.target.port}`]),
    [['hv', 'hypervisor hv', '127.0.0.1:22']],
  );
});

test('two bastions: the first reached directly, each next hop through the one before, in the order given, each with its own user, key and known_hosts', (t) => {
  const [hypervisor] = load(withBastions(['edge', 'inner'])).hypervisors;
  const hops = hopsTo(hypervisor!);
  t.deepEqual(
    hops.map((hop) => [
      hop.key,
      hop.target.label,
      `${hop.target.user}@${hop.target.host}:${hop.target.port}`,
      hop.target.privateKeyPath ?? '(agent)',
      hop.target.knownHostsPath,
      hop.target.trustOnFirstUse,
    ]),
    [
      ['edge', 'bastion edge', 'jump@edge.example:2200', '/keys/edge', '/kh/edge', false],
      ['edge > inner', 'bastion inner', 'root@10.0.0.5:22', '(agent)', '/kh/inner', false],
      ['edge > inner > hv', 'hypervisor hv', 'root@10.1.0.7:22', '/keys/hv', '/kh/hv', false],
    ],
  );
});

test('a jump naming no bastion, or one twice, is bad input with its path', (t) => {
  t.deepEqual(problemsOf(withBastions(['edge', 'nowhere', 'edge'])), [
    'hypervisors.hv.jump[1]: names bastion nowhere, which bastions: does not define — define it under bastions: (bastions are edge, inner)',
    'hypervisors.hv.jump[2]: names bastion edge twice — each jump host once, in the order they are passed through',
  ]);
});

test('placement: a hypervisor whose loss alone loses quorum is warned about, one that cannot is not', (t) => {
  const placed = (hosts: string[]) => {
    const doc = baseDocument();
    doc.hypervisors = Object.fromEntries([...new Set(hosts)].map((host) => [host, { address: `${host}.example` }]));
    for (const [i, host] of hosts.entries()) doc.members[i]!.hypervisor = host;
    return placementWarnings(load(doc));
  };
  t.deepEqual(placed(['a', 'b', 'c']), []);
  t.deepEqual(placed(['a', 'a', 'b']), [
    '2 of 3 members are on hypervisor a (etcd-1, etcd-2): losing that host loses quorum (2 needed); put at most 1 member on any one hypervisor',
  ]);
  t.deepEqual(placed(['a', 'a', 'a']), [
    '3 of 3 members are on hypervisor a (etcd-1, etcd-2, etcd-3): losing that host loses quorum (2 needed); put at most 1 member on any one hypervisor',
  ]);
});
