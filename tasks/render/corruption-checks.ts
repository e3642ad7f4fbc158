import type { Inventory } from '../inventory/model.ts';
import { compareVersions, type EtcdVersion } from '../upgrade/version.ts';

/**
 * etcd's own corruption checks (etcd.corruption_checks), as the environment of the etcd version a member
 * runs: `experimental-` flags until 3.6, feature gates and unprefixed durations from 3.6 (the experimental
 * names are deprecated there and gone in 3.7). The compact-hash check exists from 3.5.5.
 *
 * With the image's etcd the version is not the tool's to know before etcd runs: the initial and periodic
 * checks take their experimental names, which 3.4, 3.5 and 3.6 all read (a 3.7 image would warn of them and
 * run without); the compact-hash check is left out, since 3.4 has no such flag.
 */

type Checks = Inventory['etcd']['corruptionChecks'];

const V3_5_5: EtcdVersion = { major: 3, minor: 5, patch: 5 };
const V3_6: EtcdVersion = { major: 3, minor: 6, patch: 0 };

export function corruptionCheckSettings(checks: Checks, version: EtcdVersion | undefined): [string, string][] {
  const periodic = checks.periodicInterval !== '0';
  const compactHash = checks.compactHash && version !== undefined && compareVersions(version, V3_5_5) >= 0;
  if (version && compareVersions(version, V3_6) >= 0) {
    const gates = [...(checks.initial ? ['InitialCorruptCheck=true'] : []), ...(compactHash ? ['CompactHashCheck=true'] : [])];
    return [
      ...(gates.length > 0 ? [['ETCD_FEATURE_GATES', gates.join(',')] as [string, string]] : []),
      ...(periodic ? [['ETCD_CORRUPT_CHECK_TIME', checks.periodicInterval] as [string, string]] : []),
      ...(compactHash ? [['ETCD_COMPACT_HASH_CHECK_TIME', checks.compactHashInterval] as [string, string]] : []),
    ];
  }
  return [
    ...(checks.initial ? [['ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK', 'true'] as [string, string]] : []),
    ...(periodic ? [['ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME', checks.periodicInterval] as [string, string]] : []),
    ...(compactHash
      ? ([
          ['ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED', 'true'],
          ['ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_TIME', checks.compactHashInterval],
        ] as [string, string][])
      : []),
  ];
}
