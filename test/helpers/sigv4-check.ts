import { SignatureV4 } from '@smithy/signature-v4';
import { createHash, createHmac } from 'node:crypto';

/**
 * Checks a request's AWS Signature Version 4 as S3 does, with AWS's own signer (@smithy/signature-v4, what the
 * AWS SDK for JavaScript signs with): the canonical request is rebuilt from what arrived (the path decoded and
 * encoded again by S3's rules, the query likewise, the headers the request says it signed), signed again with
 * the account's secret, and compared. Used by the lab's S3 (test/helpers/s3-server.ts), which refuses what
 * does not verify as real S3 would, and by the agent's unit tests.
 */

export interface ArrivedRequest {
  method: string;
  /** The request target as sent: the path and query, percent-encoded. */
  target: string;
  headers: Record<string, string | string[] | undefined>;
}

export interface Account {
  accessKeyId: string;
  secretAccessKey: string;
}

/** What the signer hands a hash: text or bytes. */
type Data = string | ArrayBuffer | ArrayBufferView;
const bytesOf = (data: Data) =>
  typeof data === 'string'
    ? data
    : data instanceof ArrayBuffer
      ? new Uint8Array(data)
      : new Uint8Array(data.buffer, data.byteOffset, data.byteLength);

/** node:crypto in the shape the signer asks for (a hash, or an HMAC when given a secret). */
class Sha256 {
  private readonly hash;
  constructor(secret?: Data) {
    this.hash = secret === undefined ? createHash('sha256') : createHmac('sha256', bytesOf(secret));
  }
  update(data: Data) {
    this.hash.update(bytesOf(data));
  }
  async digest(): Promise<Uint8Array> {
    return new Uint8Array(this.hash.digest());
  }
}

/** RFC 3986's unreserved characters stay; everything else is percent-encoded (S3's rule, as the SDK escapes). */
const escaped = (text: string) => encodeURIComponent(text).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);

function decoded(text: string): string | undefined {
  try {
    return decodeURIComponent(text);
  } catch {
    return undefined;
  }
}

const AUTHORIZATION =
  /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/s3\/aws4_request, ?SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})$/;

/** Why the request's signature does not verify, or undefined when it does. */
export async function sigV4Refusal(request: ArrivedRequest, account: Account): Promise<string | undefined> {
  const header = (name: string) => {
    const value = request.headers[name];
    return Array.isArray(value) ? value.join(',') : value;
  };
  const match = AUTHORIZATION.exec(header('authorization') ?? '');
  if (!match) return 'no AWS4-HMAC-SHA256 authorization header';
  const [, accessKey, , region, signedNames, signature] = match;
  if (accessKey !== account.accessKeyId) return `unknown access key ${accessKey}`;
  const date = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(header('x-amz-date') ?? '');
  if (!date) return 'no x-amz-date header';
  const [, y, mo, d, h, mi, s] = date.map(Number) as number[];
  const [rawPath = '', rawQuery = ''] = request.target.split('?', 2) as [string, string?];
  const segments = rawPath.split('/').map(decoded);
  if (segments.some((segment) => segment === undefined)) return 'the path is not percent-encoded UTF-8';
  const query: Record<string, string> = {};
  for (const pair of rawQuery ? rawQuery.split('&') : []) {
    const [key, value = ''] = pair.split('=', 2).map(decoded) as [string | undefined, string | undefined];
    if (key === undefined || value === undefined) return 'the query is not percent-encoded UTF-8';
    query[key] = value;
  }
  const headers: Record<string, string> = {};
  for (const name of signedNames!.split(';')) headers[name] = header(name) ?? '';
  const [hostname, port] = (headers.host ?? '').split(':');
  const signer = new SignatureV4({
    credentials: account,
    region: region!,
    service: 's3',
    sha256: Sha256,
    // S3 signs the path as sent, encoded once: given here already encoded by S3's rule.
    uriEscapePath: false,
    applyChecksum: true,
  });
  const expected = await signer.sign(
    {
      method: request.method,
      protocol: 'http:',
      hostname: hostname!,
      port: port ? Number(port) : undefined,
      path: segments.map((seg) => escaped(seg!)).join('/'),
      query,
      headers,
    },
    { signingDate: new Date(Date.UTC(y!, mo! - 1, d!, h, mi, s)), signableHeaders: new Set(Object.keys(headers)) },
  );
  const recomputed = /Signature=([0-9a-f]{64})/.exec(String(expected.headers.authorization))?.[1];
  return recomputed === signature ? undefined : 'SignatureDoesNotMatch: the signature is not the one S3 computes for this request';
}
