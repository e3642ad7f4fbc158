import test from 'ava';
import type { FileFact, GuestFacts, UnitFact } from '../../tasks/guest/facts.ts';
import { sha256 } from '../../tasks/core/digest.ts';
import { planGuest, rollKindOf, type GuestAction } from '../../tasks/guest/plan.ts';
import { guestReleaseOf } from '../../tasks/render/etcd-release.ts';
import type { DesiredGuest, ManagedFile } from '../../tasks/render/guest/desired.ts';
import type { RollKind } from '../../tasks/core/step.ts';
import { parseVersion } from '../../tasks/upgrade/version.ts';

/**
 * The guest plan with binaries: release, as a table: a member's facts in (the release installed or
 * not, the unit and environment as they are), changes out — the install first, and a restart that
 * can be undone (the environment, which names the release's binary, kept before it is written). The
 * unit is the same for every version: a roll reloads no systemd.
 */

const ENV = '/etc/etcd/etcd.env';
const UNIT = '/etc/systemd/system/etcd.service';
const STARTED = 1_000;
const release = guestReleaseOf(parseVersion('v3.5.30')!);
const previous = guestReleaseOf(parseVersion('v3.5.16')!);
const INSTALL: [GuestAction['kind'], string] = [
  'install-release',
  `install etcd 3.5.30 into ${release.dir} (its release archive, verified on the control node and again in the guest)`,
];

const file = (path: string, content: string, notify?: string): ManagedFile => ({
  path,
  mode: 0o644,
  owner: 'root:root',
  content,
  display: content,
  secret: false,
  ...(notify ? { notify } : {}),
});

const desired: DesiredGuest = {
  files: [
    file(ENV, `ETCD_NAME=etcd-1\nETCDKVM_BINARY=${release.binary}\nETCD_SNAPSHOT_COUNT=10000\n`),
    // biome-ignore lint/suspicious/noTemplateCurlyInString: systemd's expansion of the environment file's variable.
    file(UNIT, '[Service]\nExecStart=/usr/bin/env ${ETCDKVM_BINARY}\n', 'etcd.service'),
  ],
  services: [{ unit: 'etcd.service', onChange: 'restart', rolling: true, environment: { path: ENV, ignore: [] } }],
  dataDir: '/var/lib/etcd',
  release,
  retired: { units: [], paths: [] },
  packages: { needed: [], install: false },
  directories: [],
};

function converged(): GuestFacts {
  const files = new Map<string, FileFact>(
    desired.files.map((f) => [f.path, { digest: sha256(f.content), mode: f.mode, owner: f.owner, mtime: STARTED - 10 }]),
  );
  const unit: UnitFact = {
    loaded: true,
    enabled: 'enabled',
    active: 'active',
    sub: 'running',
    startedAt: STARTED,
    needsDaemonReload: false,
  };
  return {
    files,
    units: new Map([['etcd.service', unit]]),
    environments: new Map([
      [
        'etcd.service',
        new Map([
          ['ETCD_NAME', 'etcd-1'],
          ['ETCDKVM_BINARY', release.binary],
          ['ETCD_SNAPSHOT_COUNT', '10000'],
        ]),
      ],
    ]),
    dataDirInitialized: true,
    cloudInit: { state: 'done' },
    releaseInstalled: true,
    retiredFound: new Set(),
    packageFilesMissing: new Set(),
  };
}

/** The member still on 3.5.16: its environment names the old release's binary, and etcd runs it. */
const onPreviousRelease = (f: GuestFacts) => {
  f.releaseInstalled = false;
  f.files.get(ENV)!.digest = sha256(`ETCD_NAME=etcd-1\nETCDKVM_BINARY=${previous.binary}\nETCD_SNAPSHOT_COUNT=10000\n`);
  f.environments.get('etcd.service')!.set('ETCDKVM_BINARY', previous.binary);
};

