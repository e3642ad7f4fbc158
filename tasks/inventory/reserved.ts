/**
 * Names and keys the tool keeps for itself. The inventory may not give them to anything of its own:
 * two things of one name would be one thing (a certificate, a file, a step's target, an etcd key).
 */

/**
 * etcd user names the tool gives a meaning, with why: compared regardless of case, as the files named
 * after users (the state directory's pki/clients/NAME.crt, a client bundle's NAME.crt) are on a macOS
 * control node. Members' names are reserved too (their certificates carry CN=<member>): a rule checks them.
 */
export const RESERVED_USER_NAMES: Readonly<Record<string, string>> = {
  root: 'the user the tool bootstraps authentication with (its client certificate has CN=root)',
  ca: "the cluster CA's file in a client bundle (ca.crt), which this user's certificate would replace",
};

/**
 * The tool names its own identities with this prefix: its members' peer certificates carry
 * CN=etcd-kvm-peer (pki/peer-trust.ts), which the peer port admits. No user name starts with it, in
 * any case, so no client certificate the tool issues can carry one of those names.
 */
export const TOOL_NAME_PREFIX = 'etcd-kvm';

/**
 * Every etcd key the tool reads or writes is under this prefix: the record of the users and roles it
 * manages, the probe of whether authentication is on. An application role may not reach into it.
 */
export const TOOL_KEY_PREFIX = 'etcd-kvm/';

/**
 * The guest accounts the tool's services run as (render/guest: etcd, the node exporter, Vault agent,
 * fluent-bit's configuration updater), and root: the admin user, with sudo and SSH keys, is never one
 * of them, or cloud-init would merge the two and a service would run as an account that logs in.
 */
export const GUEST_SERVICE_ACCOUNTS: readonly string[] = ['root', 'etcd', 'prometheus', 'vault', 'fluent-bit-updater'];

/** The end of the range holding every key that starts with `prefix` (etcdctl's --prefix); an empty buffer: no end. */
export function prefixEnd(prefix: Buffer): Buffer {
  const end = Buffer.from(prefix);
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i]! < 0xff) {
      end[i]! += 1;
      return end.subarray(0, i + 1);
    }
  }
  // Only 0xff bytes: every key from the prefix on (etcd writes that end as a single zero byte).
  return Buffer.from([0]);
}

/** etcd's range end "\0": every key from the start key on. */
const isOpenEnd = (end: Buffer) => end.length === 1 && end[0] === 0;

/**
 * Whether a permission on a key (`rangeEnd` empty) or on the range [key, rangeEnd) reaches any key
 * under TOOL_KEY_PREFIX. Two ranges overlap when each starts before the other ends.
 */
export function reachesToolKeys(key: Buffer, rangeEnd: Buffer): boolean {
  const start = Buffer.from(TOOL_KEY_PREFIX);
  const end = prefixEnd(start);
  if (rangeEnd.length === 0) return Buffer.compare(key, start) >= 0 && Buffer.compare(key, end) < 0;
  return Buffer.compare(key, end) < 0 && (isOpenEnd(rangeEnd) || Buffer.compare(start, rangeEnd) < 0);
}
