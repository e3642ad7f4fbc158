import test from 'ava';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { SnapshotBucket } from '../../tasks/backup/s3.ts';
import { Secret } from '../../tasks/core/secret.ts';
import { sigV4Refusal } from '../helpers/sigv4-check.ts';

/**
 * The lab's S3 (test/helpers/s3-server.ts) checks every request's Signature Version 4 with AWS's own signer,
 * as real S3 does; the members' agent (botocore's signer) and the tool (AWS's SDK) both get through it with
 * object names real S3 signs differently from a naive encoder: a space, '+', '/', ':' and a non-ASCII letter.
 * The agent's hand-written signer, before botocore's, encoded such a path twice and was refused by real S3.
 */

const ACCOUNT = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' };
const BUCKET = 'etcd-backups';
const PREFIXES = ['prod etcd', 'team+prod/etcd', 'café/etcd', 'lab'];

let server: ChildProcess;
let endpoint = '';
let dir = '';
let refusals = '';

test.before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-s3-signatures-'));
  server = spawn(process.execPath, ['--import', 'tsx', 'test/helpers/s3-server.ts', dir, BUCKET], { stdio: ['ignore', 'pipe', 'pipe'] });
  server.stderr!.on('data', (data: Buffer) => {
    refusals += data.toString();
  });
  const [port] = (await once(server.stdout!, 'data')) as [Buffer];
  endpoint = `http://127.0.0.1:${port.toString().trim()}`;
});

test.after.always(async () => {
  if (server?.exitCode === null) {
    server.kill('SIGTERM');
    await once(server, 'exit');
  }
  rmSync(dir, { recursive: true, force: true });
});

/** The bucket through the tool's own client (AWS's SDK). */
const toolBucket = () =>
  new SnapshotBucket({
    endpoint,
    bucket: BUCKET,
    objectPrefix: 'unused',
    region: '',
    caCert: '',
    accessKey: new Secret(ACCOUNT.accessKeyId),
    secretKey: new Secret(ACCOUNT.secretAccessKey),
  });

interface RoundTrip {
  listed?: string[];
  key?: string;
  after_delete?: string[];
  error?: string;
}

function agentRoundTrip(prefix: string, secret = ACCOUNT.secretAccessKey): RoundTrip {
  const argument = {
    s3: { endpoint, bucket: BUCKET, region: '', ca_file: '' },
    access_key: ACCOUNT.accessKeyId,
    secret_key: secret,
    name: `${prefix}-2026-11-28T08:00:00Z`,
    list_prefix: `${prefix}-`,
  };
  const done = spawnSync('python3', ['test/helpers/agent-harness.py', 's3-roundtrip', JSON.stringify(argument)], { encoding: 'utf8' });
  if (done.status !== 0) throw new Error(`agent-harness s3-roundtrip: ${done.stderr}`);
  return JSON.parse(done.stdout) as RoundTrip;
}

test.serial("the agent's requests verify under AWS's signer for prefixes with a space, '+', '/' and a non-ASCII letter", (t) => {
  for (const prefix of PREFIXES) {
    const name = `${prefix}-2026-11-28T08:00:00Z`;
    const answers = agentRoundTrip(prefix);
    t.is(answers.error, undefined, prefix);
    t.deepEqual(answers.listed, [`${name}.dump`, `${name}.key`], prefix);
    t.is(answers.key, 'sealed key', prefix);
    t.deepEqual(answers.after_delete, [`${name}.dump`], prefix);
  }
  t.is(refusals, '', 'the gate refused none of them');
});

test.serial("the tool's S3 client reads what the agent wrote, through the same check", async (t) => {
  const bucket = toolBucket();
  try {
    for (const prefix of PREFIXES) {
      const name = `${prefix}-2026-11-28T08:00:00Z.dump`;
      t.deepEqual(await bucket.list(`${prefix}-`), [name], prefix);
      t.is((await bucket.get(name, { name: 'test', bytes: 1 << 20 })).toString(), 'sealed dump'.repeat(1000), prefix);
      await bucket.put(`${prefix}-written-by-the-tool`, Buffer.from('x'));
      await bucket.delete(`${prefix}-written-by-the-tool`);
    }
  } finally {
    bucket.close();
  }
  t.is(refusals, '', 'the gate refused none of them');
});

