import { createReadStream, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';

/**
 * The lab's etcd release server: the files under <root>, read-only, at http://<host>:<port><prefix>/...
 * Plain JavaScript, run by node itself: a daemon that outlives lab:up needs no loader.
 * Started by scripts/lab/releases.ts (startReleaseServer) as: node release-server.mjs <host> <port> <prefix> <root>
 */

const [host, port, prefix, root] = process.argv.slice(2);
// The lab tells this daemon from a recycled PID by /proc/<pid>/comm (RELEASE_SERVER_COMMAND).
process.title = 'etcdlab-release';

/** The file a path names under the root; never outside it, never a hidden file (the build's own markers). */
function fileFor(pathname) {
  if (!pathname.startsWith(`${prefix}/`)) return undefined;
  const parts = pathname.slice(prefix.length + 1).split('/');
  if (parts.some((part) => part === '' || part.startsWith('.') || part.includes('%'))) return undefined;
  const file = join(root, ...parts);
  try {
    const stat = statSync(file);
    return stat.isFile() ? { file, stat } : undefined;
  } catch {
    return undefined;
  }
}

const contentType = (file) => (file.endsWith('.tar.gz') ? 'application/gzip' : 'text/plain; charset=utf-8');

createServer((request, response) => {
  const found = ['GET', 'HEAD'].includes(request.method ?? '') ? fileFor(new URL(request.url ?? '/', 'http://lab').pathname) : undefined;
  if (!found) {
    response.writeHead(404, { 'content-type': 'text/plain' }).end('Not Found\n');
    return;
  }
  response.writeHead(200, {
    'content-type': contentType(found.file),
    'content-length': found.stat.size,
    'last-modified': found.stat.mtime.toUTCString(),
  });
  if (request.method === 'HEAD') {
    response.end();
    return;
  }
  createReadStream(found.file)
    .on('error', () => response.destroy())
    .pipe(response);
}).listen(Number(port), host);
