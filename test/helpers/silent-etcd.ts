import { mkdtempSync, readFileSync } from 'node:fs';
import { createSecureServer, type Http2SecureServer } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run } from './exec.ts';

/**
 * An etcd member that takes every gRPC call and answers none: a TLS HTTP/2 server on loopback with a
 * self-signed certificate for etcd-1 / 127.0.0.1. Only the client's deadline ends a call to it.
 */
export interface SilentMember {
  server: Http2SecureServer;
  port: number;
  caCert: string;
  /** The gRPC methods asked, as their paths. */
  asked: string[];
  dir: string;
}

export async function silentMember(): Promise<SilentMember> {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-silent-'));
  const made = run('openssl', [
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-days',
    '1',
    '-subj',
    '/CN=etcd-1',
    '-addext',
    'subjectAltName=DNS:etcd-1,IP:127.0.0.1',
    '-keyout',
    join(dir, 'key.pem'),
    '-out',
    join(dir, 'cert.pem'),
  ]);
  if (made.status !== 0) throw new Error(made.stderr);
  const caCert = readFileSync(join(dir, 'cert.pem'), 'utf8');
  const asked: string[] = [];
  const server = createSecureServer({ key: readFileSync(join(dir, 'key.pem')), cert: caCert });
  // Taken, never answered: the client's deadline is all that ends the call.
  server.on('stream', (_stream, headers) => asked.push(String(headers[':path'])));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as AddressInfo).port, caCert, asked, dir };
}
