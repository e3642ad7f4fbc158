import type { Hypervisor } from '../inventory/model.ts';
import type { ControlNodeFacts, DoctorFacts, PoolFacts, ReachedFacts } from './facts.ts';
import type { GroundAsked } from './ground.ts';
import { GIB } from '../libvirt/volumes.ts';

/**
 * What `etcd-kvm doctor` concludes from what it read (doctor/facts.ts): one line per thing the deploy needs, ok, a
 * warning, or failed with what to do. Pure: test/unit/doctor.test.ts holds it against tables.
 */

export interface DoctorCheck {
  status: 'ok' | 'warn' | 'fail';
  /** What it is about: "control node", "hypervisor lab". */
  subject: string;
  detail: string;
  /** What to do, for a warning or a failure: a command where there is one. */
  fix?: string;
}

const gib = (bytes: number) => `${(bytes / GIB).toFixed(1)} GiB`;
const MIN_NODE_MAJOR = 20;
const EMULATED = 'software emulation, many times slower';
/** Commands joined as an operator types them. */
const andThen = (...commands: string[]) => commands.join(' && ');
const startNetwork = (name: string) => andThen(`virsh net-start ${name}`, `virsh net-autostart ${name}`);

export function controlNodeChecks({ node, tools }: ControlNodeFacts): DoctorCheck[] {
  const subject = 'control node';
  const major = Number(node.split('.')[0]);
  return [
    major >= MIN_NODE_MAJOR
      ? { status: 'ok', subject, detail: `Node.js ${node}` }
      : {
          status: 'fail',
          subject,
          detail: `Node.js ${node} is older than ${MIN_NODE_MAJOR}`,
          fix: `install Node.js ${MIN_NODE_MAJOR} or newer`,
        },
    tools.xorriso
      ? { status: 'ok', subject, detail: `xorriso at ${tools.xorriso} (builds the members' cloud-init seed ISOs)` }
      : {
          status: 'fail',
          subject,
          detail: 'xorriso is not on PATH: the deploy builds the seed ISOs with it',
          fix: 'apt-get install xorriso',
        },
    tools.etcdctl
      ? { status: 'ok', subject, detail: `etcdctl at ${tools.etcdctl} (for etcd-kvm etcdctl)` }
      : {
          status: 'warn',
          subject,
          detail: 'etcdctl is not on PATH: only `etcd-kvm etcdctl` needs it',
          fix: 'apt-get install etcd-client',
        },
  ];
}

function domainTypeCheck(subject: string, hypervisor: Hypervisor, kvm: ReachedFacts['kvm']): DoctorCheck {
  const name = `hypervisors.${hypervisor.name}.domain_type`;
  const hardware = kvm.device && kvm.cpu;
  const lacking = kvm.cpu
    ? 'no /dev/kvm'
    : kvm.device
      ? 'a /dev/kvm without vmx or svm in its CPU flags'
      : 'no vmx or svm in its CPU flags';
  if (hypervisor.domainType === 'kvm')
    return hardware
      ? { status: 'ok', subject, detail: 'domain type kvm: the CPU has vmx or svm, and /dev/kvm is there' }
      : {
          status: 'fail',
          subject,
          detail: `${name} is kvm, but the host has ${lacking}`,
          fix: `enable virtualisation in the firmware and load kvm_intel or kvm_amd; or set ${name}: qemu (${EMULATED})`,
        };
  return hardware
    ? { status: 'warn', subject, detail: `${name} is qemu (${EMULATED}) on a host with vmx or svm and /dev/kvm`, fix: `set ${name}: kvm` }
    : { status: 'ok', subject, detail: `domain type qemu: software emulation (the host has ${lacking})` };
}

function poolCheck(subject: string, pool: PoolFacts): DoctorCheck {
  const { name } = pool;
  if ('error' in pool) return { status: 'fail', subject, detail: `pool ${name}: ${pool.error}` };
  if (pool.state === 'missing')
    return {
      status: 'fail',
      subject,
      detail: `pool ${name} does not exist`,
      fix: andThen(
        `virsh pool-define-as ${name} dir --target /var/lib/libvirt/images/${name}`,
        `virsh pool-build ${name}`,
        `virsh pool-start ${name}`,
        `virsh pool-autostart ${name}`,
      ),
    };
  if (pool.state === 'inactive')
    return {
      status: 'fail',
      subject,
      detail: `pool ${name} is not running`,
      fix: `virsh pool-start ${name} && virsh pool-autostart ${name}`,
    };
  return {
    status: 'ok',
    subject,
    detail: `pool ${name} runs${pool.availableBytes === undefined ? '' : `, ${gib(pool.availableBytes)} free`}`,
  };
}

/** The volumes a deploy would create, against each running pool's free space (qcow2 is thin: a warning, not a failure). */
function spaceChecks(subject: string, asked: GroundAsked, reached: ReachedFacts): DoctorCheck[] {
  const capacity = (base: { pool: string; volume: string }) => {
    const image = reached.baseImages.find((found) => found.pool === base.pool && found.volume === base.volume);
    return image && 'bytes' in image ? image.bytes : 0;
  };
  return reached.pools.flatMap((pool): DoctorCheck[] => {
    if (!('state' in pool) || pool.state !== 'running' || pool.availableBytes === undefined) return [];
    const toCreate = asked.volumes.filter(
      (volume) => volume.pool === pool.name && !reached.existingVolumes.includes(`${volume.pool}/${volume.name}`),
    );
    if (toCreate.length === 0) return [];
    const needed = toCreate.reduce((sum, volume) => sum + (volume.bytes ?? (volume.base ? capacity(volume.base) : 0)), 0);
    const sizes = `${gib(needed)} at their full size, ${gib(pool.availableBytes)} free`;
    const said = `${toCreate.length} volumes to create in pool ${pool.name}, ${sizes}`;
    return [
      needed <= pool.availableBytes
        ? { status: 'ok', subject, detail: said }
        : {
            status: 'warn',
            subject,
            detail: `${said}: qcow2 volumes take less at first, but a member whose disk grows past the free space stops`,
            fix: `free space in pool ${pool.name}, or give its members smaller os_volume_size_gib / data_volume_size_gib`,
          },
    ];
  });
}

