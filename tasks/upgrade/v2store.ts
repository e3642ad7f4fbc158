/**
 * etcd's 3.6 upgrade guide: before the first 3.6 member, `etcdutl check v2store` must find nothing in
 * any member's v2 store besides membership. etcdutl only reads the snapshot files and the WAL, so it
 * is run beside the running etcd, as the etcd user, with the etcdutl of the release the member runs
 * now (3.5.x has the command). Checked on real 3.5.30 binaries: exit 0 and "No custom content found
 * in v2store." on a clean store, exit 1 and "Error: detected custom content in v2store" after v2
 * writes, with etcd running on the data directory both times.
 */

/** `etcdutl check v2store` on a member's data, or why it could not be asked. */
export type V2StoreVerdict = { clean: true } | { clean: false; detail: string } | { unchecked: string };

/** The command, as the etcd user (the data directory is etcd's, 0700), with `etcdutl` the one of the release the member runs. */
export const v2StoreCheckCommand = (etcdutl: string, dataDir: string): string[] => [
  'sudo',
  '-u',
  'etcd',
  etcdutl,
  'check',
  'v2store',
  '--data-dir',
  dataDir,
];

const CLEAN = /no custom content found in v2store/i;
const CUSTOM = /detected custom content in v2store/i;

/** etcdutl's exit code and output as a verdict: only its own words count as clean or not; anything else was not a check. */
export function v2StoreVerdict(code: number, output: string): V2StoreVerdict {
  if (code === 0 && CLEAN.test(output)) return { clean: true };
  if (CUSTOM.test(output)) return { clean: false, detail: 'custom (non-membership) data in its v2 store' };
  const said = output.trim().split('\n').at(-1)?.trim().slice(0, 200) || '(nothing)';
  return { unchecked: `etcdutl check v2store exited ${code}: ${said}` };
}
