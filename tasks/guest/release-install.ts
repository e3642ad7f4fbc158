import { createReadStream } from 'node:fs';
import { RELEASES_GUEST_DIR, type GuestRelease } from '../render/etcd-release.ts';
import type { SshConnection } from '../remote/ssh.ts';
import type { Release } from '../upgrade/release.ts';
import { formatVersion, type EtcdVersion } from '../upgrade/version.ts';

/**
 * A release's archive (on the control node) installed into a member over SSH, checked again against
 * its digest in the guest, unpacked into a temporary directory beside the releases and renamed into
 * place whole: a member has a release's directory only once all of it is there (the probe asks no
 * more than that). Installing again replaces it, so a run killed halfway repeats it harmlessly.
 * The archive is the run's (downloaded and verified once per run, when first needed).
 *
 * At the lowest CPU and I/O weight (nice 19, best-effort I/O priority 7; ionice where the guest has it): the digest
 * and the unpacking take seconds of a TCG guest's one CPU, and a member's etcd, which keeps serving until its own
 * turn, must win every contest for it (issue 50: a roll's clients waited 17-26 s while every member installed).
 */
const INSTALL_SCRIPT = [
  'set -e; umask 022; ionice -c 2 -n 7 -p $$ 2>/dev/null || :; mkdir -p -- "$1"',
  't=$(mktemp -d "$1/.incoming.XXXXXX"); trap \'rm -rf -- "$t"\' EXIT',
  'cat > "$t/release.tar.gz"',
  'echo "$2  $t/release.tar.gz" | sha256sum --check --status || { echo "the archive received has another digest than $2" >&2; exit 1; }',
  'tar -xzf "$t/release.tar.gz" -C "$t" --no-same-owner',
  '[ -x "$t/$3/etcd" ] || { echo "the archive holds no $3/etcd" >&2; exit 1; }',
  'rm -rf -- "$1/$3"; mv -- "$t/$3" "$1/$3"',
].join('\n');

/** A release's archive on the control node, by version (downloaded and verified once per run, when first needed). */
export type ReleaseArchives = (version: EtcdVersion) => Promise<Release>;

export async function installRelease(
  ssh: Pick<SshConnection, 'run'>,
  releaseArchive: ReleaseArchives | undefined,
  release: GuestRelease,
  timeoutMs: number,
): Promise<void> {
  if (!releaseArchive) throw new Error('no release archive for binaries: release (the run was built without one)');
  const archive = await releaseArchive(release.version);
  await ssh.run(['sudo', 'nice', '-n', '19', 'sh', '-c', INSTALL_SCRIPT, 'sh', RELEASES_GUEST_DIR, archive.sha256, archive.name], {
    stdin: createReadStream(archive.archivePath),
    timeoutMs,
    describe: `install etcd ${formatVersion(release.version)}`,
  });
}
