import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { $ } from 'zx';
import { SECOND_URI } from '../lab/config.ts';
import { idleRate, qemuPids, withGuestCpu } from './guest-cpu.ts';
import type { DeployTiming } from '../../tasks/core/timing.ts';

/**
 * The scale series of `npm run bench`: the installed command's no-op on a cluster of 3 members, then
 * of 5 (the same cluster grown by the tool), spread over both lab hypervisors, 512 MiB each. The
 * lab's own members are paused meanwhile (virsh suspend: no CPU of theirs in the figures) and resumed
 * at the end; the scale cluster is removed.
 */

const INVENTORY = 'inventories/.bench-scale.yaml';
const STATE = 'inventories/.etcd-kvm/bench-scale';
const REPORT = '/tmp/etcd-kvm-bench-scale.json';
const LAB_MEMBERS = ['etcd-1', 'etcd-2', 'etcd-3'];
const URIS = { lab: 'qemu:///system', lab2: SECOND_URI } as const;

/** Members in turn on lab and lab2, on the segment both hypervisors share. */
const members = Array.from({ length: 5 }, (_, i) => ({
  name: `scale-${i + 1}`,
  hypervisor: i % 2 === 0 ? ('lab' as const) : ('lab2' as const),
  ip: `192.168.150.${31 + i}`,
}));

function inventoryOf(count: number): string {
  const hypervisor = (name: string, port: number) => `  ${name}:
    address: 127.0.0.1
    port: ${port}
    user: root
    private_key: ../.etcd-kvm/lab/hypervisor/client_key
    known_hosts: ../.etcd-kvm/lab/hypervisor/known_hosts
    domain_type: qemu
    tcg_tb_cache_mib: 128
    pool: etcd-lab
`;
  const member = ({ name, hypervisor: on, ip }: (typeof members)[number], i: number) => `  - name: ${name}
    hypervisor: ${on}
    libvirt_networks:
      - network_name: etcd-lab
        ip: ${ip}
        prefix_length: 24
        gateway: 192.168.150.${on === 'lab' ? 1 : 3}
${i === 0 ? '    authentication_bootstrap:\n      bootstrap: true\n' : ''}`;
  return `# Written by scripts/bench/scale.ts for its scale series, and removed after it.
cluster:
  name: bench-scale
  initial_token: etcd-kvm-bench-scale
  is_initializing: true
etcd:
  client_cert_auth: true
  space_quota: 268435456
hypervisors:
${hypervisor('lab', 2222)}${hypervisor('lab2', 2224)}defaults:
  vcpus: 1
  memory: 512
  ssh_admin_user: admin
  base_image:
    pool: etcd-lab-images
    volume: debian-12-etcd.qcow2
  os_volume_size_gib: 4
  install_dependencies: false
members:
${members.slice(0, count).map(member).join('')}`;
}

const virshOn = (hypervisor: keyof typeof URIS, args: string[]) => $`virsh -q -c ${URIS[hypervisor]} ${args}`.nothrow().quiet();

async function removeScaleCluster(): Promise<void> {
  for (const { name, hypervisor } of members) {
    await virshOn(hypervisor, ['destroy', name]);
    await virshOn(hypervisor, ['undefine', name]);
    for (const volume of [`${name}-os.qcow2`, `${name}-data.qcow2`, `${name}-cloud-init.iso`])
      await virshOn(hypervisor, ['vol-delete', '--pool', 'etcd-lab', volume]);
  }
  rmSync(STATE, { recursive: true, force: true });
  rmSync(INVENTORY, { force: true });
}

export interface ScalePoint {
  members: number;
  total: number[];
  startup: number[];
  work: number[];
  /** The guests' CPU per member above idle, per run. */
  guestCpu: number[];
  /** The tool's own CPU (user and system, start-up included), per run. */
  toolCpu: number[];
  /** What the idle guests use of the machine, in cores (measured before the runs): capacity the no-ops cannot have. */
  idleCores: number;
}

interface Report {
  results: { status: string }[];
  timing: DeployTiming;
}

async function deploy(launcher: readonly string[]): Promise<{ ms: number; report: Report }> {
  const started = performance.now();
  const result = await $`${launcher} -i ${INVENTORY} --json ${REPORT}`.nothrow().quiet();
  const ms = performance.now() - started;
  if (result.exitCode !== 0) throw new Error(`scale deploy failed:\n${result.stdout.slice(-3000)}\n${result.stderr}`);
  return { ms, report: JSON.parse(readFileSync(REPORT, 'utf8')) as Report };
}

/** The series: 3 members, then 5, `runs` no-ops each; the lab's members paused meanwhile. */
export async function scaleSeries(launcher: readonly string[], runs: number, log: (line: string) => void): Promise<ScalePoint[]> {
  await removeScaleCluster();
  for (const name of LAB_MEMBERS) await virshOn('lab', ['suspend', name]);
  try {
    const points: ScalePoint[] = [];
    for (const count of [3, 5]) {
      writeFileSync(INVENTORY, inventoryOf(count));
      const converged = await deploy(launcher);
      log(`scale: ${count} members deployed in ${(converged.ms / 1000).toFixed(1)} s`);
      const pids = await qemuPids(members.slice(0, count).map((member) => member.name));
      const rate = await idleRate(pids);
      const point: ScalePoint = { members: count, total: [], startup: [], work: [], guestCpu: [], toolCpu: [], idleCores: rate };
      for (let i = 0; i < runs; i++) {
        const { result, perGuestMs } = await withGuestCpu(pids, rate, () => deploy(launcher));
        const changed = result.report.results.filter((r) => r.status !== 'ok');
        if (changed.length > 0) throw new Error(`a no-op of ${count} members changed something: ${JSON.stringify(changed)}`);
        point.total.push(result.ms);
        point.work.push(result.report.timing.workMs);
        point.startup.push(result.ms - result.report.timing.workMs);
        point.guestCpu.push(perGuestMs);
        point.toolCpu.push(result.report.timing.cpuMs);
      }
      points.push(point);
    }
    return points;
  } finally {
    await removeScaleCluster();
    for (const name of LAB_MEMBERS) await virshOn('lab', ['resume', name]);
  }
}
