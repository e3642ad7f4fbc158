import test from 'ava';
import { camelized } from '../../tasks/inventory/camel.ts';
import { corruptionCheckSettings } from '../../tasks/render/corruption-checks.ts';
import { etcdEnvironment } from '../../tasks/render/etcd.ts';
import { parseVersion } from '../../tasks/upgrade/version.ts';
import { baseDocument, load, problemsOf } from '../helpers/inventory.ts';

/** etcd's own corruption checks, per etcd version: the inventory's settings in, the member's environment out. */

const DEFAULTS = { initial: true, periodic_interval: '4h', compact_hash: true, compact_hash_interval: '1m' };
type Checks = typeof DEFAULTS;

const rows: { name: string; version?: string; checks?: Partial<Checks>; env: Record<string, string> }[] = [
  {
    name: "the image's etcd (version unknown): initial and periodic, by the names 3.4 to 3.6 read; no compact-hash flag",
    env: { ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK: 'true', ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME: '4h' },
  },
  {
    name: '3.4: no compact-hash check yet',
    version: '3.4.23',
    env: { ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK: 'true', ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME: '4h' },
  },
  {
    name: '3.5.4: still none',
    version: '3.5.4',
    env: { ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK: 'true', ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME: '4h' },
  },
  {
    name: '3.5.5: the compact-hash check, experimental',
    version: '3.5.5',
    env: {
      ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK: 'true',
      ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME: '4h',
      ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED: 'true',
      ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_TIME: '1m',
    },
  },
  {
    name: '3.6: feature gates and the unprefixed durations',
    version: '3.6.5',
    env: {
      ETCD_FEATURE_GATES: 'InitialCorruptCheck=true,CompactHashCheck=true',
      ETCD_CORRUPT_CHECK_TIME: '4h',
      ETCD_COMPACT_HASH_CHECK_TIME: '1m',
    },
  },
  {
    name: '3.7: as 3.6 (no experimental flag at all)',
    version: '3.7.0',
    checks: { periodic_interval: '2h30m', compact_hash_interval: '5m' },
    env: {
      ETCD_FEATURE_GATES: 'InitialCorruptCheck=true,CompactHashCheck=true',
      ETCD_CORRUPT_CHECK_TIME: '2h30m',
      ETCD_COMPACT_HASH_CHECK_TIME: '5m',
    },
  },
  { name: 'all off, 3.5', version: '3.5.30', checks: { initial: false, periodic_interval: '0', compact_hash: false }, env: {} },
  {
    name: 'all off, 3.6: no empty feature gate',
    version: '3.6.5',
    checks: { initial: false, periodic_interval: '0', compact_hash: false },
    env: {},
  },
  {
    name: 'only the compact-hash check, 3.6',
    version: '3.6.5',
    checks: { initial: false, periodic_interval: '0' },
    env: { ETCD_FEATURE_GATES: 'CompactHashCheck=true', ETCD_COMPACT_HASH_CHECK_TIME: '1m' },
  },
];

for (const row of rows)
  test(`corruption checks: ${row.name}`, (t) => {
    const version = row.version === undefined ? undefined : parseVersion(row.version);
    t.deepEqual(Object.fromEntries(corruptionCheckSettings(camelized({ ...DEFAULTS, ...row.checks }), version)), row.env);
  });

test("the inventory's defaults: initial on, periodic every 4 h, compact-hash every minute; in a release member's environment", (t) => {
  const doc = baseDocument();
  doc.etcd = { version: 'v3.5.16', binaries: 'release' };
  const inventory = load(doc);
  t.deepEqual(inventory.etcd.corruptionChecks, camelized(DEFAULTS));
  t.like(Object.fromEntries(etcdEnvironment(inventory, inventory.members[0]!, 'existing')), {
    ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK: 'true',
    ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED: 'true',
  });
});

test('a periodic check more often than a minute, or a duration etcd would not read, is refused at its field', (t) => {
  const withChecks = (checks: Record<string, unknown>) => {
    const doc = baseDocument();
    doc.etcd = { corruption_checks: checks };
    return problemsOf(doc);
  };
  t.deepEqual(withChecks({ periodic_interval: '30s' }), [
    `etcd.corruption_checks.periodic_interval: is 30s: each check hashes every member's whole data — give at least "1m" (etcd recommends a couple of hours), or "0" for none; compact_hash is the cheap, frequent check`,
  ]);
  t.deepEqual(withChecks({ compact_hash_interval: '1 minute' }), [
    'etcd.corruption_checks.compact_hash_interval: must be a duration such as "1m", "4h" or "1h30m", or "0" for none',
  ]);
  t.deepEqual(
    load({ ...baseDocument(), etcd: { corruption_checks: { periodic_interval: '1m30s' } } }).etcd.corruptionChecks.periodicInterval,
    '1m30s',
  );
});

test("etcd.snapshot_count: unset, the release's pin (10000) or etcd's default with the image's; set, the member's snapshot-count either way", (t) => {
  const env = (etcd: Record<string, unknown>) => {
    const doc = baseDocument();
    doc.etcd = etcd;
    const inventory = load(doc);
    return etcdEnvironment(inventory, inventory.members[0]!, 'existing').filter(([key]) => key === 'ETCD_SNAPSHOT_COUNT');
  };
  t.deepEqual(env({}), []);
  t.deepEqual(env({ snapshot_count: 100 }), [['ETCD_SNAPSHOT_COUNT', '100']]);
  t.deepEqual(env({ version: 'v3.5.16', binaries: 'release' }), [['ETCD_SNAPSHOT_COUNT', '10000']]);
  t.deepEqual(env({ version: 'v3.5.16', binaries: 'release', snapshot_count: 2500 }), [['ETCD_SNAPSHOT_COUNT', '2500']]);
  t.deepEqual(problemsOf({ ...baseDocument(), etcd: { snapshot_count: 10 } }), [
    'etcd.snapshot_count: is a number of raft entries; at least 100',
  ]);
});
