import test from 'ava';
import { readFileSync } from 'node:fs';
import { Secret } from '../../tasks/core/secret.ts';
import type { EtcdClients } from '../../tasks/etcd/client.ts';
import type { ClientIdentities } from '../../tasks/etcd/identities.ts';
import type { Health } from '../../tasks/etcd/health.ts';
import { loadInventory } from '../../tasks/inventory/load.ts';
import type { RemoteContext } from '../../tasks/libvirt/context.ts';
import { renderDomainXml } from '../../tasks/render/domain.ts';
import type { RenderedFile } from '../../tasks/render/member.ts';
import type { SnapshotSource } from '../../tasks/backup/source.ts';
import type { MemberConnections } from '../../tasks/remote/members.ts';
import { authStep } from '../../tasks/steps/auth.ts';
import { cloudInitIsoStep } from '../../tasks/steps/cloud-init-iso.ts';
import { domainsStep } from '../../tasks/steps/domains.ts';
import { healthStep } from '../../tasks/steps/health.ts';
import { restoreStep } from '../../tasks/steps/restore.ts';

/**
 * The plans of the remote steps as tables: facts in (recorded libvirt answers where libvirt is
 * asked), changes out. Nothing here talks to a host: plan() is pure.
 */

const lab = loadInventory('inventories/lab.yaml');
const etcd1 = lab.members[0]!;
const unused = {} as EtcdClients & RemoteContext & MemberConnections & ClientIdentities;
const identity = { cluster: 'lab', id: '5b0e7a4c-1d2e-4f3a-9b8c-7d6e5f4a3b2c', adoptsUnmarked: false };
const LIVE = readFileSync('test/fixtures/virsh-dumpxml-inactive-etcd-1.xml', 'utf8');
const summaries = (changes: readonly { summary: string }[]) => changes.map((c) => c.summary);

// domain: define, redefine (+ restart when running), start, autostart.
{
  const renderedWith = (xml: string) => new Map<string, RenderedFile[]>([['etcd-1', [{ name: 'domain.xml', content: xml, display: xml, containsSecrets: false }]]]);
  const step = (xml = renderDomainXml(identity, etcd1)) => domainsStep({ inventory: lab, members: [etcd1], rendered: renderedWith(xml), context: unused, clients: unused });
  /** The lines only the live definition has (removed) and only the rendered one has (added). */
  const changedLines = ({ before, after }: { before: string; after: string }) => {
    const [was, wanted] = [before.split('\n'), after.split('\n')];
    return { removed: was.filter((line) => !wanted.includes(line)), added: wanted.filter((line) => !was.includes(line)) };
  };
  // `redefined`: what the redefinition's diff shows; undefined where the row has no redefinition.
  const cases: { name: string; state: Parameters<ReturnType<typeof step>['plan']>[0]; xml?: string; changes: string[]; redefined?: { removed: string[]; added: string[] } }[] = [
    { name: 'not defined: define, start, autostart', state: { running: false, autostart: false, state: 'undefined' }, changes: ['define domain etcd-1', 'start etcd-1', 'enable autostart of etcd-1'] },
    { name: 'as rendered, running, autostarted: nothing', state: { liveXml: LIVE, running: true, autostart: true, state: 'running' }, changes: [] },
    { name: 'as rendered but shut off: started, saying how it was', state: { liveXml: LIVE, running: false, autostart: true, state: 'shut off' }, changes: ['start etcd-1 (was shut off)'] },
    { name: 'autostart turned off by hand: enabled again', state: { liveXml: LIVE, running: true, autostart: false, state: 'running' }, changes: ['enable autostart of etcd-1'] },
    {
      name: 'another definition while running: redefined and restarted (rolled)',
      state: { liveXml: LIVE, running: true, autostart: true, state: 'running' },
      xml: renderDomainXml(identity, { ...etcd1, memoryMib: 1152 }),
      changes: ['redefine domain etcd-1', 'restart etcd-1 to apply its new definition (one member at a time, waiting for cluster health)'],
      redefined: {
        removed: ['  <memory unit="KiB">1048576</memory>', '  <currentMemory unit="KiB">1048576</currentMemory>'],
        added: ['  <memory unit="KiB">1179648</memory>', '  <currentMemory unit="KiB">1179648</currentMemory>'],
      },
    },
    {
      name: 'another definition while shut off: redefined and started, no restart',
      state: { liveXml: LIVE, running: false, autostart: true, state: 'shut off' },
      xml: renderDomainXml(identity, { ...etcd1, vcpus: 2 }),
      changes: ['redefine domain etcd-1', 'start etcd-1 (was shut off)'],
      redefined: { removed: ['  <vcpu placement="static">1</vcpu>'], added: ['  <vcpu placement="static">2</vcpu>'] },
    },
  ];
  for (const row of cases) {
    test(`domain plan: ${row.name}`, (t) => {
      const changes = step(row.xml).plan(row.state, 'etcd-1');
      t.deepEqual(summaries(changes), row.changes);
      // Every row says whether it redefines: the diff of each redefinition is checked, none goes unchecked.
      const redefinitions = changes.filter((c) => c.summary.startsWith('redefine '));
      t.deepEqual(
        redefinitions.map((c) => ({ label: c.diff?.label, ...changedLines(c.diff ?? { before: '', after: '' }) })),
        row.redefined ? [{ label: 'etcd-1/domain.xml', ...row.redefined }] : [],
        'the diff shows what differs, and only that',
      );
    });
  }
}

