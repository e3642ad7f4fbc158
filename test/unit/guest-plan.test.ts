import test from 'ava';
import type { FileFact, GuestFacts, UnitFact } from '../../tasks/guest/facts.ts';
import { sha256 } from '../../tasks/core/digest.ts';
import { planGuest, RefusedError, rollKindOf, type GuestAction, type GuestChange } from '../../tasks/guest/plan.ts';
import type { DesiredGuest, ManagedFile } from '../../tasks/render/guest/desired.ts';
import { BACKUP_PACKAGES } from '../../tasks/render/guest/member-agent.ts';

/** The guest step's plan as a table: a member's desired contents and facts in, changes out. */

const ENV = '/etc/etcd/etcd.env';
const UNIT = '/etc/systemd/system/etcd.service';
const KEY = '/etc/etcd/tls/server.key';
const CHRONY = '/etc/chrony/chrony.conf';
const AGENT_DIR = '/etc/etcd-kvm/agent';
const STARTED = 1_000;
/** A task turned off in the inventory: what it left behind is retired. */
const BACKUP_SERVICE = 'etcd-kvm-backup.service';
const BACKUP_TIMER = 'etcd-kvm-backup.timer';
const BACKUP_TIMER_LINK = `/etc/systemd/system/timers.target.wants/${BACKUP_TIMER}`;
const S3_KEY = '/etc/etcd-kvm/agent/s3-secret-key';
/** A recovery's --force-new-cluster, under /run: only a recovery under way may leave it (render/etcd.ts). */
const FORCE_DROP_IN = '/run/systemd/system/etcd.service.d/etcd-kvm-force-new-cluster.conf';
const FORCE_WHY = 'a recover that did not finish';

const file = (path: string, content: string, extra: Partial<ManagedFile> = {}): ManagedFile => ({
  path,
  mode: 0o644,
  owner: 'root:root',
  content,
  display: content,
  secret: false,
  ...extra,
});

const desired: DesiredGuest = {
  files: [
    file(ENV, 'ETCD_NAME=etcd-1\nETCD_QUOTA_BACKEND_BYTES=100\nETCD_INITIAL_CLUSTER_STATE=existing\n'),
    file(UNIT, '[Service]\nExecStart=/usr/bin/etcd\n', { notify: 'etcd.service' }),
    file(KEY, 'PRIVATE', { mode: 0o400, owner: 'etcd:etcd', display: '<redacted>', secret: true }),
    file(CHRONY, 'server 10.0.0.1 iburst\n', { notify: 'chrony.service' }),
  ],
  services: [
    { unit: 'etcd.service', onChange: 'restart', rolling: true, environment: { path: ENV, ignore: ['ETCD_INITIAL_CLUSTER_STATE'] } },
    { unit: 'chrony.service', onChange: 'restart' },
  ],
  dataDir: '/var/lib/etcd',
  retired: {
    units: [BACKUP_TIMER, BACKUP_SERVICE],
    paths: [`/etc/systemd/system/${BACKUP_SERVICE}`, `/etc/systemd/system/${BACKUP_TIMER}`, S3_KEY, FORCE_DROP_IN],
    why: { [FORCE_DROP_IN]: FORCE_WHY },
  },
  packages: { needed: [], install: false },
  directories: [{ path: AGENT_DIR, mode: 0o755, owner: 'root:root' }],
};

const RUNNING_ENV = new Map([
  ['ETCD_NAME', 'etcd-1'],
  ['ETCD_QUOTA_BACKEND_BYTES', '100'],
  ['ETCD_INITIAL_CLUSTER_STATE', 'new'],
  ['PATH', '/usr/bin'],
]);

