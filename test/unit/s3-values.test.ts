import test from 'ava';
import { baseDocument, problemsOf } from '../helpers/inventory.ts';

/** restore.s3 and backup.endpoint, parsed for what they are: each row a value in, the problem (or none) out. */

const KEY = 'ab'.repeat(32);
const S3 = {
  endpoint: 'https://s3.example.org',
  bucket: 'etcd-backups',
  object_prefix: 'etcd/prod',
  region: 'eu-west-1',
  access_key: 'AK',
  secret_key: 'SK',
};

function problemsWith(s3: Record<string, string>, backupEndpoint?: string): string[] {
  const doc = baseDocument();
  (doc.defaults as Record<string, unknown>).restore = { s3: { ...S3, ...s3 }, encryption_key: KEY };
  if (backupEndpoint !== undefined) doc.backup = { endpoint: backupEndpoint };
  try {
    return problemsOf(doc);
  } catch (error) {
    if ((error as Error).message === 'inventory loaded, but problems were expected') return [];
    throw error;
  }
}

const rows: { name: string; s3?: Record<string, string>; backup?: string; problem?: RegExp }[] = [
  { name: 'sound values' },
  { name: 'a prefix with a space, "+", "/" and a non-ASCII letter', s3: { object_prefix: 'team+prod/café etcd' } },
  { name: 'an http endpoint with a port and a path', s3: { endpoint: 'http://10.0.0.5:9000/s3' } },
  {
    name: 'credentials in the endpoint, never echoed',
    s3: { endpoint: 'https://AKIA:hunter2@s3.example.org' },
    problem:
      /^defaults\.restore\.s3\.endpoint \(inherited by etcd-1, etcd-2, etcd-3\): carries credentials in its user-info \(the URL is not shown\)/,
  },
  { name: 'not a URL', s3: { endpoint: 's3.example.org' }, problem: /restore\.s3\.endpoint.*: is not a URL/ },
  { name: 'another scheme', s3: { endpoint: 'ftp://s3.example.org' }, problem: /restore\.s3\.endpoint.*: has the scheme ftp/ },
  { name: 'a query', s3: { endpoint: 'https://s3.example.org/?x=1' }, problem: /restore\.s3\.endpoint.*: has a query/ },
  { name: 'a fragment', s3: { endpoint: 'https://s3.example.org/#x' }, problem: /restore\.s3\.endpoint.*: has a fragment/ },
  { name: 'an upper-case bucket', s3: { bucket: 'Backups' }, problem: /restore\.s3\.bucket.*: "Backups" is not an S3 bucket name/ },
  { name: 'a bucket with a slash', s3: { bucket: 'a/b' }, problem: /restore\.s3\.bucket/ },
  { name: 'a bucket with "..", ', s3: { bucket: 'a..b' }, problem: /restore\.s3\.bucket/ },
  { name: 'a bucket named like an address', s3: { bucket: '10.0.0.5' }, problem: /restore\.s3\.bucket/ },
  {
    name: "a prefix with '..'",
    s3: { object_prefix: 'etcd/../other' },
    problem: /restore\.s3\.object_prefix.*: has an empty, '\.' or '\.\.' segment/,
  },
  { name: "a prefix starting with '/'", s3: { object_prefix: '/etcd' }, problem: /restore\.s3\.object_prefix.*: starts with '\/'/ },
  { name: 'a prefix with an empty segment', s3: { object_prefix: 'etcd//prod' }, problem: /restore\.s3\.object_prefix.*: has an empty/ },
  { name: "a prefix with '?'", s3: { object_prefix: 'etcd?x' }, problem: /restore\.s3\.object_prefix.*: has '\?', '#'/ },
  { name: 'a prefix of 901 bytes', s3: { object_prefix: 'é'.repeat(451) }, problem: /restore\.s3\.object_prefix.*: is 902 bytes/ },
  { name: 'a region with a slash', s3: { region: 'eu/west' }, problem: /restore\.s3\.region.*: "eu\/west" is not a region's name/ },
  { name: "a region with '..'", s3: { region: '..' }, problem: /restore\.s3\.region/ },
  {
    name: 'backup.endpoint with credentials',
    backup: 'http://user:pw@10.0.0.5:9000',
    problem: /^backup\.endpoint: carries credentials in its user-info/,
  },
  { name: 'backup.endpoint with a query', backup: 'http://10.0.0.5:9000?a', problem: /^backup\.endpoint: has a query/ },
];

for (const row of rows)
  test(`S3 settings: ${row.name}`, (t) => {
    const problems = problemsWith(row.s3 ?? {}, row.backup);
    if (!row.problem) {
      t.deepEqual(problems, []);
      return;
    }
    t.is(problems.length, 1, problems.join(' | '));
    t.regex(problems[0]!, row.problem);
    t.false(problems[0]!.includes('hunter2') || problems[0]!.includes(':pw@'), 'no credential shown');
  });