// cloud-init: the seed volume by digest.
{
  const step = cloudInitIsoStep('/nonexistent-state', [etcd1], new Map(), unused);
  const wanted = { sha256: 'a'.repeat(64), size: 389120, imageSize: 389120 };
  const cases: { name: string; state: Parameters<typeof step.plan>[0]; changes: string[] }[] = [
    { name: 'missing: uploaded, with its size', state: { volume: { exists: false }, wanted }, changes: ['upload cloud-init ISO etcd-lab/etcd-1-cloud-init.iso (389120 bytes)'] },
    { name: 'the same digest: nothing', state: { volume: { exists: true, capacityBytes: 389120 }, remoteSha256: 'a'.repeat(64), wanted }, changes: [] },
    { name: 'another digest: rewritten in place, both digests shown', state: { volume: { exists: true, capacityBytes: 389120 }, remoteSha256: 'b'.repeat(64), wanted }, changes: [`rewrite cloud-init ISO etcd-lab/etcd-1-cloud-init.iso in place (sha256 ${'b'.repeat(12)} -> ${'a'.repeat(12)})`] },
    {
      name: 'a larger ISO: the volume grown, then rewritten',
      state: { volume: { exists: true, capacityBytes: 360448 }, remoteSha256: 'b'.repeat(64), wanted },
      changes: [`rewrite cloud-init ISO etcd-lab/etcd-1-cloud-init.iso in place (sha256 ${'b'.repeat(12)} -> ${'a'.repeat(12)}, the volume grown to 389120 bytes)`],
    },
  ];
  for (const row of cases) test(`cloud-init plan: ${row.name}`, (t) => t.deepEqual(summaries(step.plan(row.state, 'etcd-1')), row.changes));
}

