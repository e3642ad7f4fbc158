import test from 'ava';
import { readFileSync } from 'node:fs';
import { Secret } from '../../tasks/core/secret.ts';
import { loadInventory } from '../../tasks/inventory/load.ts';
import { renderDomainXml } from '../../tasks/render/domain.ts';
import type { RenderedFile } from '../../tasks/render/member.ts';
import type { MemberConnections } from '../../tasks/remote/members.ts';
import { patienceOf } from '../../tasks/core/runner.ts';
import type { AnyStep } from '../../tasks/core/step.ts';
import type { DesiredGuest } from '../../tasks/render/guest/desired.ts';
import { SshError } from '../../tasks/remote/ssh.ts';
import { authStep } from '../../tasks/steps/auth.ts';
import { cloudInitIsoStep } from '../../tasks/steps/cloud-init-iso.ts';
import { domainsStep } from '../../tasks/steps/domains.ts';
import { alarmWarnings, healthWait } from '../../tasks/steps/health.ts';
import { guestStep, type GuestFactsProbe } from '../../tasks/steps/guest.ts';
import { sha256 } from '../../tasks/core/digest.ts';
import { restoreStep } from '../../tasks/steps/restore.ts';
import { usersStep } from '../../tasks/steps/users.ts';
import { standInClients, standInProbe, standInShell, standInSource } from '../helpers/stand-ins.ts';
import { unconnected } from '../helpers/unconnected.ts';

/**
 * The plans of the remote steps as tables: facts in (recorded libvirt answers where libvirt is
 * asked), changes out. Nothing here talks to a host: plan() is pure.
 */

const lab = loadInventory('inventories/lab.yaml');
const etcd1 = lab.members[0]!;
const { remote, clients, memberSsh, identities } = unconnected(lab);
const identity = { cluster: 'lab', id: '5b0e7a4c-1d2e-4f3a-9b8c-7d6e5f4a3b2c', adoptsUnmarked: false };
const LIVE = readFileSync('test/fixtures/virsh-dumpxml-inactive-etcd-1.xml', 'utf8');
const summaries = (changes: readonly { summary: string }[]) => changes.map((c) => c.summary);