function reachedChecks(asked: GroundAsked, reached: ReachedFacts): DoctorCheck[] {
  const subject = `hypervisor ${asked.hypervisor.name}`;
  const checks: DoctorCheck[] = [
    reached.libvirt
      ? { status: 'ok', subject, detail: `reached; libvirt ${reached.libvirt}` }
      : { status: 'warn', subject, detail: "reached, but `virsh version --daemon` does not say libvirt's version" },
    domainTypeCheck(subject, asked.hypervisor, reached.kvm),
    ...reached.pools.map((pool) => poolCheck(subject, pool)),
  ];
  for (const image of reached.baseImages) {
    const what = `base image ${image.volume} in pool ${image.pool}`;
    if ('bytes' in image) checks.push({ status: 'ok', subject, detail: `${what}, ${gib(image.bytes)}` });
    else if ('missing' in image)
      checks.push({
        status: 'fail',
        subject,
        detail: `${what} does not exist`,
        fix: `${andThen(
          `virsh vol-create-as ${image.pool} ${image.volume} 1G --format qcow2`,
          `virsh vol-upload --pool ${image.pool} ${image.volume} IMAGE.qcow2`,
        )} (a cloud image with cloud-init and qemu-guest-agent)`,
      });
    else checks.push({ status: 'fail', subject, detail: `${what}: ${image.error}` });
  }
  for (const network of reached.networks) {
    const what = `network ${network.name}`;
    if ('error' in network) checks.push({ status: 'fail', subject, detail: `${what}: ${network.error}` });
    else if ('missing' in network)
      checks.push({
        status: 'fail',
        subject,
        detail: `${what} does not exist`,
        fix: `${andThen('virsh net-define NETWORK.xml', startNetwork(network.name))}; or name another in libvirt_networks`,
      });
    else
      checks.push(
        network.active
          ? { status: 'ok', subject, detail: `${what} is active` }
          : {
              status: 'fail',
              subject,
              detail: `${what} is not active`,
              fix: startNetwork(network.name),
            },
      );
  }
  for (const { device, present } of reached.macvtap)
    checks.push(
      present
        ? { status: 'ok', subject, detail: `macvtap device ${device} is there` }
        : {
            status: 'fail',
            subject,
            detail: `macvtap device ${device} does not exist`,
            fix: 'name an interface of that host (ip -o link lists them)',
          },
    );
  checks.push(...spaceChecks(subject, asked, reached));
  for (const { member, agent } of reached.running)
    checks.push(
      agent
        ? { status: 'ok', subject, detail: `${member} runs; its guest agent answers` }
        : {
            status: 'warn',
            subject,
            detail: `${member} runs, but its guest agent does not answer: the deploy reads and converges members through it`,
            fix: 'the base image needs qemu-guest-agent enabled; a member that is still booting answers once it is up',
          },
    );
  return checks;
}

export function doctorChecks(facts: DoctorFacts): DoctorCheck[] {
  return [
    ...controlNodeChecks(facts.control),
    ...facts.hypervisors.flatMap((found): DoctorCheck[] => {
      const { hypervisor } = found.asked;
      if (found.reachable) return reachedChecks(found.asked, found);
      const onIt = found.asked.members.length ? `; its members: ${found.asked.members.join(', ')}` : '';
      const check = `check hypervisors.${hypervisor.name} (address, port, user, private_key), that sshd answers there`;
      const key = `its host key in ${hypervisor.knownHosts} (ssh-keyscan, its fingerprint checked)`;
      return [{ status: 'fail', subject: `hypervisor ${hypervisor.name}`, detail: found.reason, fix: `${check}, and ${key}${onIt}` }];
    }),
  ];
}

const MARKS: Record<DoctorCheck['status'], string> = { ok: 'ok  ', warn: 'WARN', fail: 'FAIL' };

/** One line per check, its fix under it; then what doctor does not read. */
export function formatDoctor(checks: readonly DoctorCheck[]): string {
  const width = Math.max(...checks.map((check) => check.subject.length));
  const lines = checks.flatMap((check) => [
    `${MARKS[check.status]}  ${check.subject.padEnd(width)}  ${check.detail}`,
    ...(check.fix ? [`${' '.repeat(6 + width)}  fix: ${check.fix}`] : []),
  ]);
  const failed = checks.filter((check) => check.status === 'fail').length;
  const warned = checks.filter((check) => check.status === 'warn').length;
  return [
    ...lines,
    'not read: what the base image carries besides its guest agent (cloud-init NoCloud; python3 with PyNaCl for backups)',
    failed ? `doctor: ${failed} failed, ${warned} warnings` : `doctor: the ground is ready${warned ? ` (${warned} warnings)` : ''}`,
  ].join('\n');
}
