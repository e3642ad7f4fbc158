import { createPrivateKey, randomBytes, sign, X509Certificate } from 'node:crypto';
import forge from 'node-forge';

/**
 * Certificates are assembled with node-forge and signed with Node's native crypto:
 * forge builds the TBSCertificate, OpenSSL signs it (forge's JS RSA signing costs ~40 ms per certificate).
 */

export interface SubjectAltNames {
  dns: string[];
  ips: string[];
}

/** 'intermediate-ca' signs leaves only (path length 0). */
export type CertificateProfile = 'ca' | 'intermediate-ca' | 'server-and-client' | 'client';

export interface CertificateRequest {
  commonName: string;
  organization: string;
  profile: CertificateProfile;
  sans: SubjectAltNames;
  validityHours: number;
  /** The key the certificate is for (PEM). */
  subjectKeyPem: string;
  /** The issuer; absent for a self-signed CA. */
  issuer?: { certificatePem: string; keyPem: string };
}

function extensionsFor(profile: CertificateProfile, sans: SubjectAltNames): object[] {
  if (profile === 'ca' || profile === 'intermediate-ca') {
    return [
      { name: 'basicConstraints', cA: true, ...(profile === 'intermediate-ca' ? { pathLenConstraint: 0 } : {}), critical: true },
      { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
      { name: 'subjectKeyIdentifier' },
    ];
  }
  const altNames = [...sans.dns.map((value) => ({ type: 2, value })), ...sans.ips.map((ip) => ({ type: 7, ip }))];
  return [
    { name: 'basicConstraints', cA: false, critical: true },
    { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
    { name: 'extKeyUsage', serverAuth: profile === 'server-and-client', clientAuth: true },
    ...(altNames.length > 0 ? [{ name: 'subjectAltName', altNames }] : []),
    { name: 'subjectKeyIdentifier' },
  ];
}

/**
 * A certificate's serial number, as hex, from 16 random bytes: 126 of their bits, the first byte 0x40–0x7f, so its DER
 * INTEGER is positive and minimal as it stands. Clearing the high bit alone left a zero first byte in 1 certificate of
 * 128, which node-forge drops: before a byte of 0x80 or more the serial then reads as negative (Go's x509, etcd's,
 * refuses one since Go 1.23), before another zero it is a non-minimal INTEGER (OpenSSL: "illegal padding").
 */
export function certificateSerial(random: Buffer = randomBytes(16)): string {
  const serial = Buffer.from(random);
  serial[0] = (serial[0]! & 0x3f) | 0x40;
  return serial.toString('hex');
}

export function issueCertificate(request: CertificateRequest, now = new Date(), serial = certificateSerial()): string {
  const cert = forge.pki.createCertificate();
  const subjectKey = forge.pki.privateKeyFromPem(request.subjectKeyPem) as forge.pki.rsa.PrivateKey;
  cert.publicKey = forge.pki.setRsaPublicKey(subjectKey.n, subjectKey.e);
  cert.serialNumber = serial;
  // Back-date a little so a member whose clock lags a few minutes still accepts the certificate.
  cert.validity.notBefore = new Date(now.getTime() - BACKDATE_MS);
  cert.validity.notAfter = new Date(now.getTime() + request.validityHours * 3_600_000);
  const subject = [
    { name: 'commonName', value: request.commonName },
    { name: 'organizationName', value: request.organization },
  ];
  cert.setSubject(subject);
  const issuerCert = request.issuer ? forge.pki.certificateFromPem(request.issuer.certificatePem) : undefined;
  cert.setIssuer(issuerCert ? issuerCert.subject.attributes : subject);
  const extensions = extensionsFor(request.profile, request.sans);
  if (issuerCert) {
    const issuerKeyId = issuerCert.generateSubjectKeyIdentifier().getBytes();
    extensions.push({ name: 'authorityKeyIdentifier', keyIdentifier: issuerKeyId });
  }
  cert.setExtensions(extensions);

  const signingKeyPem = request.issuer?.keyPem ?? request.subjectKeyPem;
  const oid = forge.pki.oids.sha256WithRSAEncryption!;
  cert.siginfo.algorithmOid = oid;
  cert.signatureOid = oid;
  // getTBSCertificate is public in node-forge but missing from its type definitions.
  const { getTBSCertificate } = forge.pki as unknown as { getTBSCertificate(c: forge.pki.Certificate): forge.asn1.Asn1 };
  const tbs = forge.asn1.toDer(getTBSCertificate(cert)).getBytes();
  cert.signature = sign('sha256', Buffer.from(tbs, 'binary'), createPrivateKey(signingKeyPem)).toString('binary');
  return forge.pki.certificateToPem(cert);
}

/** What the tool needs to know about an existing certificate, read with Node's native X.509 parser. */
export interface CertificateFacts {
  commonName: string;
  sans: SubjectAltNames;
  notBefore: Date;
  notAfter: Date;
  isCA: boolean;
  serial: string;
}

/** notBefore lies this far in the past, so a member whose clock is a little behind accepts a new certificate. */
export const BACKDATE_MS = 5 * 60_000;

/**
 * Each certificate's facts, by its PEM, for the process's life: a run renders every member's
 * certificate metrics several times (the guests asked ahead, then the render phase, each with masked
 * and real secrets), and parsing one costs ~0.6 ms of the main thread: ~70 ms of a five-member no-op.
 * A certificate's PEM says all its facts, so an answer never goes stale. Bounded all the same.
 */
const inspected = new Map<string, CertificateFacts>();
const INSPECTED_KEPT = 256;

export function inspectCertificate(pem: string): CertificateFacts {
  let facts = inspected.get(pem);
  if (!facts) {
    facts = parseCertificateFacts(pem);
    if (inspected.size >= INSPECTED_KEPT) inspected.clear();
    inspected.set(pem, facts);
  }
  // A copy: what one caller does with its dates or lists is no other's answer.
  return {
    ...facts,
    sans: { dns: [...facts.sans.dns], ips: [...facts.sans.ips] },
    notBefore: new Date(facts.notBefore),
    notAfter: new Date(facts.notAfter),
  };
}

function parseCertificateFacts(pem: string): CertificateFacts {
  const cert = new X509Certificate(pem);
  const sans: SubjectAltNames = { dns: [], ips: [] };
  for (const entry of (cert.subjectAltName ?? '').split(', ').filter(Boolean)) {
    if (entry.startsWith('DNS:')) sans.dns.push(entry.slice(4));
    else if (entry.startsWith('IP Address:')) sans.ips.push(entry.slice(11));
  }
  const commonName = /(?:^|\n)CN=([^\n]*)/.exec(cert.subject)?.[1] ?? '';
  return {
    commonName,
    sans,
    notBefore: new Date(cert.validFrom),
    notAfter: new Date(cert.validTo),
    isCA: cert.ca,
    serial: cert.serialNumber,
  };
}

export function isSignedBy(certPem: string, caPem: string): boolean {
  const cert = new X509Certificate(certPem);
  const ca = new X509Certificate(caPem);
  return cert.checkIssued(ca) && cert.verify(ca.publicKey);
}

/** Each certificate of a PEM bundle, in order, as PEM text ending in a newline. */
export const certificatesIn = (pem: string): string[] =>
  (pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? []).map((block) => `${block}\n`);

/** A certificate followed by the intermediates that lead to `caPem`, each signed by the next. */
export function chainLeadsTo(chainPem: string, caPem: string): boolean {
  const blocks = certificatesIn(chainPem);
  if (blocks.length === 0) return false;
  return blocks.every((block, i) => isSignedBy(block, blocks[i + 1] ?? caPem));
}

export function keyMatchesCertificate(certPem: string, keyPem: string): boolean {
  try {
    return new X509Certificate(certPem).checkPrivateKey(createPrivateKey(keyPem));
  } catch {
    return false;
  }
}
