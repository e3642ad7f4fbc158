import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

/**
 * The Debian packages this project needs on the machine that runs its tests and its lab, in one list,
 * and one installer for all of them. `npm test`, `npm run test:e2e` and `lab:up` each ask for their
 * set; nothing is installed that a set does not name.
 */

const execFileAsync = promisify(execFile);

/** Why each package is here: the real validators, servers and clients the tests and the lab run. */
const PACKAGES = {
  // The tests: real validators and peers for what the tool renders and talks to.
  'libvirt-clients': 'virt-xml-validate checks every rendered domain XML; virsh for the lab',
  'libxml2-utils': 'xmllint, which virt-xml-validate runs',
  'cloud-init': "cloud-init schema and the guest's own network-config renderer",
  'etcd-server': 'a real 3-member etcd on loopback for the rendered etcd.env and certificates',
  'etcd-client': 'etcdctl: the tests look at etcd from outside the tool',
  prometheus: 'promtool checks the generated Prometheus configuration and rules, and runs their unit tests',
  openssl: 'openssl verify / x509 / s_client read back what the PKI issues',
  'openssh-client': 'ssh-keygen reads the SSH key; ssh reaches the lab members',
  'openssh-server': 'a real sshd for the SSH transport tests and the lab hypervisor',
  xorriso: 'the tool builds cloud-init seed ISOs with it',
  curl: "the etcd REST gateway and the node exporter's /metrics",
  sudo: 'visudo checks the sudoers rules the guests get',
  // The lab: a hypervisor in a network namespace, and the VM image built offline.
  'libvirt-daemon-system': 'libvirtd and virtlogd',
  'libvirt-daemon-driver-qemu': "libvirt's QEMU driver",
  'qemu-system-x86': 'the VMs',
  'qemu-utils': 'qemu-img for the image and volumes',
  'dnsmasq-base': "libvirt's network DHCP/DNS",
  iproute2: 'network namespaces and veth pairs',
  iptables: "libvirt's network rules",
  socat: "the loopback forwarder to the hypervisor's sshd",
  mmdebstrap: 'builds the Debian image offline from the mirror',
  'grub-pc-bin': 'boot loader of the image',
  'grub2-common': 'boot loader of the image',
  fdisk: 'partitions the image',
  e2fsprogs: "file systems of the image; mkfs.ext4 for the data disk's format guard test",
  'python3-botocore':
    "botocore's SigV4 signer, which the members' agent signs its S3 requests with: its unit test signs on the control node",
  systemd: "systemd-analyze calendar, which the members' agent reads its ticks from: its unit test runs it on the control node",
  zsh: 'the zsh completion script is loaded and asked by a real zsh',
  fish: 'the fish completion script is loaded and asked by a real fish (complete -C)',
} as const satisfies Record<string, string>;

export type PackageName = keyof typeof PACKAGES;

const TEST: PackageName[] = [
  'libvirt-clients',
  'libxml2-utils',
  'cloud-init',
  'etcd-server',
  'etcd-client',
  'prometheus',
  'openssl',
  'openssh-client',
  'openssh-server',
  'xorriso',
  'curl',
  'sudo',
  'e2fsprogs',
  'systemd',
  'python3-botocore',
  'zsh',
  'fish',
];
const LAB: PackageName[] = [
  'libvirt-daemon-system',
  'libvirt-daemon-driver-qemu',
  'libvirt-clients',
  'qemu-system-x86',
  'qemu-utils',
  'dnsmasq-base',
  'iproute2',
  'iptables',
  'socat',
  'openssh-server',
  'openssh-client',
  'xorriso',
  'mmdebstrap',
  'grub-pc-bin',
  'grub2-common',
  'fdisk',
  'e2fsprogs',
  'etcd-client',
];

/** What each command of the project needs: `npm test`, the lab, and the end-to-end tests, which drive the lab and look at it with the test tools. */
export const PACKAGE_SETS = {
  test: TEST,
  lab: LAB,
  e2e: [...new Set([...TEST, ...LAB])],
} as const satisfies Record<string, PackageName[]>;

export type PackageSet = keyof typeof PACKAGE_SETS;