// auth: from the bootstrap member, in order role, user, grant, enable.
{
  const certMode = authStep(lab, lab.members, unused, unused, false);
  const none = { rootRole: false, rootUser: false, rootUserHasRole: false, authEnabled: false };
  const cases: { name: string; state: Parameters<typeof certMode.plan>[0]; password?: boolean; changes: string[] }[] = [
    { name: 'nothing yet: all four, in order', state: none, changes: ['create role root', 'create user root (no password: the client certificate CN=root authenticates)', 'grant role root to user root', 'enable authentication'] },
    { name: 'password mode: the password is named, never shown', state: none, password: true, changes: ['create role root', 'create user root (password from the inventory, sent over TLS only)', 'grant role root to user root', 'enable authentication'] },
    { name: 'a run stopped after the user: grant and enable', state: { ...none, rootRole: true, rootUser: true }, changes: ['grant role root to user root', 'enable authentication'] },
    { name: 'all done: nothing', state: { rootRole: true, rootUser: true, rootUserHasRole: true, authEnabled: true }, changes: [] },
    { name: 'etcd not up yet (dry-run): planned for later', state: { ...none, unreachable: 'etcd not reachable' }, changes: ['create role root (once etcd is healthy)', 'create user root (no password: the client certificate CN=root authenticates) (once etcd is healthy)', 'grant role root to user root (once etcd is healthy)', 'enable authentication (once etcd is healthy)'] },
  ];
  for (const row of cases) {
    test(`auth plan: ${row.name}`, (t) => {
      t.deepEqual(certMode.targets, ['etcd-1'], 'the bootstrap member alone');
      const members = row.password ? lab.members.map((m, i) => (i === 0 ? { ...m, rootPassword: new Secret('pw-Zq7') } : m)) : lab.members;
      const changes = authStep(lab, members, unused, unused, false).plan(row.state, 'etcd-1');
      t.deepEqual(summaries(changes), row.changes);
      t.false(JSON.stringify(changes).includes('pw-Zq7'));
    });
  }
}

// health: ok, or the wait with etcd's answer.
{
  const step = healthStep(lab, lab.members, unused, false);
  const cases: { name: string; health: Health; changes: string[]; warnings: RegExp[] }[] = [
    { name: 'healthy: nothing', health: { healthy: true, leader: 'etcd-2', alarms: [] }, changes: [], warnings: [] },
    { name: 'not healthy: the wait, with the reason', health: { healthy: false, reason: 'no leader' }, changes: ['wait for etcd to become healthy (now: no leader)'], warnings: [] },
    { name: 'healthy with NOSPACE: nothing to change, a warning with what to do', health: { healthy: true, leader: 'etcd-2', alarms: ['NOSPACE'] }, changes: [], warnings: [/NOSPACE alarm: the cluster refuses writes\. .*maintain\.ts --compact --defrag --disarm/] },
  ];
  for (const row of cases) {
    test(`health plan: ${row.name}`, (t) => {
      t.deepEqual(summaries(step.plan(row.health, 'etcd-1')), row.changes);
      const warnings = step.warnings?.(row.health, 'etcd-1') ?? [];
      t.is(warnings.length, row.warnings.length);
      row.warnings.forEach((pattern, i) => t.regex(warnings[i]!, pattern));
    });
  }
}

// restore: only a member without data, and only when restore is enabled.
{
  const source = { bucket: { where: 's3 bucket backups at http://127.0.0.1:9000' } } as unknown as SnapshotSource;
  const enabled = { ...lab, restore: { ...lab.restore, enabled: true } };
  const step = restoreStep(enabled, enabled.members, unused, source, false);
  const cases: { name: string; state: Parameters<typeof step.plan>[0]; changes: string[] }[] = [
    { name: 'data there: nothing, ever again', state: { restored: true }, changes: [] },
    { name: 'empty data directory: restored from the chosen snapshot, then etcd starts', state: { restored: false, snapshot: 'etcd-2026-11-21T09:30:00Z.dump' }, changes: ['restore etcd-1\'s data directory from etcd-2026-11-21T09:30:00Z.dump in s3 bucket backups at http://127.0.0.1:9000, then start etcd'] },
    { name: 'still booting (dry-run): planned for once it has booted', state: { unreachable: 'connection refused', restored: false, snapshot: 'etcd-2026-11-21T09:30:00Z.dump' }, changes: ['restore etcd-1\'s data directory from etcd-2026-11-21T09:30:00Z.dump in s3 bucket backups at http://127.0.0.1:9000, then start etcd (once the member has booted)'] },
  ];
  for (const row of cases) test(`restore plan: ${row.name}`, (t) => t.deepEqual(summaries(step.plan(row.state, 'etcd-1')), row.changes));
  test('restore: no targets while restore is disabled', (t) => t.deepEqual(restoreStep(lab, lab.members, unused, source, false).targets, []));
}
