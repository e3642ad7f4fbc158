import test from 'ava';
import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { KiB, MiB } from '../../tasks/core/limits.ts';
import { Secret } from '../../tasks/core/secret.ts';
import { masterKeyFromHex, newDataKey, sealStream } from '../../tasks/backup/format.ts';
import { manifestObjectName, renderManifest } from '../../tasks/backup/manifest.ts';
import * as source from '../../tasks/backup/source.ts';
import type { RestoreSettings } from '../../tasks/inventory/model.ts';
import { baseDocument, load } from '../helpers/inventory.ts';

/**
 * What a restore downloads from the bucket is capped: whoever writes there (a compromised member with
 * the bucket's keys) must not make the control node hold or store without end. A stand-in S3 serves
 * one snapshot whose body the test chooses, announced or not.
 */

const DUMP = 'lab-2024-05-01T10:00:00Z.dump';
const KEY = 'lab-2024-05-01T10:00:00Z.key';
/** The smallest etcd.space_quota the inventory takes. */
const QUOTA = 16 * MiB;

interface Body {
  bytes: number;
  /** Say the length up front (Content-Length), or send it chunked. */
  announced: boolean;
  /** What the body is made of, repeated to `bytes` (filler bytes when absent). */
  content?: Buffer;
}

/** How many bytes of the object the stand-in has sent, by name: a cap must stop the download, not only fail it at the end. */
type Sent = Map<string, number>;

