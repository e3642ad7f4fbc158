import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { digestListed, obtainRelease, ReleaseError } from '../../tasks/upgrade/release.ts';
import { parseVersion } from '../../tasks/upgrade/version.ts';

/** A release server on loopback in etcd's layout, counting what it was asked. */
async function releaseServer(files: Record<string, Buffer | string>) {
  const asked: string[] = [];
  const server: Server = createServer((request, response) => {
    asked.push(request.url!);
    const body = files[request.url!];
    if (body === undefined) {
      response.writeHead(404).end('not found');
      return;
    }
    response.writeHead(200, { 'content-type': 'application/octet-stream' }).end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}/releases`,
    asked,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const archive = Buffer.from('pretend tarball of etcd v3.5.16\n'.repeat(1000));
const digest = createHash('sha256').update(archive).digest('hex');
const NAME = 'etcd-v3.5.16-linux-amd64.tar.gz';
const version = parseVersion('v3.5.16')!;
const sums = (hex: string) => `${'0'.repeat(64)}  etcd-v3.5.16-darwin-amd64.zip\n${hex}  ${NAME}\n`;

test('a release is downloaded once, verified against its SHA256SUMS, and checked again from the kept copy', async (t) => {
  const server = await releaseServer({ [`/releases/v3.5.16/${NAME}`]: archive, '/releases/v3.5.16/SHA256SUMS': sums(digest) });
  t.teardown(server.close);
  const directory = mkdtempSync(join(tmpdir(), 'releases-'));
  const first = await obtainRelease({ baseUrl: server.baseUrl, version }, directory);
  t.is(first.sha256, digest);
  t.is(first.verifiedBy, 'SHA256SUMS');
  t.is(first.name, 'etcd-v3.5.16-linux-amd64');
  t.deepEqual(readFileSync(first.archivePath), archive);
  t.deepEqual(server.asked, ['/releases/v3.5.16/SHA256SUMS', `/releases/v3.5.16/${NAME}`]);

  const second = await obtainRelease({ baseUrl: server.baseUrl, version }, directory);
  t.is(second.archivePath, first.archivePath);
  t.is(server.asked.length, 2, 'the kept archive and SHA256SUMS are used: nothing asked again');

  writeFileSync(first.archivePath, 'damaged on disk');
  await obtainRelease({ baseUrl: server.baseUrl, version }, directory);
  t.deepEqual(readFileSync(first.archivePath), archive, 'a kept archive that no longer matches is downloaded again');
  t.is(server.asked.length, 3);
});

test('a kept archive is read again only when its file changed: a run that finds it as verified reads none of its bytes', async (t) => {
  const server = await releaseServer({ [`/releases/v3.5.16/${NAME}`]: archive, '/releases/v3.5.16/SHA256SUMS': sums(digest) });
  t.teardown(server.close);
  const directory = mkdtempSync(join(tmpdir(), 'releases-'));
  const hashed: string[] = [];
  const counting = async (path: string) => {
    hashed.push(path);
    return createHash('sha256').update(readFileSync(path)).digest('hex');
  };
  const { archivePath } = await obtainRelease({ baseUrl: server.baseUrl, version }, directory, counting);
  t.deepEqual(hashed, [], 'hashed as it was downloaded');
  for (let run = 0; run < 3; run++) await obtainRelease({ baseUrl: server.baseUrl, version }, directory, counting);
  t.deepEqual(hashed, [], 'three runs later: not opened once');
  t.is(server.asked.length, 2);

  // Changed in place, its size and modification time put back: the change time still tells it.
  const { mtime } = statSync(archivePath);
  const tampered = Buffer.from(archive);
  tampered[0] = 0x50 ^ tampered[0]!;
  writeFileSync(archivePath, tampered);
  utimesSync(archivePath, mtime, mtime);
  await obtainRelease({ baseUrl: server.baseUrl, version }, directory, counting);
  t.deepEqual(hashed, [archivePath], 'read once, found wrong');
  t.deepEqual(readFileSync(archivePath), archive, 'and downloaded again');
  t.is(server.asked.length, 3);

  // A kept archive verified by hashing (a state directory from before the record, or a record lost) is recorded too.
  rmSync(`${archivePath}.verified`);
  await obtainRelease({ baseUrl: server.baseUrl, version }, directory, counting);
  await obtainRelease({ baseUrl: server.baseUrl, version }, directory, counting);
  t.deepEqual(hashed, [archivePath, archivePath]);
  // Another pinned digest is another verification.
  await t.throwsAsync(obtainRelease({ baseUrl: server.baseUrl, version, pinnedSha256: 'e'.repeat(64) }, directory, counting), {
    instanceOf: ReleaseError,
  });
  t.is(hashed.length, 3);
});

test('an archive whose digest is not the release says is refused and nothing is kept', async (t) => {
  const server = await releaseServer({ [`/releases/v3.5.16/${NAME}`]: archive, '/releases/v3.5.16/SHA256SUMS': sums('f'.repeat(64)) });
  t.teardown(server.close);
  const directory = mkdtempSync(join(tmpdir(), 'releases-'));
  const error = await t.throwsAsync(obtainRelease({ baseUrl: server.baseUrl, version }, directory), { instanceOf: ReleaseError });
  t.regex(error!.message, new RegExp(`has digest ${digest}, but its SHA256SUMS says f{64}`));
  t.deepEqual(readdirSync(join(directory, 'v3.5.16')).sort(), ['SHA256SUMS'], 'no archive, no partial download left');
});

test('a pinned digest wins: SHA256SUMS is not asked, and a wrong pin refuses', async (t) => {
  const server = await releaseServer({ [`/releases/v3.5.16/${NAME}`]: archive });
  t.teardown(server.close);
  const directory = mkdtempSync(join(tmpdir(), 'releases-'));
  const pinned = await obtainRelease({ baseUrl: `${server.baseUrl}/`, version, pinnedSha256: digest.toUpperCase() }, directory);
  t.is(pinned.verifiedBy, 'pinned digest');
  t.deepEqual(server.asked, [`/releases/v3.5.16/${NAME}`]);
  const other = mkdtempSync(join(tmpdir(), 'releases-'));
  await t.throwsAsync(obtainRelease({ baseUrl: server.baseUrl, version, pinnedSha256: 'e'.repeat(64) }, other), {
    message: /but its pinned digest says e{64}/,
  });
  t.false(existsSync(join(other, 'v3.5.16', NAME)));
});

test('a release the server does not have: the URL, the status and what to check', async (t) => {
  const server = await releaseServer({});
  t.teardown(server.close);
  const directory = mkdtempSync(join(tmpdir(), 'releases-'));
  await t.throwsAsync(obtainRelease({ baseUrl: server.baseUrl, version: parseVersion('v3.5.99')! }, directory), {
    message:
      /cannot download http:\/\/127\.0\.0\.1:\d+\/releases\/v3\.5\.99\/SHA256SUMS: HTTP 404 \(check etcd\.version and etcd\.release_url/,
  });
});

test('digestListed reads sha256sum lines, binary-mode marks included, and only the exact file', (t) => {
  t.is(digestListed(`${'A'.repeat(64)} *${NAME}\n`, NAME), 'a'.repeat(64));
  t.is(digestListed(sums(digest), 'etcd-v3.5.16-linux-amd64.tar'), undefined);
  t.is(digestListed('not a sums file', NAME), undefined);
});
