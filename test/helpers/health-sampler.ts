import { appendFileSync, readFileSync } from 'node:fs';
import { Agent, request } from 'node:https';

/**
 * Samples every member's /health every 0.5 s and appends one JSON line per sample to a file:
 * {"at": ms, "healthy": ["etcd-1", …], "answered": [… every member that answered /health at all]}. Run inside the lab namespace, in its own process (the tests
 * drive the tool with spawnSync, which blocks their own event loop). Stops on SIGTERM, or after
 * MAX_MS whatever happens.
 *
 *   node --import tsx test/helpers/health-sampler.ts OUT CA CERT KEY name=https://ip:2379 …
 */

const [out, caPath, certPath, keyPath, ...members] = process.argv.slice(2);
if (!out || !caPath || !certPath || !keyPath || members.length === 0) {
  console.error('usage: health-sampler.ts OUT CA CERT KEY name=url…');
  process.exit(2);
}
// One kept-alive TLS connection per member: a handshake every 0.5 s would load the emulated guests themselves.
const agent = new Agent({
  keepAlive: true,
  maxSockets: 1,
  ca: readFileSync(caPath),
  cert: readFileSync(certPath),
  key: readFileSync(keyPath),
});
const MAX_MS = 20 * 60_000;
const started = Date.now();

/** Whether the member answered /health within 2 s at all, and whether it said it is healthy (which needs a leader). */
function health(url: string): Promise<{ answered: boolean; healthy: boolean }> {
  return new Promise((resolve) => {
    const req = request(`${url}/health`, { agent }, (res) => {
      let body = '';
      res.on('data', (chunk: Buffer) => (body += chunk.toString()));
      res.on('end', () => resolve({ answered: true, healthy: res.statusCode === 200 && /"health":\s*"true"/.test(body) }));
    });
    // A whole answer within 2 s, or none (a socket timeout would count idle time only): a sample's every request ends by then.
    const deadline = setTimeout(() => req.destroy(), 2_000);
    req.on('close', () => clearTimeout(deadline));
    req.on('error', () => resolve({ answered: false, healthy: false }));
    req.end();
  });
}

let stopping = false;
process.on('SIGTERM', () => (stopping = true));
while (!stopping && Date.now() - started < MAX_MS) {
  const at = Date.now();
  const answers = await Promise.all(
    members.map(async (entry) => {
      const [name, url] = entry.split('=') as [string, string];
      return { name, ...(await health(url)) };
    }),
  );
  const named = (which: 'answered' | 'healthy') => answers.filter((answer) => answer[which]).map((answer) => answer.name);
  appendFileSync(out, `${JSON.stringify({ at, healthy: named('healthy'), answered: named('answered') })}\n`);
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, 500 - (Date.now() - at))));
}