const rows: {
  name: string;
  facts: (f: GuestFacts) => void;
  changes: [GuestAction['kind'], string][];
  rollback?: string[];
  roll: RollKind;
}[] = [
  { name: 'the release installed, everything as desired: nothing', facts: () => {}, changes: [], roll: 'keeps-running' },
  {
    name: 'a version change: the release installed first, the environment kept and written, etcd restarted with a way back, no reload',
    facts: onPreviousRelease,
    changes: [
      INSTALL,
      ['keep-previous', `keep the current ${ENV} for a rollback`],
      ['write', `update ${ENV}`],
      ['restart', 'restart etcd.service (one member at a time): running with other ETCDKVM_BINARY'],
    ],
    rollback: [ENV],
    roll: 'restarts',
  },
  {
    name: 'a member whose unit named its binary (before the environment did): both kept before either is written, systemd reloaded once',
    facts: (f) => {
      onPreviousRelease(f);
      f.files.get(UNIT)!.digest = sha256(`[Service]\nExecStart=${previous.binary}\n`);
      f.environments.get('etcd.service')!.delete('ETCDKVM_BINARY');
    },
    changes: [
      INSTALL,
      ['keep-previous', `keep the current ${ENV}, ${UNIT} for a rollback`],
      ['write', `update ${ENV}`],
      ['write', `update ${UNIT}`],
      ['daemon-reload', 'reload systemd (unit files changed)'],
      ['restart', `restart etcd.service (one member at a time): ${UNIT} changes; running with other ETCDKVM_BINARY`],
    ],
    rollback: [ENV, UNIT],
    roll: 'restarts',
  },
  {
    name: 'a killed roll: the environment already written, the restart not done: the restart alone, nothing kept (nothing is rewritten)',
    facts: (f) => {
      f.files.get(ENV)!.mtime = STARTED + 5;
      f.environments.get('etcd.service')!.set('ETCDKVM_BINARY', previous.binary);
    },
    changes: [['restart', 'restart etcd.service (one member at a time): running with other ETCDKVM_BINARY']],
    roll: 'restarts',
  },
  {
    name: 'a first boot: the unit waits for its release: installed, then etcd started',
    facts: (f) => {
      f.releaseInstalled = false;
      f.units.set('etcd.service', { loaded: true, enabled: 'enabled', active: 'inactive', sub: 'dead', needsDaemonReload: false });
      f.environments.clear();
    },
    changes: [INSTALL, ['start', 'start etcd.service (was inactive/dead)']],
    roll: 'starts',
  },
  {
    name: 'the release directory removed by hand, nothing else changed: installed again, etcd keeps running',
    facts: (f) => (f.releaseInstalled = false),
    changes: [INSTALL],
    roll: 'keeps-running',
  },
];

for (const row of rows) {
  test(`guest plan (release): ${row.name}`, (t) => {
    const facts = converged();
    row.facts(facts);
    const changes = planGuest(desired, facts, { clusterFormed: true, currentContent: new Map() });
    t.deepEqual(
      changes.map((change) => [change.action.kind, change.summary]),
      row.changes,
    );
    const restart = changes.find((change) => change.action.kind === 'restart')?.action;
    t.deepEqual(restart?.kind === 'restart' ? restart.rollback : undefined, row.rollback);
    t.is(rollKindOf(changes), row.roll);
  });
}

test('guest plan: with the image binaries nothing is installed and a restart has no rollback', (t) => {
  const { release: _release, ...image } = desired;
  const facts = converged();
  delete facts.releaseInstalled;
  facts.files.get(UNIT)!.digest = sha256('old unit');
  const changes = planGuest(image, facts, { clusterFormed: true, currentContent: new Map() });
  t.deepEqual(
    changes.map((change) => change.action.kind),
    ['write', 'daemon-reload', 'restart'],
  );
  const restart = changes.at(-1)!.action;
  t.true(restart.kind === 'restart' && restart.rollback === undefined);
});

test('guest plan: etcd.stage_version staged beside the running release, never run; once there, nothing; with a roll, installed before the turn', (t) => {
  const next = guestReleaseOf(parseVersion('v3.6.5')!);
  const staging = { ...desired, staged: next };
  const STAGE: [GuestAction['kind'], string] = [
    'install-release',
    `stage etcd 3.6.5 into ${next.dir}, not run (etcd.stage_version: a roll to it then only restarts)`,
  ];
  const plan = (facts: GuestFacts) => planGuest(staging, facts, { clusterFormed: true, currentContent: new Map() });
  const absent = Object.assign(converged(), { stagedInstalled: false });
  t.deepEqual(
    plan(absent).map((change) => [change.action.kind, change.summary]),
    [STAGE],
  );
  t.is(rollKindOf(plan(absent)), 'keeps-running');
  t.deepEqual(plan(Object.assign(converged(), { stagedInstalled: true })), []);
  const rolling = converged();
  onPreviousRelease(rolling);
  rolling.stagedInstalled = false;
  t.deepEqual(
    plan(rolling).map((change) => change.action.kind),
    ['install-release', 'install-release', 'keep-previous', 'write', 'restart'],
  );
  t.deepEqual(plan(rolling)[1]!.summary, STAGE[1]);
});