/** The gate's refusals arrive on its stderr while a synchronous harness run holds this event loop. */
async function refusalsMatching(pattern: RegExp): Promise<string> {
  const deadline = Date.now() + 5_000;
  while (!pattern.test(refusals) && Date.now() < deadline) await sleep(50);
  return refusals;
}

function signedByAgent(request: { method: string; name: string; payload_hash: string; now: string; base?: string }) {
  const argument = {
    base: `${endpoint}/${BUCKET}`,
    region: 'us-east-1',
    access_key: ACCOUNT.accessKeyId,
    secret_key: ACCOUNT.secretAccessKey,
    ...request,
  };
  const done = spawnSync('python3', ['test/helpers/agent-harness.py', 'sign', JSON.stringify(argument)], { encoding: 'utf8' });
  if (done.status !== 0) throw new Error(`agent-harness sign: ${done.stderr}`);
  return JSON.parse(done.stdout) as { url: string; headers: Record<string, string> };
}

test.serial('a request signed with another secret, or sent with another body than it signed, is refused and not done', async (t) => {
  const answers = agentRoundTrip('forged', 'not the secret');
  t.regex(answers.error ?? '', /HTTP 403 .*SignatureDoesNotMatch/);
  t.regex(await refusalsMatching(/forged/), /refused PUT \/etcd-backups\/forged-2026-11-28T08%3A00%3A00Z\.key: SignatureDoesNotMatch/);
  const now = new Date()
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d+Z$/, 'Z');
  const sha256 = createHash('sha256').update('what was signed').digest('hex');
  const { url, headers } = signedByAgent({ method: 'PUT', name: 'swapped.dump', payload_hash: sha256, now });
  const answer = await fetch(url, { method: 'PUT', headers, body: 'what was sent' });
  t.is(answer.status, 403);
  t.regex(await answer.text(), /XAmzContentSHA256Mismatch/);
  const bucket = toolBucket();
  try {
    t.deepEqual(await bucket.list('forged'), [], 'nothing forged was stored');
    t.deepEqual(await bucket.list('swapped'), [], 'nothing swapped was stored');
  } finally {
    bucket.close();
  }
});

test('the check refuses a path encoded twice, an edited query or method, and an unknown access key', async (t) => {
  // One request, as the agent signs it.
  const { url, headers } = signedByAgent({
    method: 'GET',
    base: 'http://127.0.0.1:9000/b',
    name: 'team+prod/café etcd-1.dump',
    payload_hash: 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
    now: '20261128T080000Z',
  });
  const target = new URL(url).pathname;
  t.is(target, '/b/team%2Bprod/caf%C3%A9%20etcd-1.dump');
  const arrived = (path: string) => ({ method: 'GET', target: path, headers: { ...headers, host: '127.0.0.1:9000' } });
  t.is(await sigV4Refusal(arrived(target), ACCOUNT), undefined);
  // What the hand-written signer did: the encoded path encoded again.
  t.regex((await sigV4Refusal(arrived(target.replace(/%/g, '%25')), ACCOUNT)) ?? '', /SignatureDoesNotMatch/);
  t.regex((await sigV4Refusal(arrived(`${target}?versionId=1`), ACCOUNT)) ?? '', /SignatureDoesNotMatch/);
  t.regex((await sigV4Refusal({ ...arrived(target), method: 'DELETE' }, ACCOUNT)) ?? '', /SignatureDoesNotMatch/);
  const stranger = { ...ACCOUNT, accessKeyId: 'SOMEONE' };
  t.regex((await sigV4Refusal(arrived(target), stranger)) ?? '', /unknown access key/);
});
