import { readFileSync } from 'node:fs';
import { Etcd3 } from 'etcd3';

/**
 * Raises a NOSPACE alarm the way etcd does when a member's database reaches its quota (etcd's Alarm
 * API accepts ACTIVATE), without filling hundreds of MiB in an emulated guest. Run inside the lab's
 * namespace: node --import tsx test/helpers/raise-alarm.ts ENDPOINT CA CERT KEY
 */
const [endpoint, ca, cert, key] = process.argv.slice(2);
if (!endpoint || !ca || !cert || !key) throw new Error('usage: raise-alarm.ts ENDPOINT CA CERT KEY');
const client = new Etcd3({
  hosts: [endpoint],
  credentials: { rootCertificate: readFileSync(ca), certChain: readFileSync(cert), privateKey: readFileSync(key) },
});
try {
  const status = await client.maintenance.status({});
  await client.maintenance.alarm({ action: 'Activate', memberID: status.header.member_id, alarm: 'Nospace' });
  console.log(`NOSPACE raised by member ${status.header.member_id}`);
} finally {
  client.close();
}