// domain: define, redefine (+ restart when running), start, autostart.
function domainCases() {
  const renderedWith = (xml: string) =>
    new Map<string, RenderedFile[]>([['etcd-1', [{ name: 'domain.xml', content: xml, display: xml, containsSecrets: false }]]]);
  const step = (xml = renderDomainXml(identity, etcd1)) =>
    domainsStep({ inventory: lab, members: [etcd1], rendered: renderedWith(xml), context: remote, clients });
  /** The lines only the live definition has (removed) and only the rendered one has (added). */
  const changedLines = ({ before, after }: { before: string; after: string }) => {
    const [was, wanted] = [before.split('\n'), after.split('\n')];
    return { removed: was.filter((line) => !wanted.includes(line)), added: wanted.filter((line) => !was.includes(line)) };
  };
  // `redefined`: what the redefinition's diff shows; undefined where the row has no redefinition.
  const cases: {
    name: string;
    state: Parameters<ReturnType<typeof step>['plan']>[0];
    xml?: string;
    changes: string[];
    redefined?: { removed: string[]; added: string[] };
  }[] = [
    {
      name: 'not defined: define, start, autostart',
      state: { running: false, autostart: false, state: 'undefined' },
      changes: ['define domain etcd-1', 'start etcd-1', 'enable autostart of etcd-1'],
    },
    {
      name: 'as rendered, running, autostarted: nothing',
      state: { liveXml: LIVE, running: true, autostart: true, state: 'running' },
      changes: [],
    },
    {
      name: 'as rendered but shut off: started, saying how it was',
      state: { liveXml: LIVE, running: false, autostart: true, state: 'shut off' },
      changes: ['start etcd-1 (was shut off)'],
    },
    {
      name: 'autostart turned off by hand: enabled again',
      state: { liveXml: LIVE, running: true, autostart: false, state: 'running' },
      changes: ['enable autostart of etcd-1'],
    },
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
domainCases();

// cloud-init: the seed volume by digest.
function cloudInitCases() {
  const step = cloudInitIsoStep({ stateDir: '/nonexistent-state', members: [etcd1], rendered: new Map(), context: remote });
  const wanted = { sha256: 'a'.repeat(64), size: 389120, imageSize: 389120 };
  const cases: { name: string; state: Parameters<typeof step.plan>[0]; changes: string[] }[] = [
    {
      name: 'missing: uploaded, with its size',
      state: { volume: { exists: false }, wanted },
      changes: ['upload cloud-init ISO etcd-lab/etcd-1-cloud-init.iso (389120 bytes)'],
    },
    {
      name: 'the same digest: nothing',
      state: { volume: { exists: true, capacityBytes: 389120 }, remoteSha256: 'a'.repeat(64), wanted },
      changes: [],
    },
    {
      name: 'another digest: rewritten in place, both digests shown',
      state: { volume: { exists: true, capacityBytes: 389120 }, remoteSha256: 'b'.repeat(64), wanted },
      changes: [`rewrite cloud-init ISO etcd-lab/etcd-1-cloud-init.iso in place (sha256 ${'b'.repeat(12)} -> ${'a'.repeat(12)})`],
    },
    {
      name: 'a larger ISO: the volume grown, then rewritten',
      state: { volume: { exists: true, capacityBytes: 360448 }, remoteSha256: 'b'.repeat(64), wanted },
      changes: [
        `rewrite cloud-init ISO etcd-lab/etcd-1-cloud-init.iso in place (sha256 ${'b'.repeat(12)} -> ${'a'.repeat(12)}, the volume grown to 389120 bytes)`,
      ],
    },
  ];
  for (const row of cases) test(`cloud-init plan: ${row.name}`, (t) => t.deepEqual(summaries(step.plan(row.state, 'etcd-1')), row.changes));
}
cloudInitCases();

// auth: from the bootstrap member, in order role, user, grant, enable.
function authCases() {
  const certMode = authStep({ inventory: lab, members: lab.members, clients, identities });
  const none = { rootRole: false, rootUser: false, rootUserHasRole: false, authEnabled: false };
  const cases: { name: string; state: Parameters<typeof certMode.plan>[0]; password?: boolean; changes: string[] }[] = [
    {
      name: 'nothing yet: all four, in order',
      state: none,
      changes: [
        'create role root',
        'create user root (no password: the client certificate CN=root authenticates)',
        'grant role root to user root',
        'enable authentication',
      ],
    },
    {
      name: 'password mode: the password is named, never shown',
      state: none,
      password: true,
      changes: [
        'create role root',
        'create user root (password from the inventory, sent over TLS only)',
        'grant role root to user root',
        'enable authentication',
      ],
    },
    {
      name: 'a run stopped after the user: grant and enable',
      state: { ...none, rootRole: true, rootUser: true },
      changes: ['grant role root to user root', 'enable authentication'],
    },
    { name: 'all done: nothing', state: { rootRole: true, rootUser: true, rootUserHasRole: true, authEnabled: true }, changes: [] },
    {
      name: 'etcd not up yet (dry-run): planned for later',
      state: { ...none, unreachable: 'etcd not reachable' },
      changes: [
        'create role root (once etcd is healthy)',
        'create user root (no password: the client certificate CN=root authenticates) (once etcd is healthy)',
        'grant role root to user root (once etcd is healthy)',
        'enable authentication (once etcd is healthy)',
      ],
    },
  ];
  for (const row of cases) {
    test(`auth plan: ${row.name}`, (t) => {
      t.deepEqual(certMode.targets, ['etcd-1'], 'the bootstrap member alone');
      const members = row.password ? lab.members.map((m, i) => (i === 0 ? { ...m, rootPassword: new Secret('pw-Zq7') } : m)) : lab.members;
      const changes = authStep({ inventory: lab, members, clients, identities }).plan(row.state, 'etcd-1');
      t.deepEqual(summaries(changes), row.changes);
      t.false(JSON.stringify(changes).includes('pw-Zq7'));
    });
  }
}
authCases();

// health: a wait; what a dry-run reports, and a NOSPACE alarm's warning with what to do.
function healthCases() {
  test('health wait: a dry-run names what it would wait for', (t) => {
    t.is(
      healthWait({ inventory: lab, members: lab.members, clients }).pending('no leader'),
      'wait for etcd to become healthy (now: no leader)',
    );
  });
  test('health wait: the failure names the member, the last answer, the time waited and where to look', (t) => {
    const failure = healthWait({ inventory: lab, members: lab.members, clients }).failure('etcd-2', 'no leader');
    t.regex(
      failure,
      new RegExp(
        `^etcd on etcd-2 \\(${lab.members[1]!.etcdIp.replaceAll('.', '\\.')}\\) not healthy after ${lab.cluster.healthTimeout} s; last answer: no leader\\. Look at its console`,
      ),
    );
  });
  test('health wait: an active alarm is a warning; NOSPACE says what to do', (t) => {
    t.deepEqual(alarmWarnings([]), []);
    t.deepEqual(alarmWarnings(['CORRUPT']), ['etcd reports an active CORRUPT alarm']);
    t.regex(
      alarmWarnings(['NOSPACE']).join('\n'),
      /NOSPACE alarm: the cluster refuses writes\. .*maintain\.ts --compact --defrag --disarm/,
    );
  });
}
healthCases();

// restore: only a member without data, and only when restore is enabled.
function restoreCases() {
  const source = standInSource({ bucket: { where: 's3 bucket backups at http://127.0.0.1:9000' } });
  const enabled = { ...lab, restore: { ...lab.restore, enabled: true } };
  const step = restoreStep({ inventory: enabled, members: enabled.members, connections: memberSsh, source });
  const CHOSEN = { name: 'etcd-2026-11-21T09:30:00Z.dump', provenance: "this cluster's latest, taken by etcd-2 at revision 41" };
  const cases: { name: string; state: Parameters<typeof step.plan>[0]; changes: string[] }[] = [
    { name: 'data there: nothing, ever again', state: { restored: true }, changes: [] },
    {
      name: 'empty data directory: restored from the chosen snapshot, then etcd starts',
      state: { restored: false, snapshot: CHOSEN },
      changes: [
        "restore etcd-1's data directory from etcd-2026-11-21T09:30:00Z.dump in s3 bucket backups at http://127.0.0.1:9000, then start etcd (this cluster's latest, taken by etcd-2 at revision 41)",
      ],
    },
    {
      name: 'still booting (dry-run): planned for once it has booted',
      state: { unreachable: 'connection refused', restored: false, snapshot: CHOSEN },
      changes: [
        "restore etcd-1's data directory from etcd-2026-11-21T09:30:00Z.dump in s3 bucket backups at http://127.0.0.1:9000, then start etcd (once the member has booted) (this cluster's latest, taken by etcd-2 at revision 41)",
      ],
    },
    {
      name: "a snapshot named by restore.backup_timestamp that is not this cluster's own: the plan says so",
      state: {
        restored: false,
        snapshot: { name: 'etcd-2026-11-21T09:30:00Z.dump', unauthenticated: 'no manifest', provenance: 'UNAUTHENTICATED: no manifest' },
      },
      changes: [
        "restore etcd-1's data directory from etcd-2026-11-21T09:30:00Z.dump in s3 bucket backups at http://127.0.0.1:9000, then start etcd (UNAUTHENTICATED: no manifest)",
      ],
    },
  ];
  for (const row of cases) test(`restore plan: ${row.name}`, (t) => t.deepEqual(summaries(step.plan(row.state, 'etcd-1')), row.changes));
  test('restore: no targets while restore is disabled', (t) =>
    t.deepEqual(restoreStep({ inventory: lab, members: lab.members, connections: memberSsh, source }).targets, []));
}
restoreCases();

// Dry-run is the runner's: the same check, given a dry-run's patience (look once, say why) or a run's
// (wait out the deadline, then fail), plans for later or fails. The steps take no dry-run flag.
function dryRunCases() {
  /** etcd on every member refuses: not healthy. */
  const etcdDown = standInClients({ for: async () => Promise.reject(new Error('14 UNAVAILABLE: No connection established')) });
  const sshRefused = (windows: number[]): Pick<MemberConnections, 'reach' | 'get'> => ({
    reach: async (_member: unknown, { windowMs }: { windowMs: number }) => {
      windows.push(windowMs);
      throw new SshError('member etcd-1: connect ECONNREFUSED');
    },
    get: async () => Promise.reject(new SshError('member etcd-1: connect ECONNREFUSED')),
  });
  /** A second of health_timeout: a run's wait for a booting member ends soon. */
  const quick = { ...lab, cluster: { ...lab.cluster, healthTimeout: 1 }, restore: { ...lab.restore, enabled: true } };
  const source = standInSource({
    bucket: { where: 's3 bucket backups' },
    choose: async () => ({ name: 'etcd-2026-11-21T09:30:00Z.dump', provenance: "this cluster's latest, taken by etcd-1 at revision 7" }),
  });
  const desired = new Map([
    [
      'etcd-1',
      {
        files: [],
        services: [],
        dataDir: '/var/lib/etcd',
        retired: { units: [], paths: [] },
        packages: { needed: [], install: false },
        directories: [],
      } satisfies DesiredGuest,
    ],
  ]);
  /** The guest agent: nothing taken early; its boot looked at as `boot` says. */
  const agent = (boot: 'running' | { unanswered: string }) =>
    standInProbe({ takeEarly: async () => undefined, lookAtBoot: async () => boot });
  const guest = (probe: GuestFactsProbe) =>
    guestStep({
      inventory: quick,
      members: [quick.members[0]!],
      desired,
      ssh: sshRefused([]),
      probe,
      clients,
      clusterFormed: false,
      diffs: false,
    });
  const notHealthy = `etcd not reachable at ${etcd1.etcdIp} (No connection established)`;
  const cases: { name: string; step: () => AnyStep; dryRun: string[]; run: string | RegExp }[] = [
    {
      name: 'auth, etcd not healthy',
      step: () => authStep({ inventory: lab, members: lab.members, clients: etcdDown, identities }),
      dryRun: [
        'create role root',
        'create user root (no password: the client certificate CN=root authenticates)',
        'grant role root to user root',
        'enable authentication',
      ].map((s) => `${s} (once etcd is healthy)`),
      run: notHealthy,
    },
    {
      name: 'users, etcd not healthy',
      step: () =>
        usersStep({
          inventory: { ...lab, stateDir: '/nonexistent-state', roles: { app: { permissions: [] } }, users: {} },
          members: lab.members,
          clients: etcdDown,
          identities,
        }),
      dryRun: [
        'record the users and roles the tool manages in etcd-kvm/managed-access and the state directory (managed-access.json)',
        'create role app',
      ].map((s) => `${s} (once etcd is healthy)`),
      run: notHealthy,
    },
    {
      name: 'restore, member still booting',
      step: () => restoreStep({ inventory: quick, members: quick.members, connections: sshRefused([]), source }),
      dryRun: [
        "restore etcd-1's data directory from etcd-2026-11-21T09:30:00Z.dump in s3 bucket backups, then start etcd (once the member has booted) (this cluster's latest, taken by etcd-1 at revision 7)",
      ],
      run: 'member etcd-1: connect ECONNREFUSED',
    },
    {
      name: 'guest, neither its agent nor SSH answers',
      step: () => guest(agent({ unanswered: 'no answer' })),
      dryRun: [
        'converge the guest once it can be reached (now: neither its guest agent nor SSH answers (guest agent: no answer; SSH: member etcd-1: connect ECONNREFUSED))',
      ],
      run: /^its boot did not end within 1 s \(guest agent: no answer; SSH: member etcd-1: connect ECONNREFUSED\)$/,
    },
    {
      name: 'guest, its agent says the first boot still runs',
      step: () => guest(agent('running')),
      dryRun: ['converge the guest once its first boot has finished (cloud-init is still running)'],
      run: /^its boot did not end within 1 s \(guest agent: the boot is still running; SSH: not tried\)$/,
    },
  ];
  for (const row of cases) {
    test(`${row.name}: a dry-run's patience plans it for later`, async (t) => {
      const step = row.step();
      const target = step.targets[0]!;
      t.deepEqual(summaries(step.plan(await step.check(target, patienceOf(true)), target)), row.dryRun);
    });
    test(`${row.name}: a run's patience fails the check`, async (t) => {
      const step = row.step();
      await t.throwsAsync(step.check(step.targets[0]!, patienceOf(false)), { message: row.run });
    });
  }
  test('guest, an image without the agent, SSH up while cloud-init runs: a dry-run plans it for after the boot; a run waits for cloud-init over SSH', async (t) => {
    const facts = (state: 'running' | 'done') => ({
      files: new Map(),
      units: new Map(),
      environments: new Map(),
      dataDirInitialized: true,
      cloudInit: { state },
      retiredFound: new Set<string>(),
      packageFilesMissing: new Set<string>(),
    });
    const execs: string[][] = [];
    const ssh = standInShell({
      exec: async (argv) => {
        execs.push([...argv]);
        return { command: argv.join(' '), code: 0, stdout: '', stderr: '' };
      },
    });
    const sshUp = { reach: async () => ssh, get: async () => ssh };
    const step = (answers: ReturnType<typeof facts>[]) => {
      const probe = { ...agent({ unanswered: 'no agent' }), askNow: async () => answers.shift()! };
      return guestStep({
        inventory: quick,
        members: [quick.members[0]!],
        desired,
        ssh: sshUp,
        probe,
        clients,
        clusterFormed: false,
        diffs: false,
      });
    };
    const dryRun = step([facts('running')]);
    t.deepEqual(summaries(dryRun.plan(await dryRun.check('etcd-1', patienceOf(true)), 'etcd-1')), [
      'converge the guest once its first boot has finished (cloud-init is still running)',
    ]);
    t.deepEqual(execs, [], 'a dry-run does not wait for cloud-init');
    const run = step([facts('running'), facts('done')]);
    t.like(await run.check('etcd-1', patienceOf(false)), { kind: 'probed', facts: { cloudInit: { state: 'done' } } });
    t.is(execs.length, 1, 'a run waits for cloud-init over SSH, then probes again');
  });
  test('guest: an early answer that shows no drift is taken as it is; one that shows drift is asked again before anything is planned', async (t) => {
    const chrony = {
      path: '/etc/chrony/chrony.conf',
      mode: 0o644,
      owner: 'root:root',
      content: 'server a\n',
      display: 'server a\n',
      secret: false,
    };
    const wanted = new Map([
      [
        'etcd-1',
        {
          files: [chrony],
          services: [],
          dataDir: '/var/lib/etcd',
          retired: { units: [], paths: [] },
          packages: { needed: [], install: false },
          directories: [],
        } satisfies DesiredGuest,
      ],
    ]);
    const factsWith = (content: string) => ({
      files: new Map([[chrony.path, { digest: sha256(content), mode: 0o644, owner: 'root:root', mtime: 1 }]]),
      units: new Map(),
      environments: new Map(),
      dataDirInitialized: true,
      cloudInit: { state: 'done' as const },
      retiredFound: new Set<string>(),
      packageFilesMissing: new Set<string>(),
    });
    const step = (early: ReturnType<typeof factsWith>, asked: ReturnType<typeof factsWith>[]) => {
      const probe = standInProbe({ takeEarly: async () => early, askNow: async () => asked.shift()! });
      return guestStep({
        inventory: quick,
        members: [quick.members[0]!],
        desired: wanted,
        ssh: sshRefused([]),
        probe,
        clients,
        clusterFormed: true,
        diffs: false,
      });
    };
    const unchanged: ReturnType<typeof factsWith>[] = [factsWith('later\n')];
    const quiet = step(factsWith('server a\n'), unchanged);
    t.deepEqual(quiet.plan(await quiet.check('etcd-1', patienceOf(false)), 'etcd-1'), []);
    t.is(unchanged.length, 1, 'no drift: not asked again');
    // Drift in the early answer; the answer under the lock shows another run already converged it.
    const converged = step(factsWith('edited by hand\n'), [factsWith('server a\n')]);
    t.deepEqual(converged.plan(await converged.check('etcd-1', patienceOf(false)), 'etcd-1'), []);
    const drifted = step(factsWith('edited by hand\n'), [factsWith('edited again\n')]);
    t.deepEqual(summaries(drifted.plan(await drifted.check('etcd-1', patienceOf(false)), 'etcd-1')), ['update /etc/chrony/chrony.conf']);
  });
  test("guest: a joining member's etcd, waiting to be added, is started and waited for by systemd alone; any other's start waits for the cluster's health", async (t) => {
    const etcd = { unit: 'etcd.service', onChange: 'restart' as const, rolling: true };
    const wanted = new Map([['etcd-1', { ...desired.get('etcd-1')!, services: [etcd] } satisfies DesiredGuest]]);
    // Booted ahead of its turn: etcd exited (not a member yet) and systemd waits out RestartSec.
    const facts = {
      files: new Map(),
      units: new Map([
        ['etcd.service', { loaded: true, enabled: 'enabled', active: 'activating', sub: 'auto-restart', needsDaemonReload: false }],
      ]),
      environments: new Map(),
      dataDirInitialized: false,
      cloudInit: { state: 'done' as const },
      retiredFound: new Set<string>(),
      packageFilesMissing: new Set<string>(),
    };
    const step = (joining: boolean, ran: string[]) => {
      const ssh = standInShell({
        run: async (argv) => {
          ran.push(argv.join(' '));
          return '';
        },
        exec: async (argv) => ({ command: argv.join(' '), stdout: '', stderr: '', code: 0 }),
      });
      return guestStep({
        inventory: quick,
        members: [quick.members[0]!],
        desired: wanted,
        ssh: { reach: async () => ssh, get: async () => ssh },
        probe: standInProbe({ takeEarly: async () => facts, askNow: async () => facts }),
        // Asked for the member's health, the answer is at once that it cannot be.
        clients: { ...etcdDown, unreachable: () => 'its hypervisor did not answer' },
        clusterFormed: false,
        joining,
        diffs: false,
      });
    };
    const ran: string[] = [];
    const joiner = step(true, ran);
    const state = await joiner.check('etcd-1', patienceOf(false));
    const changes = joiner.plan(state, 'etcd-1');
    t.deepEqual(summaries(changes), ['start etcd.service (was activating/auto-restart)']);
    await joiner.apply(changes, 'etcd-1', state);
    t.deepEqual(ran, ['sudo systemctl start etcd.service']);
    const member = step(false, []);
    await t.throwsAsync(member.apply(changes, 'etcd-1', state), {
      message: /^etcd on etcd-1 did not come back after its start: etcd on etcd-1 cannot be asked/,
    });
  });
  test("restore: a booting member's SSH is waited for health_timeout in a run, tried once in a dry-run", async (t) => {
    const windows: number[] = [];
    const step = restoreStep({ inventory: quick, members: quick.members, connections: sshRefused(windows), source });
    await step.check('etcd-1', patienceOf(true));
    await t.throwsAsync(step.check('etcd-1', patienceOf(false)));
    t.deepEqual(windows, [0, 1_000]);
  });
}
dryRunCases();
