import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { $ } from 'zx';
import { ownApt, type OwnApt } from './apt.ts';
import { ETCD_RELEASES, LAB, labPath } from './config.ts';

/**
 * Release-shaped etcd tarballs for the lab (issue 26): Debian's etcd-server and etcd-client packages,
 * fetched with an apt configuration of the lab's own, repackaged as etcd's GitHub releases are
 * (etcd-vX.Y.Z-linux-amd64.tar.gz with a top directory of that name, and a SHA256SUMS beside it),
 * and served from RELEASES_DIR at LAB.releaseUrl by a small HTTP server (release-server.mjs).
 */

type Release = (typeof ETCD_RELEASES)[number];

/** The served tree: RELEASES_DIR/v3.5.16/{etcd-v3.5.16-linux-amd64.tar.gz,SHA256SUMS}. */
export const RELEASES_DIR = labPath('releases');
/** The lab's own apt sources, lists and cache: the machine's are never used nor changed. */
const APT_DIR = labPath('apt');
/** Downloads and staging of one run; a killed run's leftovers are removed by the next. */
const BUILD_DIR = labPath('releases-build');

/** /proc/<pid>/comm of the release server, which sets it as its process title (15 characters at most). */
export const RELEASE_SERVER_COMMAND = 'etcdlab-release';

const releaseName = (release: Release) => `etcd-v${release.version}-linux-amd64`;
const releaseDir = (release: Release) => join(RELEASES_DIR, `v${release.version}`);
const releaseFile = (release: Release, name: string) => join(releaseDir(release), name);
const tarballOf = (release: Release) => releaseFile(release, `${releaseName(release)}.tar.gz`);
const sumsOf = (release: Release) => releaseFile(release, 'SHA256SUMS');
/** The Debian version a tarball was built from: a changed pin rebuilds it even when the upstream version is the same. */
const provenanceOf = (release: Release) => releaseFile(release, '.debian-version');

/** etcdutl appeared in 3.5; 3.4 releases have etcd and etcdctl only. */
const binariesOf = (release: Release) => (release.version.startsWith('3.4.') ? ['etcd', 'etcdctl'] : ['etcd', 'etcdctl', 'etcdutl']);

const sha256 = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex');
const sumsLine = (release: Release) => `${sha256(tarballOf(release))}  ${releaseName(release)}.tar.gz\n`;

/** Built, and unchanged since: the tarball matches its SHA256SUMS and came from the pinned package. */
function isBuilt(release: Release): boolean {
  const files = [tarballOf(release), sumsOf(release), provenanceOf(release)];
  if (!files.every((file) => existsSync(file))) return false;
  return (
    readFileSync(provenanceOf(release), 'utf8') === release.debianVersion && readFileSync(sumsOf(release), 'utf8') === sumsLine(release)
  );
}

/** Builds the releases that are missing or stale; apt runs only then. */
export async function ensureReleases(log: (line: string) => void): Promise<void> {
  const missing = ETCD_RELEASES.filter((release) => !isBuilt(release));
  if (missing.length === 0) return;
  const started = performance.now();
  rmSync(BUILD_DIR, { recursive: true, force: true });
  mkdirSync(BUILD_DIR, { recursive: true, mode: 0o755 });
  try {
    log(`releases: fetching etcd ${missing.map((release) => release.debianVersion).join(', ')} from Debian`);
    const apt = await updateLists([...new Set(missing.map((release) => release.suite))]);
    for (const release of missing) await downloadDebs(apt, release);
    const fetched = performance.now();
    for (const release of missing) await repackage(release);
    log(
      `releases: built ${missing.map(releaseName).join(', ')} in ${seconds(performance.now() - started)} (apt ${seconds(fetched - started)}, repackaging ${seconds(performance.now() - fetched)})`,
    );
  } finally {
    rmSync(BUILD_DIR, { recursive: true, force: true });
  }
}

/** One line per release for lab:status. */
export function releasesStatus(): string {
  const states = ETCD_RELEASES.map((release) => `v${release.version} ${isBuilt(release) ? 'built' : 'missing'}`);
  return `releases ${LAB.releaseUrl}: ${states.join(', ')}`;
}