/** Facts of a member that holds exactly what is desired, everything started after its files were written. */
function converged(): GuestFacts {
  const files = new Map<string, FileFact>(
    desired.files.map((f) => [f.path, { digest: sha256(f.content), mode: f.mode, owner: f.owner, mtime: STARTED - 10 }]),
  );
  // A directory as the probe sees one: stat's mode and owner, no digest.
  files.set(AGENT_DIR, { digest: '', mode: 0o755, owner: 'root:root', mtime: STARTED - 10 });
  const unit = (): UnitFact => ({
    loaded: true,
    enabled: 'enabled',
    active: 'active',
    sub: 'running',
    startedAt: STARTED,
    needsDaemonReload: false,
  });
  return {
    files,
    units: new Map([
      ['etcd.service', unit()],
      ['chrony.service', unit()],
    ]),
    environments: new Map([['etcd.service', new Map(RUNNING_ENV)]]),
    dataDirInitialized: true,
    cloudInit: { state: 'done' },
    retiredFound: new Set(),
    packageFilesMissing: new Set(),
  };
}

const context = { clusterFormed: true, currentContent: new Map<string, string>() };
const summaries = (changes: GuestChange[]) => changes.map((change) => change.summary);

interface Case {
  name: string;
  facts: (facts: GuestFacts) => void;
  /** Each change the plan makes, in order: the kind of action apply takes, and the summary an operator reads. */
  changes: [GuestAction['kind'], string][];
  current?: Map<string, string>;
}

