import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { createServer, request as forward, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import S3rver from 's3rver';
import { sigV4Refusal } from './sigv4-check.ts';

/**
 * s3rver in its own process, because the tests drive the tool with spawnSync, which would block an
 * in-process server's event loop, behind a gate that checks every request's Signature Version 4 with AWS's
 * own signer as real S3 does (s3rver checks none): a request that does not verify, or whose body is not
 * the one its signed x-amz-content-sha256 names, gets S3's 403 and never reaches s3rver. Each refusal is
 * printed on stderr. Prints the gate's port on stdout once listening; stops on SIGTERM.
 * Usage: node --import tsx test/helpers/s3-server.ts DIRECTORY BUCKET
 */
const [directory, bucket] = process.argv.slice(2);
if (!directory || !bucket) throw new Error('usage: s3-server.ts DIRECTORY BUCKET');
/** s3rver's built-in account, the only one it knows. */
const ACCOUNT = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' };

const server = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory, configureBuckets: [{ name: bucket, configs: [] }] });
const { port: upstream } = await server.run();

async function bodyOf(incoming: IncomingMessage): Promise<Buffer> {
  const pieces: Buffer[] = [];
  for await (const piece of incoming) pieces.push(piece as Buffer);
  return Buffer.concat(pieces);
}

function refuse(answer: ServerResponse, why: string) {
  answer.writeHead(403, { 'content-type': 'application/xml' });
  answer.end(`<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SignatureDoesNotMatch</Code><Message>${why}</Message></Error>`);
}

const gate = createServer(async (incoming, answer) => {
  const body = await bodyOf(incoming);
  const target = incoming.url ?? '/';
  const claimed = incoming.headers['x-amz-content-sha256'];
  const refusal =
    (await sigV4Refusal({ method: incoming.method ?? 'GET', target, headers: incoming.headers }, ACCOUNT)) ??
    (typeof claimed === 'string' && /^[0-9a-f]{64}$/.test(claimed) && createHash('sha256').update(body).digest('hex') !== claimed
      ? 'XAmzContentSHA256Mismatch: the body is not the one the request signed'
      : undefined);
  if (refusal) {
    console.error(`s3: refused ${incoming.method} ${target}: ${refusal}`);
    refuse(answer, refusal);
    return;
  }
  const onward = forward(
    { host: '127.0.0.1', port: upstream, method: incoming.method, path: target, headers: incoming.headers },
    (reply) => {
      answer.writeHead(reply.statusCode ?? 502, reply.headers);
      reply.pipe(answer);
    },
  );
  onward.on('error', (error) => {
    answer.writeHead(502);
    answer.end(String(error));
  });
  onward.end(body);
});
gate.listen(0, '127.0.0.1');
await once(gate, 'listening');
console.log((gate.address() as AddressInfo).port);
process.on('SIGTERM', () => {
  gate.close();
  void server.close().then(() => process.exit(0));
});
