import type { Inventory, Member } from '../../inventory/model.ts';
import { quote } from '../../core/shell.ts';
import { releaseTag } from '../../upgrade/version.ts';
import { renderTemplate } from '../templates.ts';
import { CONFIG_UPDATER, usesDynamicConfig } from './fluent-bit-dynamic.ts';
import type { CloudConfigFragment } from './fragment.ts';
import { UPSTREAM } from './versions.ts';

/**
 * install_dependencies: false means the image already carries everything (the lab image does, from
 * Debian). true installs etcd and the enabled services from their upstream releases/repositories at
 * pinned versions, as the seed module does: that needs the guests to reach the internet.
 */

export const INSTALLER_PATH = '/usr/local/sbin/etcd-kvm-install-upstream';

/** Where the etcd binaries are: Debian's package or the upstream release. */
export const etcdBinaryDir = (member: Member) => (member.installDependencies ? '/usr/local/bin' : '/usr/bin');

interface AptRepository {
  name: string;
  keyUrl: string;
  sourceLine: string;
}

/** Ferlab's goreleaser releases: <project>_<version>_linux_amd64.tar.gz next to <project>_<version>_SHA256SUMS. */
function updaterRelease(member: Member) {
  if (!usesDynamicConfig(member.services)) return undefined;
  const [project, version] =
    member.services.fluentbitDynamicConfig.source === 'etcd'
      ? ['configurations-auto-updater', UPSTREAM.configurationsAutoUpdater]
      : ['gitsync', UPSTREAM.gitsync];
  const base = `https://github.com/Ferlab-Ste-Justine/${project}/releases/download/v${version}/${project}_${version}`;
  const archive = `${project}_${version}_linux_amd64.tar.gz`;
  return {
    project,
    version,
    archive,
    url: quote(`${base}_linux_amd64.tar.gz`),
    sums: quote(`${base}_SHA256SUMS`),
    destination: CONFIG_UPDATER.binary,
  };
}

/** What install_dependencies runs at first boot: etcd's release `etcd` (etcd.version's) and the services' upstream packages. */
export function renderInstaller(inventory: Inventory, member: Member): string {
  const release = inventory.etcd.version;
  if (!release) throw new Error('install_dependencies with no release in etcd.version: the inventory rules refuse that');
  const etcdVersion = releaseTag(release);
  const etcdDir = `etcd-${etcdVersion}-linux-amd64`;
  const exporterDir = `node_exporter-${UPSTREAM.nodeExporter}.linux-amd64`;
  const repositories: AptRepository[] = [];
  const packages: string[] = [];
  if (member.services.fluentbit.enabled) {
    repositories.push({
      name: 'fluent-bit',
      keyUrl: 'https://packages.fluentbit.io/fluentbit.key',
      sourceLine: 'deb [signed-by=/etc/apt/keyrings/fluent-bit.asc] https://packages.fluentbit.io/debian/bookworm bookworm main',
    });
    packages.push(`fluent-bit=${UPSTREAM.fluentBit}`);
  }
  if (member.services.vaultAgent.enabled) {
    repositories.push({
      name: 'hashicorp',
      keyUrl: 'https://apt.releases.hashicorp.com/gpg',
      sourceLine: 'deb [signed-by=/etc/apt/keyrings/hashicorp.asc] https://apt.releases.hashicorp.com bookworm main',
    });
    packages.push(`vault=${UPSTREAM.vault}-1`);
  }
  const etcdRelease = `https://github.com/etcd-io/etcd/releases/download/${etcdVersion}`;
  const exporterRelease = `https://github.com/prometheus/node_exporter/releases/download/v${UPSTREAM.nodeExporter}`;
  return renderTemplate('install-upstream.sh.ejs', {
    // binaries: release: the tool pushes etcd's release from the control node (render/etcd-release.ts).
    etcd:
      inventory.etcd.binaries === 'release'
        ? undefined
        : {
            version: etcdVersion,
            archive: `${etcdDir}.tar.gz`,
            dir: etcdDir,
            url: quote(`${etcdRelease}/${etcdDir}.tar.gz`),
            sums: quote(`${etcdRelease}/SHA256SUMS`),
          },
    nodeExporter: {
      version: UPSTREAM.nodeExporter,
      archive: `${exporterDir}.tar.gz`,
      dir: exporterDir,
      url: quote(`${exporterRelease}/${exporterDir}.tar.gz`),
      sums: quote(`${exporterRelease}/sha256sums.txt`),
    },
    updater: updaterRelease(member),
    aptRepositories: repositories.map((repo) => ({ name: repo.name, keyUrl: quote(repo.keyUrl), sourceLine: quote(repo.sourceLine) })),
    aptPackages: packages.map(quote),
  });
}

export function dependenciesFragment(inventory: Inventory, member: Member): CloudConfigFragment {
  if (!member.installDependencies) return {};
  const systemUser = (name: string) => ({ name, system: true, lock_passwd: true, shell: '/usr/sbin/nologin', homedir: `/var/lib/${name}` });
  return {
    // Created in cloud-init's init stage, before the deferred files they own are written.
    users: [systemUser('etcd'), systemUser('prometheus'), ...(member.services.vaultAgent.enabled ? [systemUser('vault')] : [])],
    // qemu-guest-agent: the tool asks for the member's facts through it (guest/agent.ts).
    modules: { packages: ['curl', 'ca-certificates', 'qemu-guest-agent', ...(member.services.chrony.enabled ? ['chrony'] : [])] },
    writeFiles: [{ path: INSTALLER_PATH, permissions: '0755', content: renderInstaller(inventory, member) }],
    runcmd: [[INSTALLER_PATH]],
  };
}