const cases: Case[] = [
  { name: 'everything as desired: nothing', facts: () => {}, changes: [] },
  {
    name: 'a running environment differing only in first-start variables: nothing',
    facts: (f) => f.environments.get('etcd.service')!.set('ETCD_INITIAL_CLUSTER_STATE', 'whatever'),
    changes: [],
  },
  {
    name: 'absent file: created; its service restarted (the file changes)',
    facts: (f) => f.files.delete(CHRONY),
    changes: [
      ['write', `create ${CHRONY} (0644 root:root)`],
      ['restart', `restart chrony.service: ${CHRONY} changes`],
    ],
  },
  {
    name: 'different content of the environment: written; etcd restarted (rolling) because it runs other values',
    facts: (f) => {
      f.files.get(ENV)!.digest = sha256('ETCD_QUOTA_BACKEND_BYTES=50\n');
      f.environments.get('etcd.service')!.set('ETCD_QUOTA_BACKEND_BYTES', '50');
    },
    changes: [
      ['write', `update ${ENV}`],
      ['restart', 'restart etcd.service (one member at a time): running with other ETCD_QUOTA_BACKEND_BYTES'],
    ],
  },
  {
    name: 'environment file written by a run killed before its restart: the restart alone',
    facts: (f) => f.environments.get('etcd.service')!.set('ETCD_QUOTA_BACKEND_BYTES', '50'),
    changes: [['restart', 'restart etcd.service (one member at a time): running with other ETCD_QUOTA_BACKEND_BYTES']],
  },
  {
    name: 'a variable dropped from the file still set in the running process: restart',
    facts: (f) => f.environments.get('etcd.service')!.set('ETCD_TRUSTED_CA_FILE', '/etc/etcd/tls/ca.crt'),
    changes: [['restart', 'restart etcd.service (one member at a time): running with other ETCD_TRUSTED_CA_FILE']],
  },
  {
    name: 'a notified file changed after its service started (a killed run): restart',
    facts: (f) => (f.files.get(CHRONY)!.mtime = STARTED + 5),
    changes: [['restart', `restart chrony.service: ${CHRONY} changed after it started`]],
  },
  {
    name: 'unit file changed: written, systemd reloaded, etcd restarted',
    facts: (f) => (f.files.get(UNIT)!.digest = sha256('old')),
    changes: [
      ['write', `update ${UNIT}`],
      ['daemon-reload', 'reload systemd (unit files changed)'],
      ['restart', `restart etcd.service (one member at a time): ${UNIT} changes`],
    ],
  },
  {
    name: 'systemd has not read a unit file yet (a killed run): reload',
    facts: (f) => (f.units.get('chrony.service')!.needsDaemonReload = true),
    changes: [['daemon-reload', 'reload systemd (unit files changed)']],
  },
  {
    name: 'wrong mode: fixed without rewriting',
    facts: (f) => (f.files.get(KEY)!.mode = 0o644),
    changes: [['attributes', `fix ${KEY}: mode 0644 → 0400`]],
  },
  {
    name: 'wrong owner: fixed without rewriting',
    facts: (f) => (f.files.get(KEY)!.owner = 'root:root'),
    changes: [['attributes', `fix ${KEY}: owner root:root → etcd:etcd`]],
  },
  {
    name: 'a managed directory made private (a feature turned on by an earlier version): its mode fixed, so its service can enter it',
    facts: (f) => (f.files.get(AGENT_DIR)!.mode = 0o700),
    changes: [['attributes', `fix directory ${AGENT_DIR}: mode 0700 → 0755`]],
  },
  {
    name: 'a managed directory of another owner: its owner fixed',
    facts: (f) => (f.files.get(AGENT_DIR)!.owner = 'etcd:etcd'),
    changes: [['attributes', `fix directory ${AGENT_DIR}: owner etcd:etcd → root:root`]],
  },
  {
    name: 'a managed directory not there yet: nothing of its own (the writes into it make it as wanted)',
    facts: (f) => f.files.delete(AGENT_DIR),
    changes: [],
  },
  {
    name: 'secret changed: rewritten, the content never shown',
    facts: (f) => (f.files.get(KEY)!.digest = sha256('OLD PRIVATE')),
    changes: [['write', `update ${KEY} (secret: content not shown)`]],
  },
  {
    name: 'stopped etcd: started (rolling), not restarted',
    facts: (f) => Object.assign(f.units.get('etcd.service')!, { active: 'inactive', sub: 'dead' }),
    changes: [['start', 'start etcd.service (was inactive/dead)']],
  },
  {
    name: 'a failed unit waiting for its automatic restart (Restart=on-failure) is not running: started',
    facts: (f) => {
      const etcd = f.units.get('etcd.service')!;
      etcd.active = 'activating';
      etcd.sub = 'auto-restart';
      f.environments.delete('etcd.service');
    },
    changes: [['start', 'start etcd.service (was activating/auto-restart)']],
  },
  {
    name: 'a service systemd is starting by itself (no process to read yet) while its environment file changes: written, then restarted',
    facts: (f) => {
      f.units.get('etcd.service')!.active = 'activating';
      f.files.get(ENV)!.digest = sha256('ETCD_QUOTA_BACKEND_BYTES=50\n');
      f.environments.delete('etcd.service');
    },
    changes: [
      ['write', `update ${ENV}`],
      ['restart', `restart etcd.service (one member at a time): ${ENV} changes and what it runs with could not be read`],
    ],
  },
  {
    name: 'a service still starting (etcd waiting for its peers) is left to start',
    facts: (f) => (f.units.get('etcd.service')!.active = 'activating'),
    changes: [],
  },
  {
    name: 'disabled service: enabled',
    facts: (f) => (f.units.get('chrony.service')!.enabled = 'disabled'),
    changes: [['enable', 'enable chrony.service (was disabled)']],
  },
  {
    name: 'a task turned off: its units stopped, then its unit files, enable link and secrets removed, systemd reloaded',
    facts: (f) => {
      f.retiredFound = new Set([`/etc/systemd/system/${BACKUP_SERVICE}`, `/etc/systemd/system/${BACKUP_TIMER}`, BACKUP_TIMER_LINK, S3_KEY]);
    },
    changes: [
      ['stop', `stop ${BACKUP_TIMER}, ${BACKUP_SERVICE} (turned off in the inventory)`],
      ['remove', `remove /etc/systemd/system/${BACKUP_SERVICE} (turned off in the inventory)`],
      ['remove', `remove /etc/systemd/system/${BACKUP_TIMER} (turned off in the inventory)`],
      ['remove', `remove ${S3_KEY} (turned off in the inventory)`],
      ['remove', `remove ${BACKUP_TIMER_LINK} (turned off in the inventory)`],
      ['daemon-reload', 'reload systemd (unit files changed)'],
    ],
  },
  {
    name: 'a run killed after the unit files went: the enable link left is removed, nothing stopped again',
    facts: (f) => {
      f.retiredFound = new Set([BACKUP_TIMER_LINK]);
    },
    changes: [
      ['remove', `remove ${BACKUP_TIMER_LINK} (turned off in the inventory)`],
      ['daemon-reload', 'reload systemd (unit files changed)'],
    ],
  },
  {
    name: 'a secret left alone (no unit of it there): removed, no reload',
    facts: (f) => {
      f.retiredFound = new Set([S3_KEY]);
    },
    changes: [['remove', `remove ${S3_KEY} (turned off in the inventory)`]],
  },
  {
    name: "a recovery's --force-new-cluster drop-in left behind: removed and systemd reloaded, etcd not restarted for it",
    facts: (f) => {
      f.retiredFound = new Set([FORCE_DROP_IN]);
    },
    changes: [
      ['remove', `remove ${FORCE_DROP_IN} (${FORCE_WHY})`],
      ['daemon-reload', 'reload systemd (unit files changed)'],
    ],
  },
  {
    name: 'the drop-in left behind while etcd runs forced (a killed recover): removed and reloaded before etcd restarts without it',
    facts: (f) => {
      f.retiredFound = new Set([FORCE_DROP_IN]);
      f.environments.get('etcd.service')!.set('ETCD_FORCE_NEW_CLUSTER', 'true');
    },
    changes: [
      ['remove', `remove ${FORCE_DROP_IN} (${FORCE_WHY})`],
      ['daemon-reload', 'reload systemd (unit files changed)'],
      ['restart', 'restart etcd.service (one member at a time): running with other ETCD_FORCE_NEW_CLUSTER'],
    ],
  },
  {
    name: 'unknown unit: enabled and started',
    facts: (f) => f.units.delete('chrony.service'),
    changes: [
      ['enable', 'enable chrony.service'],
      ['start', 'start chrony.service (was unknown)'],
    ],
  },
];