export const describePackage = (name: PackageName): string => PACKAGES[name];

/**
 * `dpkg-query -W -f '${Package} ${Status}\n'` output → the names whose status is "install ok
 * installed" (a removed package keeps a "deinstall ok config-files" line; a missing one has none).
 */
export function parseInstalled(dpkgOutput: string): Set<string> {
  const installed = new Set<string>();
  for (const line of dpkgOutput.split('\n')) {
    const [name, ...status] = line.trim().split(/\s+/);
    // An architecture-qualified name (libfoo:amd64) is the same package.
    if (name && status.join(' ') === 'install ok installed') installed.add(name.replace(/:.*$/, ''));
  }
  return installed;
}

/** The wanted packages that are not installed, in the order they were asked for, each once. */
export function missingPackages(wanted: readonly string[], installed: ReadonlySet<string>): string[] {
  return [...new Set(wanted)].filter((name) => !installed.has(name));
}

/** Installed state of the named packages in one dpkg-query call; no dpkg at all means none is installed. */
async function queryInstalled(names: readonly string[]): Promise<Set<string>> {
  try {
    // biome-ignore lint/suspicious/noTemplateCurlyInString: ${Package} and ${Status} are dpkg-query's --showformat fields, not JavaScript
    const { stdout } = await execFileAsync('dpkg-query', ['-W', '-f=${Package} ${Status}\n', ...names]);
    return parseInstalled(stdout);
  } catch (error) {
    // Exit 1 with the known packages on stdout when some names are unknown to dpkg.
    const stdout = (error as { stdout?: string }).stdout;
    return typeof stdout === 'string' ? parseInstalled(stdout) : new Set();
  }
}

export class PackageInstallError extends Error {}

async function hasCommand(name: string): Promise<boolean> {
  return execFileAsync('sh', ['-c', 'command -v "$1"', 'sh', name]).then(
    () => true,
    () => false,
  );
}

/** Installs what `set` needs and is missing, saying so; installs nothing when all is there. */
export async function ensurePackages(set: PackageSet, log: (line: string) => void): Promise<string[]> {
  const missing = missingPackages(PACKAGE_SETS[set], await queryInstalled(PACKAGE_SETS[set]));
  if (missing.length === 0) return [];
  const manual = `apt-get install ${missing.join(' ')}`;
  if (!(await hasCommand('apt-get')))
    throw new PackageInstallError(
      `missing Debian packages ${missing.join(', ')} and this machine has no apt-get: install their equivalents by hand (${missing.map((name) => `${name}: ${describePackage(name as PackageName)}`).join('; ')})`,
    );
  if (process.getuid?.() !== 0)
    throw new PackageInstallError(
      `missing Debian packages ${missing.join(', ')}: run as root so they can be installed, or run \`${manual}\` as root first`,
    );
  log(`installing ${missing.join(' ')} from Debian`);
  const environment = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  try {
    await execFileAsync('apt-get', ['update', '-q'], { env: environment, maxBuffer: 64 << 20 });
    await execFileAsync('apt-get', ['install', '-y', '-q', '--no-install-recommends', ...missing], {
      env: environment,
      maxBuffer: 64 << 20,
    });
  } catch (error) {
    const stderr = String((error as { stderr?: string }).stderr ?? '')
      .trim()
      .split('\n')
      .filter((line) => /^E:/.test(line));
    throw new PackageInstallError(`\`${manual}\` failed: ${stderr.join('; ') || (error as Error).message}`);
  }
  // Debian starts etcd.service on install where systemd runs; the tests start their own members on its ports.
  if (missing.includes('etcd-server')) await execFileAsync('systemctl', ['stop', 'etcd']).catch(() => undefined);
  // And prometheus.service, with the node exporter it recommends where that is installed: the tests want promtool
  // only, nothing scraping or listening on the machine's ports (9090, 9100). Disabled too: a reboot starts neither.
  if (missing.includes('prometheus'))
    for (const unit of ['prometheus', 'prometheus-node-exporter'])
      await execFileAsync('systemctl', ['disable', '--now', unit]).catch(() => undefined);
  return missing;
}