function answer(objects: Record<string, Body>, sent: Sent) {
  return (request: IncomingMessage, response: ServerResponse) => {
    const url = new URL(request.url ?? '/', 'http://s3');
    if (url.searchParams.get('list-type') === '2') {
      const contents = Object.entries(objects)
        .map(([key, body]) => `<Contents><Key>${key}</Key><Size>${body.bytes}</Size></Contents>`)
        .join('');
      response.writeHead(200, { 'content-type': 'application/xml' });
      response.end(
        `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>backups</Name><Prefix>lab</Prefix><KeyCount>${Object.keys(objects).length}</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>${contents}</ListBucketResult>`,
      );
      return;
    }
    const name = decodeURIComponent(url.pathname.replace(/^\/backups\//, ''));
    const body = objects[name];
    if (!body) {
      response.writeHead(404, { 'content-type': 'application/xml' });
      response.end('<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code><Message>no such key</Message></Error>');
      return;
    }
    response.writeHead(200, {
      'content-type': 'application/octet-stream',
      ...(body.announced ? { 'content-length': String(body.bytes) } : {}),
    });
    sent.set(name, 0);
    const chunk = body.content ?? Buffer.alloc(64 * KiB, 1);
    // With backpressure, so that what was sent is what the client took (give or take the socket's buffers).
    const more = () => {
      while (!response.destroyed && sent.get(name)! < body.bytes) {
        const piece = chunk.subarray(0, Math.min(chunk.length, body.bytes - sent.get(name)!));
        sent.set(name, sent.get(name)! + piece.length);
        if (!response.write(piece)) return void response.once('drain', more);
      }
      if (!response.destroyed) response.end();
    };
    more();
  };
}

async function bucketServing(objects: Record<string, Body>): Promise<{ server: Server; endpoint: string; sent: Sent }> {
  const sent: Sent = new Map();
  const server = createServer(answer(objects, sent));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, sent };
}

const MASTER_HEX = 'ab'.repeat(32);
const MASTER = masterKeyFromHex(MASTER_HEX);
const CLUSTER = '6f1c1f4e-3a7b-4c1e-9d55-0b5a0c3f9e21';
/** A real .key object, and one real sealed chunk of its data key: a dump of any length is that chunk repeated. */
const { dataKey, sealedKey } = newDataKey(MASTER);
const oneMiB = (async function* () {
  yield Buffer.alloc(MiB, 7);
})();
const SEALED_CHUNK = Buffer.from((await sealStream(oneMiB, dataKey).next()).value!);
const sealedDump = (chunks: number, announced: boolean): Body => ({
  bytes: chunks * SEALED_CHUNK.length,
  announced,
  content: SEALED_CHUNK,
});
const keyObject: Body = { bytes: sealedKey.length, announced: true, content: sealedKey };

function restoreFrom(endpoint: string, backupTimestamp: string): RestoreSettings {
  const { restore } = load(baseDocument());
  return {
    ...restore,
    enabled: true,
    backupTimestamp: backupTimestamp,
    encryptionKey: new Secret(MASTER_HEX),
    s3: {
      ...restore.s3,
      endpoint,
      bucket: 'backups',
      objectPrefix: 'lab',
      accessKey: new Secret('access'),
      secretKey: new Secret('secret'),
    },
  };
}

/** `backupTimestamp`: the snapshot named (unauthenticated unless its manifest verifies); empty: the cluster's latest. */
async function restoring(objects: Record<string, Body>, backupTimestamp = '2024-05-01T10:00:00Z') {
  const { server, endpoint, sent } = await bucketServing(objects);
  const snapshots = new source.SnapshotSource(restoreFrom(endpoint, backupTimestamp), QUOTA, () => CLUSTER);
  return {
    source: snapshots,
    sent,
    async close() {
      await snapshots.close();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** Names in a regular expression. */
const literally = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
/** The cap for QUOTA: 16 MiB past the quota, plus the encryption's overhead. */
const CAP_SAID = '\\d+ bytes \\(about 32 MiB\\) \\(cap s3-snapshot\\)';

test('the snapshot cap follows etcd.space_quota: the largest database, a margin past the quota, and the encryption overhead', (t) => {
  const cap = source.snapshotCap(QUOTA);
  t.is(cap.name, 's3-snapshot');
  t.true(cap.bytes > QUOTA + 16 * MiB && cap.bytes < QUOTA + 17 * MiB, `${cap.bytes}`);
  const largest = source.snapshotCap();
  t.true(largest.bytes > 10 * 1024 * MiB && largest.bytes < 10.01 * 1024 * MiB, `${largest.bytes}`);
});

test('a snapshot the server announces as larger than the cap is refused before it is downloaded', async (t) => {
  const bucket = await restoring({ [DUMP]: sealedDump(64, true), [KEY]: keyObject });
  try {
    const error = await t.throwsAsync(bucket.source.open());
    t.regex(
      error.message,
      new RegExp(
        `^s3 bucket backups at http://127\\.0\\.0\\.1:\\d+: ${literally(DUMP)} \\(${64 * SEALED_CHUNK.length} bytes, as the server announces it\\) exceeded ${CAP_SAID}$`,
      ),
    );
    t.true(bucket.sent.get(DUMP)! < 8 * MiB, `${bucket.sent.get(DUMP)} bytes sent`);
  } finally {
    await bucket.close();
  }
});

test('a snapshot sent without its length is counted as it comes, and the download stops at the cap', async (t) => {
  const bucket = await restoring({ [DUMP]: sealedDump(128, false), [KEY]: keyObject });
  try {
    const error = await t.throwsAsync(bucket.source.open());
    t.regex(error.message, new RegExp(`^s3 bucket backups at http://127\\.0\\.0\\.1:\\d+: ${literally(DUMP)} exceeded ${CAP_SAID}$`));
    t.true(bucket.sent.get(DUMP)! < 64 * MiB, `${bucket.sent.get(DUMP)} bytes sent`);
  } finally {
    await bucket.close();
  }
});

test('a .key object larger than a key is refused, naming its cap', async (t) => {
  const bucket = await restoring({ [DUMP]: sealedDump(1, true), [KEY]: { bytes: 1 * MiB, announced: false } });
  try {
    const error = await t.throwsAsync(bucket.source.open());
    t.regex(
      error.message,
      new RegExp(`^s3 bucket backups at http://127\\.0\\.0\\.1:\\d+: ${literally(KEY)} exceeded 4 KiB \\(cap s3-key-object\\)$`),
    );
  } finally {
    await bucket.close();
  }
});

// Which snapshot a restore takes: this cluster's own, by its manifest; and one whose objects were replaced is refused.

const manifestOf = (dump: string, dumpSha256: string): Body => {
  const text = renderManifest(
    {
      cluster: CLUSTER,
      object: dump,
      revision: 7,
      dumpSha256,
      keySha256: createHash('sha256').update(sealedKey).digest('hex'),
      taken: '2024-05-01T10:00:00Z',
      by: 'etcd-2',
    },
    MASTER,
  );
  return { bytes: Buffer.byteLength(text), announced: true, content: Buffer.from(text) };
};
const PLANTED = 'lab-2099-01-01T00:00:00Z.dump';
const sha256Of = (body: Body) => {
  const hash = createHash('sha256');
  for (let sent = 0; sent < body.bytes; sent += body.content!.length) hash.update(body.content!.subarray(0, body.bytes - sent));
  return hash.digest('hex');
};

test("the latest is this cluster's own: a copy named 2099 is passed over and named", async (t) => {
  const dump = sealedDump(2, true);
  const manifest = manifestOf(DUMP, sha256Of(dump));
  const bucket = await restoring(
    {
      [DUMP]: dump,
      [KEY]: keyObject,
      [manifestObjectName(DUMP)]: manifest,
      [PLANTED]: dump,
      [PLANTED.replace('.dump', '.key')]: keyObject,
      [manifestObjectName(PLANTED)]: manifest,
    },
    '',
  );
  try {
    const chosen = await bucket.source.choose();
    t.is(chosen.name, DUMP);
    t.regex(
      chosen.provenance,
      new RegExp(
        `^this cluster's latest, taken by etcd-2 at revision 7; ignored 1 other snapshot\\(s\\) that are not this cluster's own: ${literally(PLANTED)} \\(dated 2099-01-01T00:00:00Z, after this machine's clock \\(\\S+Z\\)\\)$`,
      ),
    );
  } catch (error) {
    t.fail(String(error));
  } finally {
    await bucket.close();
  }
});

test('no snapshot of this cluster: refused, naming what was passed over and how to restore one anyway', async (t) => {
  const bucket = await restoring({ [DUMP]: sealedDump(1, true), [KEY]: keyObject }, '');
  try {
    const error = await t.throwsAsync(bucket.source.choose());
    t.regex(
      error.message,
      /^no backup of this cluster under lab- in s3 bucket backups at \S+; ignored 1 other snapshot\(s\) .*: lab-2024-05-01T10:00:00Z\.dump \(no manifest: .*\)\. To restore one of those anyway, name it with restore\.backup_timestamp/,
    );
    // Named, it is taken, and the plan says what it is.
    const named = await restoring({ [DUMP]: sealedDump(1, true), [KEY]: keyObject });
    try {
      t.regex(
        (await named.source.choose()).provenance,
        /^UNAUTHENTICATED: no manifest: .*; restored only because restore\.backup_timestamp names it$/,
      );
    } finally {
      await named.close();
    }
  } finally {
    await bucket.close();
  }
});

test('a dump replaced under its real manifest is refused before any member sees it', async (t) => {
  const bucket = await restoring(
    { [DUMP]: sealedDump(2, true), [KEY]: keyObject, [manifestObjectName(DUMP)]: manifestOf(DUMP, 'f'.repeat(64)) },
    '',
  );
  try {
    t.is((await bucket.source.choose()).name, DUMP);
    const error = await t.throwsAsync(bucket.source.open());
    t.is(error.message, `${DUMP} or its .key is not what its manifest recorded: replaced in the bucket, or damaged`);
  } finally {
    await bucket.close();
  }
});