for (const row of cases) {
  test(`guest plan: ${row.name}`, (t) => {
    const facts = converged();
    row.facts(facts);
    const changes = planGuest(desired, facts, { ...context, currentContent: row.current ?? new Map() });
    t.deepEqual(
      changes.map((change) => [change.action.kind, change.summary]),
      row.changes,
    );
  });
}

test('guest plan: a drifted file shows its current text against the wanted one', (t) => {
  const facts = converged();
  facts.files.get(CHRONY)!.digest = sha256('server 10.9.9.9\n');
  const [change] = planGuest(desired, facts, { ...context, currentContent: new Map([[CHRONY, 'server 10.9.9.9\n']]) });
  t.deepEqual(change!.diff, { label: CHRONY, before: 'server 10.9.9.9\n', after: 'server 10.0.0.1 iburst\n' });
});

test('guest plan: without the current text (a run that shows no diffs) an update carries no diff, rather than one from an empty file', (t) => {
  const facts = converged();
  facts.files.get(CHRONY)!.digest = sha256('server 10.9.9.9\n');
  const [change] = planGuest(desired, facts, { clusterFormed: true });
  t.is(change!.summary, `update ${CHRONY}`);
  t.is(change!.diff, undefined);
});

test('guest plan: no diff of a secret, created or changed, carries its content', (t) => {
  const facts = converged();
  facts.files.delete(KEY);
  const changes = planGuest(desired, facts, context);
  t.deepEqual(summaries(changes), [`create ${KEY} (0400 etcd:etcd, secret: content not shown)`]);
  t.is(changes[0]!.diff, undefined);
  t.false(JSON.stringify(changes.map(({ summary, diff }) => ({ summary, diff }))).includes('PRIVATE'));
});

test('guest plan: an empty data directory in a formed cluster is refused; while the cluster forms it is not', (t) => {
  const facts = converged();
  facts.dataDirInitialized = false;
  const error = t.throws(() => planGuest(desired, facts, context), { instanceOf: RefusedError });
  t.regex(error!.message, /holds no member data, but the cluster has formed/);
  t.deepEqual(planGuest(desired, facts, { ...context, clusterFormed: false }), []);
});

