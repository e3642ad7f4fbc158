import test from 'ava';
import type { FileFact, GuestFacts, UnitFact } from '../../tasks/guest/facts.ts';
import { planGuest, rollKindOf, sha256, type GuestAction } from '../../tasks/guest/plan.ts';
import { guestReleaseOf } from '../../tasks/render/etcd-release.ts';
import type { DesiredGuest, ManagedFile } from '../../tasks/render/guest/desired.ts';
import type { RollKind } from '../../tasks/core/step.ts';
import { parseVersion } from '../../tasks/upgrade/version.ts';

/**
 * The guest plan with binaries: release, as a table: a member's facts in (the release installed or
 * not, the unit and environment as they are), changes out — the install first, and a restart that
 * can be undone (the unit and environment it replaces kept before they are written).
 */

const ENV = '/etc/etcd/etcd.env';
const UNIT = '/etc/systemd/system/etcd.service';
const STARTED = 1_000;
const release = guestReleaseOf(parseVersion('v3.5.30')!);

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
    file(ENV, 'ETCD_NAME=etcd-1\nETCD_SNAPSHOT_COUNT=10000\n'),
    file(UNIT, `[Service]\nExecStart=${release.binary}\n`, 'etcd.service'),
  ],
  services: [{ unit: 'etcd.service', onChange: 'restart', rolling: true, environment: { path: ENV, ignore: [] } }],
  dataDir: '/var/lib/etcd',
  release,
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
          ['ETCD_SNAPSHOT_COUNT', '10000'],
        ]),
      ],
    ]),
    dataDirInitialized: true,
    cloudInit: { state: 'done' },
    releaseInstalled: true,
  };
}

/** The member still on 3.5.16: its unit names the old release and its environment is the old one. */
const onPreviousRelease = (f: GuestFacts) => {
  f.releaseInstalled = false;
  f.files.get(UNIT)!.digest = sha256('[Service]\nExecStart=/opt/etcd-kvm/etcd-v3.5.16-linux-amd64/etcd\n');
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
    name: 'a version change: the release installed first, unit kept and written, etcd restarted with a way back',
    facts: onPreviousRelease,
    changes: [
      [
        'install-release',
        `install etcd 3.5.30 into ${release.dir} (its release archive, verified on the control node and again in the guest)`,
      ],
      ['keep-previous', `keep the current ${UNIT} for a rollback`],
      ['write', `update ${UNIT}`],
      ['daemon-reload', 'reload systemd (unit files changed)'],
      ['restart', `restart etcd.service (one member at a time): ${UNIT} changes`],
    ],
    rollback: [UNIT],
    roll: 'restarts',
  },
  {
    name: 'a version change with a new environment too: both kept before either is written',
    facts: (f) => {
      onPreviousRelease(f);
      f.files.get(ENV)!.digest = sha256('ETCD_NAME=etcd-1\n');
      f.environments.get('etcd.service')!.delete('ETCD_SNAPSHOT_COUNT');
    },
    changes: [
      [
        'install-release',
        `install etcd 3.5.30 into ${release.dir} (its release archive, verified on the control node and again in the guest)`,
      ],
      ['keep-previous', `keep the current ${ENV}, ${UNIT} for a rollback`],
      ['write', `update ${ENV}`],
      ['write', `update ${UNIT}`],
      ['daemon-reload', 'reload systemd (unit files changed)'],
      ['restart', `restart etcd.service (one member at a time): ${UNIT} changes; running with other ETCD_SNAPSHOT_COUNT`],
    ],
    rollback: [ENV, UNIT],
    roll: 'restarts',
  },
  {
    name: 'a killed roll: the unit already written, the restart not done: the restart alone, nothing kept (the unit is not rewritten)',
    facts: (f) => {
      f.files.get(UNIT)!.mtime = STARTED + 5;
    },
    changes: [['restart', `restart etcd.service (one member at a time): ${UNIT} changed after it started`]],
    roll: 'restarts',
  },
  {
    name: 'a first boot: the unit waits for its release: installed, then etcd started',
    facts: (f) => {
      f.releaseInstalled = false;
      f.units.set('etcd.service', { loaded: true, enabled: 'enabled', active: 'inactive', sub: 'dead', needsDaemonReload: false });
      f.environments.clear();
    },
    changes: [
      [
        'install-release',
        `install etcd 3.5.30 into ${release.dir} (its release archive, verified on the control node and again in the guest)`,
      ],
      ['start', 'start etcd.service (was inactive/dead)'],
    ],
    roll: 'starts',
  },
  {
    name: 'the release directory removed by hand, nothing else changed: installed again, etcd keeps running',
    facts: (f) => (f.releaseInstalled = false),
    changes: [
      [
        'install-release',
        `install etcd 3.5.30 into ${release.dir} (its release archive, verified on the control node and again in the guest)`,
      ],
    ],
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
