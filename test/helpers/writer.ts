import { readFileSync } from 'node:fs';
import { setTimeout as delay } from 'node:timers/promises';
import { noop } from 'cockatiel';
import { Etcd3 } from 'etcd3';

/**
 * A client that keeps writing while the cluster changes under it: a new key every 200 ms through
 * any healthy member (another one after an error, which it logs on stderr with how long the attempt took), each acknowledged key on
 * stdout as `ack N MS` (MS: when it was acknowledged, ms since the epoch). Stops at SIGTERM. Run inside the lab's namespace:
 *   node --import tsx test/helpers/writer.ts PREFIX CA CERT KEY ENDPOINT...
 */
const [prefix, ca, cert, key, ...endpoints] = process.argv.slice(2);
if (!prefix || !ca || !cert || !key || endpoints.length === 0) throw new Error('usage: writer.ts PREFIX CA CERT KEY ENDPOINT...');
const credentials = { rootCertificate: readFileSync(ca), certChain: readFileSync(cert), privateKey: readFileSync(key) };
// One client per member, none retrying on its own: the loop below moves to the next member itself.
const clients = endpoints.map(
  (host) =>
    new Etcd3({
      hosts: [host],
      credentials,
      faultHandling: { host: () => noop, global: noop },
      defaultCallOptions: () => ({ deadline: Date.now() + 3_000 }),
    }),
);
let stopping = false;
process.on('SIGTERM', () => (stopping = true));
let at = 0;
for (let n = 1; !stopping; n++) {
  const started = Date.now();
  for (let attempt = 0; attempt < 20 && !stopping; attempt++) {
    const tried = Date.now();
    try {
      await clients[at]!.put(`${prefix}${n}`).value(String(n));
      console.log(`ack ${n} ${Date.now()}`);
      break;
    } catch (error) {
      // How long the attempt waited: a deadline (3 s) is a member that vanished, a fast error one that said no.
      console.error(`write ${n} through ${endpoints[at]} after ${Date.now() - tried} ms: ${(error as Error).message.split('\n')[0]}`);
      at = (at + 1) % clients.length;
    }
  }
  await delay(Math.max(0, 200 - (Date.now() - started)));
}
for (const client of clients) client.close();