test('guest plan: a member stands in the roll by what it does to etcd only', (t) => {
  const stopped = converged();
  stopped.units.get('etcd.service')!.active = 'inactive';
  stopped.files.get(CHRONY)!.mtime = STARTED + 5;
  // etcd is down and chrony restarts: a member to start, not an etcd restart to put last.
  t.is(rollKindOf(planGuest(desired, stopped, context)), 'starts');
  const drifted = converged();
  drifted.environments.get('etcd.service')!.set('ETCD_QUOTA_BACKEND_BYTES', '50');
  t.is(rollKindOf(planGuest(desired, drifted, context)), 'restarts');
  const chronyOnly = converged();
  chronyOnly.files.get(CHRONY)!.mtime = STARTED + 5;
  t.is(rollKindOf(planGuest(desired, chronyOnly, context)), 'keeps-running');
});

test('guest plan: a stopped service whose files change is started with restart semantics, one whose files are current with start', (t) => {
  const startOf = (changes: GuestChange[]) => changes.map((c) => c.action).find((a) => a.kind === 'start');
  const stale = converged();
  stale.units.get('etcd.service')!.active = 'failed';
  stale.files.get(ENV)!.digest = sha256('ETCD_QUOTA_BACKEND_BYTES=50\n');
  // systemd may bring it up by itself (Restart=on-failure) before the apply, with the old file.
  t.like(startOf(planGuest(desired, stale, context)), { kind: 'start', configChanged: true });
  const current = converged();
  current.units.get('etcd.service')!.active = 'failed';
  t.like(startOf(planGuest(desired, current, context)), { kind: 'start', configChanged: false });
  const chrony = converged();
  chrony.units.get('chrony.service')!.active = 'inactive';
  chrony.files.delete(CHRONY);
  t.like(startOf(planGuest(desired, chrony, context)), { kind: 'start', configChanged: true });
});

/** The packages the backup agent needs (python3-nacl, python3-botocore): absent, equal, refused, installed. */
const packageCases: {
  name: string;
  install: boolean;
  missing: string[];
  drifted?: boolean;
  changes?: [GuestAction['kind'], string][];
  refused?: RegExp;
}[] = [
  { name: 'both there: nothing', install: false, missing: [], changes: [] },
  { name: 'both there, install_dependencies: nothing', install: true, missing: [], changes: [] },
  {
    name: 'botocore absent from the image: refused by name, with what needs it and how to mend it',
    install: false,
    missing: ['python3-botocore'],
    refused:
      /^the image lacks python3-botocore \(\/usr\/lib\/python3\/dist-packages\/botocore\/auth\.py is not there; the backup agent signs its S3 requests with its SigV4 signer\)\. Install python3-botocore in the member's image \(apt-get install python3-botocore\), or set the member's install_dependencies: true/,
  },
  {
    name: 'both absent: both named',
    install: false,
    missing: ['python3-nacl', 'python3-botocore'],
    refused: /lacks python3-nacl .* and python3-botocore .*apt-get install python3-nacl python3-botocore/,
  },
  {
    name: 'install_dependencies: the missing one installed, first of all',
    install: true,
    missing: ['python3-nacl'],
    drifted: true,
    changes: [
      ['install-packages', "install python3-nacl from Debian (the backup agent seals snapshots with it (libsodium's XChaCha20-Poly1305))"],
      ['write', `update ${CHRONY}`],
      ['restart', `restart chrony.service: ${CHRONY} changes`],
    ],
  },
];

for (const row of packageCases) {
  test(`guest plan, packages: ${row.name}`, (t) => {
    const wanted: DesiredGuest = { ...desired, packages: { needed: [...BACKUP_PACKAGES], install: row.install } };
    const facts = converged();
    facts.packageFilesMissing = new Set(BACKUP_PACKAGES.filter((need) => row.missing.includes(need.name)).map((need) => need.path));
    if (row.drifted) facts.files.get(CHRONY)!.digest = sha256('server 10.9.9.9\n');
    if (row.refused) {
      t.throws(() => planGuest(wanted, facts, context), { instanceOf: RefusedError, message: row.refused });
      return;
    }
    t.deepEqual(
      planGuest(wanted, facts, context).map((change) => [change.action.kind, change.summary]),
      row.changes,
    );
  });
}
