import { DeleteObjectCommand, GetObjectCommand, ListObjectsV2Command, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { Agent } from 'node:https';
import { Readable } from 'node:stream';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import { CapExceededError, capStream, type Cap } from '../core/limits.ts';
import { revealSecret } from '../core/secret.ts';
import type { RestoreSettings } from '../inventory/model.ts';

/** The bucket etcd-backup writes to, through AWS's own S3 client (SigV4, path-style for MinIO/Ceph). */

// The SDK warns on Node 20 that releases after January 2027 will need Node 22. The lockfile pins
// the release this tool runs with, so the warning is only noise in an operator's output.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

export type S3Settings = RestoreSettings['s3'];

/** S3's limit for a single PUT. */
const MAX_PUT_BYTES = 5 * 1024 ** 3;

/** 1000 keys a page: a million objects under one prefix is far beyond a backup history. */
const MAX_LIST_PAGES = 1000;

export class SnapshotBucket {
  readonly #client: S3Client;

  constructor(readonly settings: S3Settings) {
    this.#client = new S3Client({
      endpoint: settings.endpoint,
      region: settings.region || 'us-east-1',
      forcePathStyle: true,
      // Checksums only where S3 requires them: newer defaults (CRC32 trailers) are refused by many S3-compatible servers.
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
      credentials: { accessKeyId: revealSecret(settings.accessKey), secretAccessKey: revealSecret(settings.secretKey) },
      // Bounded: an S3 endpoint that stops answering fails the run instead of hanging it.
      requestHandler: new NodeHttpHandler({
        connectionTimeout: 10_000,
        requestTimeout: 300_000,
        ...(settings.caCert ? { httpsAgent: new Agent({ ca: settings.caCert }) } : {}),
      }),
    });
  }

  get where(): string {
    return `s3 bucket ${this.settings.bucket} at ${this.settings.endpoint}`;
  }

  async list(prefix: string): Promise<string[]> {
    const names: string[] = [];
    let token: string | undefined;
    let pages = 0;
    do {
      // A listing that never ends (a server repeating its token) is an error, not a loop.
      if (++pages > MAX_LIST_PAGES)
        throw new Error(`${this.where}: listing ${prefix}* returned more than ${MAX_LIST_PAGES} pages; use a more specific object_prefix`);
      const page = await this.#client.send(
        new ListObjectsV2Command({ Bucket: this.settings.bucket, Prefix: prefix, ContinuationToken: token }),
      );
      for (const object of page.Contents ?? []) if (object.Key) names.push(object.Key);
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
    return names;
  }

  /** A small object's content, whole in memory: at most `cap` bytes. */
  async get(name: string, cap: Cap): Promise<Buffer> {
    const pieces: Buffer[] = [];
    for await (const piece of await this.getStream(name, cap)) pieces.push(piece as Buffer);
    return Buffer.concat(pieces);
  }

  /**
   * An object's content as a stream, for snapshots: never whole in memory, and failing past `cap`
   * bytes. Whoever can write to the bucket chooses what is read here (a member whose etcd-backup
   * holds the bucket's keys, among others): an announced length over the cap is refused before
   * anything is read, and the bytes are counted as they come, as a server need not announce one.
   */
  async getStream(name: string, cap: Cap): Promise<Readable> {
    const answer = await this.#client.send(new GetObjectCommand({ Bucket: this.settings.bucket, Key: name }));
    const body = answer.Body;
    if (!body) throw new Error(`${this.where}: ${name} has no body`);
    if (!(body instanceof Readable)) throw new Error(`${this.where}: ${name} did not come as a stream`);
    const what = `${this.where}: ${name}`;
    if (answer.ContentLength !== undefined && answer.ContentLength > cap.bytes) {
      body.destroy();
      throw new CapExceededError(`${what} (${answer.ContentLength} bytes, as the server announces it)`, cap);
    }
    return Readable.from(capStream(body, what, cap), { objectMode: false });
  }

  /**
   * One PUT, streamed when the body is a stream (its length given up front, as S3 needs it). S3
   * takes at most 5 GiB in one PUT; a larger snapshot is refused before anything is sent.
   */
  async put(name: string, body: Buffer | Readable, length = Buffer.isBuffer(body) ? body.length : undefined): Promise<void> {
    if (length === undefined) throw new Error(`${name}: the length of a streamed upload must be known`);
    if (length > MAX_PUT_BYTES)
      throw new Error(`${name} is ${length} bytes, more than S3's 5 GiB for one upload; multipart uploads are not implemented`);
    await this.#client.send(new PutObjectCommand({ Bucket: this.settings.bucket, Key: name, Body: body, ContentLength: length }));
  }

  /** One object at a time, in the order given (DeleteObjects would need a Content-MD5 that some S3-compatible servers refuse). */
  async delete(name: string): Promise<void> {
    await this.#client.send(new DeleteObjectCommand({ Bucket: this.settings.bucket, Key: name }));
  }

  close(): void {
    this.#client.destroy();
  }
}
