import { sha256 } from '../../core/digest.ts';
import { certificatesIn, inspectCertificate } from '../../pki/x509.ts';
import type { MemberTls } from '../../pki/materials.ts';
import type { CloudConfigFragment, WriteFile } from './fragment.ts';

/**
 * What the node exporter's textfile collector carries from the tool, besides the agent's own metrics
 * (member-agent.ts): each certificate's end, and the manifest of managed files the agent checks for
 * drift. Both are derived from what the member is to contain, so they change only when it does: a
 * no-op run writes neither.
 */

/** The node exporter's textfile directory (Debian's default; the upstream unit is given it too). */
export const TEXTFILE_DIR = '/var/lib/prometheus/node-exporter';
export const CERTIFICATES_FILE = `${TEXTFILE_DIR}/etcd-kvm-certificates.prom`;
/** What the last converged run wrote: each managed file's mode, owner and (where others may read it) digest. */
export const MANIFEST_PATH = '/etc/etcd-kvm/agent/managed-files.json';

export interface ManifestEntry {
  path: string;
  mode: string;
  owner: string;
  /** SHA-256 of the content; absent for files only their owner reads (secrets: no digest of them is published). */
  sha256?: string;
}

/** The certificates a member serves or uses, by the label the metric gives them. */
function certificatesOf(tls: MemberTls): [label: string, pem: string | undefined][] {
  return [
    ['server', tls.cert],
    ['peer', tls.peer?.cert],
    ['ca', tls.caCert],
    ['peer-ca', tls.peer?.trustedCa],
    ['agent', tls.agent?.cert],
  ];
}

const escapeLabel = (value: string) => value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');

/** Prometheus's text format: one series per certificate (a bundle gives one per certificate in it), notAfter in Unix seconds. */
export function renderCertificateMetrics(tls: MemberTls): string {
  const lines = [
    '# HELP etcd_kvm_certificate_expiry_timestamp_seconds When each certificate ' +
      'the member serves or trusts ends (notAfter), written by etcd-kvm.',
    '# TYPE etcd_kvm_certificate_expiry_timestamp_seconds gauge',
  ];
  for (const [label, pem] of certificatesOf(tls)) {
    for (const certificate of pem ? certificatesIn(pem) : []) {
      const facts = inspectCertificate(certificate);
      const labels = `certificate="${label}",subject="${escapeLabel(facts.commonName)}",serial="${facts.serial}"`;
      lines.push(`etcd_kvm_certificate_expiry_timestamp_seconds{${labels}} ${Math.floor(facts.notAfter.getTime() / 1000)}`);
    }
  }
  return `${lines.join('\n')}\n`;
}

/** Files only their owner (and perhaps its group) may read: no digest of their content is published. */
const ownerOnly = (permissions: string) => (Number.parseInt(permissions, 8) & 0o004) === 0;

export function renderManifest(files: readonly WriteFile[]): string {
  const entries: ManifestEntry[] = files.map((file) => ({
    path: file.path,
    mode: file.permissions,
    owner: file.owner ?? 'root:root',
    ...(ownerOnly(file.permissions) ? {} : { sha256: sha256(file.content) }),
  }));
  return `${JSON.stringify(entries, null, 2)}\n`;
}

/**
 * The certificate metrics (always), and the manifest of every other fragment's files while the agent
 * runs to read it (`withManifest`).
 */
export function textfileFragment(tls: MemberTls, others: readonly CloudConfigFragment[], withManifest: boolean): CloudConfigFragment {
  const certificates: WriteFile = { path: CERTIFICATES_FILE, permissions: '0644', content: renderCertificateMetrics(tls) };
  const managed = [...others.flatMap((fragment) => fragment.writeFiles ?? []), certificates];
  return {
    writeFiles: [certificates, ...(withManifest ? [{ path: MANIFEST_PATH, permissions: '0644', content: renderManifest(managed) }] : [])],
  };
}
