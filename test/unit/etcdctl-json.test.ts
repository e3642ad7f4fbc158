import test from 'ava';
import { leaderEndpoint, parseEndpointStatuses, valuesUnder } from '../helpers/etcdctl-json.ts';

// Shaped as etcdctl 3.4's `-w json` prints them (the helpers the e2e scenarios and the benches read them with).
const STATUSES = JSON.stringify([
  {
    Endpoint: 'https://192.168.150.11:2379',
    Status: { header: { cluster_id: 1, member_id: 1111, revision: 40, raft_term: 3 }, version: '3.4.23', leader: 2222 },
  },
  {
    Endpoint: 'https://192.168.150.12:2379',
    Status: { header: { cluster_id: 1, member_id: 2222, revision: 40, raft_term: 3 }, version: '3.4.23', leader: 2222 },
  },
]);

test('the leading endpoint is the one whose member names itself leader; none when no member does', (t) => {
  t.is(leaderEndpoint(parseEndpointStatuses(STATUSES)), 'https://192.168.150.12:2379');
  t.is(leaderEndpoint(parseEndpointStatuses(STATUSES.replaceAll('"leader":2222', '"leader":0'))), undefined);
});

test('the keys under a prefix, less the prefix, with their values as text; none listed: empty', (t) => {
  const b64 = (text: string) => Buffer.from(text).toString('base64');
  const listed = JSON.stringify({
    header: { revision: 41 },
    kvs: [{ key: b64('etcd-kvm/defrag/last/etcd-2'), create_revision: 9, mod_revision: 41, version: 2, value: b64('{"seconds":1}') }],
    count: 1,
  });
  t.deepEqual(valuesUnder(listed, 'etcd-kvm/defrag/last/'), { 'etcd-2': '{"seconds":1}' });
  // etcdctl leaves kvs out of an answer with no key.
  t.deepEqual(valuesUnder(JSON.stringify({ header: { revision: 41 } }), 'etcd-kvm/defrag/last/'), {});
});
