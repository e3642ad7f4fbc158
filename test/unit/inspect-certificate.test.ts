import test from 'ava';
import { generateRsaKey } from '../../tasks/pki/keys.ts';
import { X509Certificate } from 'node:crypto';
import { certificateSerial, inspectCertificate, issueCertificate } from '../../tasks/pki/x509.ts';

/** inspectCertificate keeps each certificate's facts: every caller still gets its own copy of them. */

test('the same certificate inspected again gives the same facts, and one answer changed by its caller is not the next', async (t) => {
  const key = await generateRsaKey(2048);
  const now = new Date('2026-11-27T10:00:00Z');
  const pem = issueCertificate(
    {
      commonName: 'etcd-1',
      organization: 'etcd-kvm',
      profile: 'server-and-client',
      sans: { dns: ['etcd-1'], ips: ['192.168.150.11'] },
      validityHours: 24,
      subjectKeyPem: key,
    },
    now,
  );
  const first = inspectCertificate(pem);
  t.is(first.commonName, 'etcd-1');
  t.deepEqual(first.sans, { dns: ['etcd-1'], ips: ['192.168.150.11'] });
  t.is(first.notAfter.getTime(), Math.floor((now.getTime() + 24 * 3_600_000) / 1000) * 1000);
  const expiry = first.notAfter.getTime();

  first.notAfter.setTime(0);
  first.sans.dns.push('elsewhere');
  const second = inspectCertificate(pem);
  t.is(second.notAfter.getTime(), expiry);
  t.deepEqual(second.sans, { dns: ['etcd-1'], ips: ['192.168.150.11'] });
  t.not(second.notBefore, first.notBefore);
});

test('another certificate is inspected for itself, not answered from the one before', async (t) => {
  const key = await generateRsaKey(2048);
  const issue = (commonName: string) =>
    issueCertificate({
      commonName,
      organization: 'etcd-kvm',
      profile: 'client',
      sans: { dns: [], ips: [] },
      validityHours: 1,
      subjectKeyPem: key,
    });
  t.is(inspectCertificate(issue('root')).commonName, 'root');
  t.is(inspectCertificate(issue('alice')).commonName, 'alice');
});

/** Sixteen random bytes as a draw could give them, starting with `head`. */
const drawn = (...head: number[]) => Buffer.from([...head, ...Array.from({ length: 16 - head.length }, (_, i) => 0x11 + i * 13)]);

for (const first of [0x00, 0x01, 0x3f, 0x40, 0x7f, 0x80, 0xbf, 0xff])
  test(`a serial drawn with first byte 0x${first.toString(16).padStart(2, '0')}: 16 bytes, the first 0x40–0x7f, the rest as drawn`, (t) => {
    const serial = Buffer.from(certificateSerial(drawn(first)), 'hex');
    t.is(serial.length, 16);
    t.true(serial[0]! >= 0x40 && serial[0]! <= 0x7f, serial.toString('hex'));
    t.deepEqual(serial.subarray(1), drawn(first).subarray(1));
  });

// What the first byte cleared of its high bit alone gave, 1 certificate in 128: a zero byte, which node-forge drops,
// then a byte of 0x80 or more (a negative serial, which Go's x509 refuses since Go 1.23) or another zero (a
// non-minimal INTEGER: OpenSSL's "illegal padding").
for (const head of [
  [0x00, 0x80],
  [0x00, 0x00],
])
  test(`a certificate whose serial was drawn starting ${head.map((b) => `0x${b.toString(16).padStart(2, '0')}`).join(' ')} parses, positive and as issued`, async (t) => {
    const key = await generateRsaKey(2048);
    const serial = certificateSerial(drawn(...head));
    const pem = issueCertificate(
      { commonName: 'etcd-1', organization: 'etcd-kvm', profile: 'ca', sans: { dns: [], ips: [] }, validityHours: 24, subjectKeyPem: key },
      new Date(),
      serial,
    );
    t.is(new X509Certificate(pem).serialNumber.toLowerCase(), serial);
    t.is(inspectCertificate(pem).serial.toLowerCase(), serial);
  });
