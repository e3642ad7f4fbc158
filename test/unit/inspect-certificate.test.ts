import test from 'ava';
import { generateRsaKey } from '../../tasks/pki/keys.ts';
import { inspectCertificate, issueCertificate } from '../../tasks/pki/x509.ts';

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
