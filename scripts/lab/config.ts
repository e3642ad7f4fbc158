import { homedir } from 'node:os';
import { join, resolve } from 'node:path';

/**
 * Names and places of the one local lab per machine. Machine-wide state (daemons, pools, keys) lives
 * under LAB_DIR; the hypervisor's client credentials are copied into the repository's ignored
 * .etcd-kvm/lab/hypervisor, where inventories/lab.yaml points.
 */

export const REPO_ROOT = resolve(import.meta.dirname, '../..');

/** The lab's etcd release server, on the root namespace's loopback (scripts/lab/releases.ts). */
const RELEASE_PORT = 2280;

export const LAB = {
  namespace: 'etcd-kvm-lab',
  dir: '/var/lib/etcd-kvm-lab',
  /** The hypervisor's sshd, inside the namespace. */
  sshdPortInNamespace: 22,
  /** The forwarder into it, on the root namespace's loopback. */
  forwardHost: '127.0.0.1',
  forwardPort: 2222,
  network: { name: 'etcd-lab', bridge: 'virbr-etcdlab', address: '192.168.150.1', prefixLength: 24 },
  /**
   * A second segment for macvtap members: the hypervisor's host interface `parent` (one end of a veth
   * pair, the macvtap NICs' lower device) and, at the other end, a client namespace standing for
   * another machine on that network, from which the tool reaches the members.
   */
  macvtap: {
    parent: 'etcdlab-mv0',
    peer: 'etcdlab-mvpeer',
    clientNamespace: 'etcd-kvm-lab-client',
    hypervisorAddress: '192.168.160.1',
    clientAddress: '192.168.160.2',
    prefixLength: 24,
  },
  /**
   * A bastion: an sshd of its own in the client namespace, exposed on the root namespace's loopback.
   * From it the hypervisor's sshd is reached on the macvtap segment (192.168.160.1), an address the
   * root namespace has no route to: inventories reaching the hypervisor there must jump through it.
   */
  bastion: { portInNamespace: 22, forwardPort: 2223 },
  pools: { vms: 'etcd-lab', images: 'etcd-lab-images' },
  baseVolume: 'debian-12-etcd.qcow2',
  /** The image members upgrade to (scripts/lab/second-image.ts): the base image with one visible difference, beside it in the same pool. */
  secondBaseVolume: 'debian-12-etcd-2.qcow2',
  /** That difference as a guest sees it: a file holding this one line (the base image has no such file), and jq installed. */
  secondImageMark: { path: '/etc/etcd-kvm-lab-image', line: 'debian-12-etcd-2' },
  clientDir: join(REPO_ROOT, '.etcd-kvm', 'lab', 'hypervisor'),
  releasePort: RELEASE_PORT,
  /** What a lab inventory's release_url points at: `${releaseUrl}/v3.5.16/etcd-v3.5.16-linux-amd64.tar.gz`, `${releaseUrl}/v3.5.16/SHA256SUMS`. */
  releaseUrl: `http://127.0.0.1:${RELEASE_PORT}/releases`,
} as const;

export const labPath = (...parts: string[]) => join(LAB.dir, ...parts);

/**
 * Real etcd releases as Debian builds them (issue 26), repackaged by lab:up in the layout of etcd's
 * GitHub releases and served at LAB.releaseUrl: the suite carrying each and its pinned package version.
 */
export const ETCD_RELEASES = [
  { version: '3.4.23', suite: 'bookworm', debianVersion: '3.4.23-4+b4' },
  { version: '3.5.16', suite: 'trixie', debianVersion: '3.5.16-4' },
  { version: '3.5.30', suite: 'sid', debianVersion: '3.5.30-2' },
] as const;

/**
 * A second hypervisor, isolated from the first as another machine would be: its own network namespace
 * (its own bridge, firewall and sshd), and its own libvirtd and virtlogd whose configuration, state,
 * sockets, logs and pools live under its directory (bind-mounted over the libvirt directories in a
 * mount namespace of their own). Its bridge is joined to the first hypervisor's by a veth pair, as two
 * hosts on one LAN segment: members on either reach each other's peer port. The network and pools
 * carry the same names as on the first, as a site's convention would.
 */
export const SECOND = {
  name: 'lab2',
  namespace: 'etcd-kvm-lab-hv2',
  dir: labPath('hv2'),
  sshdPortInNamespace: 22,
  forwardPort: 2224,
  network: { name: 'etcd-lab', bridge: 'virbr-etcdlab2', address: '192.168.150.3', prefixLength: 24 },
  /** The veth pair joining the two bridges: `near` in the first hypervisor's namespace, `far` in the second's. */
  link: { near: 'etcdlab-l2a', far: 'etcdlab-l2b' },
} as const;

export const secondPath = (...parts: string[]) => join(SECOND.dir, ...parts);

/** The libvirt directories the second hypervisor's daemons see in place of the machine's. */
export const SECOND_LIBVIRT_DIRS = [
  ['etc', '/etc/libvirt'],
  ['run', '/run/libvirt'],
  ['lib', '/var/lib/libvirt'],
  ['cache', '/var/cache/libvirt'],
  ['log', '/var/log/libvirt'],
] as const;

/** How a process on the root namespace reaches the second libvirtd: its socket, under the hypervisor's directory. */
export const SECOND_URI = `qemu:///system?socket=${secondPath('run', 'libvirt-sock')}`;

/** Built images are kept across runs and clones, keyed by the hash of their recipe. */
export const IMAGE_CACHE_DIR = join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'etcd-kvm', 'images');