/** Lists of the suites asked for only, in the lab's own apt directory; the apt that reads them. */
async function updateLists(suites: string[]): Promise<OwnApt['run']> {
  const { run } = ownApt(
    APT_DIR,
    suites.map((suite) => `deb http://deb.debian.org/debian ${suite} main`),
  );
  await run(['update']);
  return run;
}

/** Into a directory of the release's own, owned by _apt so that apt's download sandbox can write there. */
async function downloadDebs(apt: OwnApt['run'], release: Release): Promise<void> {
  const dir = join(BUILD_DIR, release.version);
  mkdirSync(dir, { mode: 0o755 });
  await $`chown _apt ${dir}`;
  await apt(['download', `etcd-server=${release.debianVersion}`, `etcd-client=${release.debianVersion}`], dir);
}

async function repackage(release: Release): Promise<void> {
  const dir = join(BUILD_DIR, release.version);
  const root = join(dir, 'root');
  for (const deb of readdirSync(dir).filter((name) => name.endsWith('.deb'))) await $`dpkg-deb -x ${join(dir, deb)} ${root}`;
  const stage = join(dir, 'stage');
  const top = join(stage, releaseName(release));
  mkdirSync(top, { recursive: true });
  chmodSync(top, 0o755);
  for (const binary of binariesOf(release)) {
    copyFileSync(join(root, 'usr/bin', binary), join(top, binary));
    chmodSync(join(top, binary), 0o755);
  }
  await checkVersion(top, release);
  // Sorted, root-owned, dated by the package's build and gzip without a name or time: a rebuild
  // (after a lost directory, a killed run) gives the same bytes, so the same digest.
  const built = Math.floor(statSync(join(root, 'usr/bin/etcd')).mtimeMs / 1000);
  const partial = join(dir, 'release.tar.gz');
  await $`tar --sort=name --mtime=${`@${built}`} --owner=0 --group=0 --numeric-owner -I ${'gzip -n'} -C ${stage} -cf ${partial} ${releaseName(release)}`;
  mkdirSync(releaseDir(release), { recursive: true });
  // The provenance goes last, written only once tarball and sums are in place: until then the release is not built.
  rmSync(provenanceOf(release), { force: true });
  renameSync(partial, tarballOf(release));
  writeAtomically(sumsOf(release), sumsLine(release));
  writeAtomically(provenanceOf(release), release.debianVersion);
}

/** The package holds the upstream version pinned beside it, and its binary runs on this machine. */
async function checkVersion(top: string, release: Release): Promise<void> {
  const output = (await $`${join(top, 'etcd')} --version`).stdout;
  if (!output.includes(`etcd Version: ${release.version}\n`)) {
    throw new Error(`releases: etcd-server ${release.debianVersion} reports ${output.split('\n')[0]}, not ${release.version}`);
  }
}

function writeAtomically(path: string, content: string): void {
  writeFileSync(`${path}.partial`, content);
  renameSync(`${path}.partial`, path);
}

/** Starts the server detached from lab:up, its PID in `pidFile`; what it says on stderr goes to a log beside it. */
export function startReleaseServer(pidFile: string): void {
  const url = new URL(LAB.releaseUrl);
  const log = openSync(pidFile.replace(/\.pid$/, '.log'), 'a');
  const child = spawn(
    process.execPath,
    [join(import.meta.dirname, 'release-server.mjs'), url.hostname, String(LAB.releasePort), url.pathname, RELEASES_DIR],
    { detached: true, stdio: ['ignore', 'ignore', log] },
  );
  child.unref();
  closeSync(log);
  writeFileSync(pidFile, `${child.pid}\n`);
}

/** Ready when every release's SHA256SUMS is served (a server missing one, say started before a release was added, is restarted). */
export async function releasesServed(): Promise<boolean> {
  for (const release of ETCD_RELEASES) {
    const response = await fetch(`${LAB.releaseUrl}/v${release.version}/SHA256SUMS`, { signal: AbortSignal.timeout(2_000) }).catch(
      () => undefined,
    );
    if (!response?.ok) return false;
    await response.arrayBuffer();
  }
  return true;
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
