import test from 'ava';
import { spawnSync } from 'node:child_process';
import { createHash, X509Certificate } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AGENT_PATHS, BACKUP_UNITS, DEFRAG_UNITS, METRICS_UNITS } from '../../tasks/render/guest/member-agent.ts';
import { CERTIFICATES_FILE, MANIFEST_PATH, type ManifestEntry } from '../../tasks/render/guest/textfile.ts';
import { baseDocument, load, problemsOf } from '../helpers/inventory.ts';
import { renderWithPki } from '../helpers/render.ts';

/**
 * What the node exporter's textfile collector gets from the deploy (every certificate's end) and what
 * the agent checks drift against (the manifest), rendered from the inventory; and the agent's units
 * for scheduled defragmentation.
 */

const withDefrag = (extra: Record<string, unknown> = {}) => ({
  ...baseDocument(),
  maintenance: { defrag: { enabled: true, schedule: '*:0/10', rule: { free_bytes: 1048576 } } },
  ...extra,
});

test("each certificate's end, in Prometheus's text format as promtool reads it, equal to the certificate's notAfter", async (t) => {
  const { guests } = await renderWithPki(load(baseDocument()));
  const files = new Map(guests.get('etcd-2')!.files.map((file) => [file.path, file]));
  const metrics = files.get(CERTIFICATES_FILE)!.content;
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-textfile-'));
  writeFileSync(join(dir, 'certs.prom'), metrics);
  const checked = spawnSync('sh', ['-c', 'promtool check metrics < "$1"', 'sh', join(dir, 'certs.prom')], { encoding: 'utf8' });
  t.is(checked.status, 0, checked.stdout + checked.stderr);
  const server = new X509Certificate(files.get('/etc/etcd/tls/server.crt')!.content);
  const line = metrics.split('\n').find((l) => l.includes('certificate="server"'))!;
  t.regex(line, /subject="etcd-2"/);
  t.is(Number(line.split(' ').at(-1)), Math.floor(new Date(server.validTo).getTime() / 1000));
  t.deepEqual(
    metrics
      .split('\n')
      .filter((l) => l.startsWith('etcd_kvm_'))
      .map((l) => /certificate="([^"]+)"/.exec(l)![1]),
    ['server', 'peer', 'ca', 'peer-ca'],
  );
});

test('the manifest lists every other managed file with its mode and owner, and a digest only where others may read it', async (t) => {
  const { guests } = await renderWithPki(load(withDefrag()));
  const files = guests.get('etcd-1')!.files;
  const manifest = JSON.parse(files.find((file) => file.path === MANIFEST_PATH)!.content) as ManifestEntry[];
  t.deepEqual(
    manifest.map((entry) => entry.path),
    files.map((file) => file.path).filter((path) => path !== MANIFEST_PATH),
  );
  for (const entry of manifest) {
    const file = files.find((f) => f.path === entry.path)!;
    t.is(Number.parseInt(entry.mode, 8), file.mode, entry.path);
    t.is(entry.owner, file.owner, entry.path);
    if (file.mode & 0o004) t.is(entry.sha256, createHash('sha256').update(file.content).digest('hex'), entry.path);
    else t.is(entry.sha256, undefined, entry.path);
  }
  t.true(manifest.some((entry) => entry.path === '/etc/etcd/tls/server.key' && entry.sha256 === undefined));
  // Without the agent nobody reads it: not written.
  const { guests: plain } = await renderWithPki(load(baseDocument()));
  t.false(plain.get('etcd-1')!.files.some((file) => file.path === MANIFEST_PATH));
});

test('scheduled defragmentation alone: the agent, its defrag and metrics timers, no backup secrets or timer; its rule and quota in the config', async (t) => {
  const { guests } = await renderWithPki(load(withDefrag()));
  const guest = guests.get('etcd-3')!;
  const files = new Map(guest.files.map((file) => [file.path, file]));
  t.regex(files.get(AGENT_PATHS.defragTimer)!.content, /^OnCalendar=\*:0\/10$/m);
  t.regex(files.get(AGENT_PATHS.defragService)!.content, /^ExecStart=\/usr\/local\/sbin\/etcd-kvm-agent defrag$/m);
  t.regex(
    files.get(AGENT_PATHS.metricsService)!.content,
    /^ExecStartPost=\+-\/bin\/mv -f \S+ \/var\/lib\/prometheus\/node-exporter\/etcd-kvm-agent\.prom$/m,
  );
  t.regex(files.get(AGENT_PATHS.metricsTimer)!.content, /^OnCalendar=\*:\*:30$/m);
  for (const path of [AGENT_PATHS.accessKey, AGENT_PATHS.secretKey, AGENT_PATHS.timer]) t.false(files.has(path), path);
  t.deepEqual(
    guest.services.map((service) => service.unit).filter((unit) => unit.startsWith('etcd-kvm-')),
    [DEFRAG_UNITS.timer, METRICS_UNITS.timer],
  );
  t.false(guest.services.some((service) => service.unit === BACKUP_UNITS.timer));
  const config = JSON.parse(files.get(AGENT_PATHS.config)!.content);
  t.like(config, {
    backup_enabled: false,
    defrag: { enabled: true, rule: { free_bytes: 1048576, free_fraction: 0, quota_fraction: 0.8 }, disarm_below_fraction: 0.9 },
  });
  t.is(config.defrag.quota_bytes, load(withDefrag()).etcd.spaceQuota);
});

test('etcd listens for metrics on monitoring.metrics_port over plain HTTP on its address; 0 turns it off; a taken port is refused', async (t) => {
  const env = async (doc: unknown) =>
    (await renderWithPki(load(doc))).guests.get('etcd-1')!.files.find((file) => file.path === '/etc/etcd/etcd.env')!.content;
  t.regex(await env(baseDocument()), /^ETCD_LISTEN_METRICS_URLS=http:\/\/10\.10\.0\.11:2381$/m);
  t.notRegex(await env({ ...baseDocument(), monitoring: { metrics_port: 0 } }), /LISTEN_METRICS/);
  t.deepEqual(problemsOf({ ...baseDocument(), monitoring: { metrics_port: 2379 } }), [
    "monitoring.metrics_port: equals another port of the member (2379) — etcd's client (2379) and peer (2380) ports and the node exporter's (9100) are taken; etcd's convention is 2381",
  ]);
  const password = withDefrag({ etcd: { client_cert_auth: false } });
  (password.members[0]!.authentication_bootstrap as Record<string, unknown>).root_password = 'pw';
  t.deepEqual(problemsOf(password), [
    'maintenance.defrag.enabled: needs etcd.client_cert_auth: true — the agent logs into etcd with a client certificate of its own (CN=etcd-kvm-agent); in password mode it has no identity yet: not implemented',
  ]);
});
