import { chmodSync, chownSync, existsSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { labPath } from './config.ts';

/** What the lab needs from the machine beyond its Debian packages (scripts/system/packages.ts): an acceleration, and a usable /dev/kvm mode. */

/** Hardware virtualisation is usable only where the CPU says so; a /dev/kvm alone can be a PVM device. */
export function chooseAcceleration(): { type: 'kvm' | 'qemu'; why: string } {
  const forced = process.env.ETCD_KVM_LAB_ACCEL;
  if (forced === 'kvm' || forced === 'qemu') return { type: forced, why: `forced by ETCD_KVM_LAB_ACCEL=${forced}` };
  const flags =
    readFileSync('/proc/cpuinfo', 'utf8')
      .match(/^flags\s*:(.*)$/m)?.[1]
      ?.split(/\s+/) ?? [];
  const virt = flags.includes('vmx') || flags.includes('svm');
  if (virt && existsSync('/dev/kvm')) return { type: 'kvm', why: 'the CPU has vmx/svm and /dev/kvm exists' };
  return { type: 'qemu', why: `software emulation (TCG): ${virt ? '/dev/kvm is missing' : 'the CPU has no vmx/svm flag'}` };
}

const KVM_DEVICE = '/dev/kvm';
const KVM_RECORD = () => labPath('kvm-device.json');

/**
 * With /dev/kvm at root:root 0600 (no udev here), libvirtd throws its QEMU capabilities away on every
 * lookup and each `virsh define` takes ~88 s. Debian's udev rule would make it root:kvm 0660; do that,
 * remembering the original so `down` can put it back.
 */
export function fixKvmDevice(): string | undefined {
  if (!existsSync(KVM_DEVICE)) return undefined;
  const { mode, gid } = statSync(KVM_DEVICE);
  const kvmGid = Number.parseInt(readFileSync('/etc/group', 'utf8').match(/^kvm:[^:]*:(\d+):/m)?.[1] ?? '', 10);
  if (!Number.isInteger(kvmGid)) return 'no kvm group; left /dev/kvm alone';
  if (gid === kvmGid && (mode & 0o060) === 0o060) return undefined;
  if (!existsSync(KVM_RECORD())) writeFileSync(KVM_RECORD(), JSON.stringify({ mode: mode & 0o7777, gid }));
  chownSync(KVM_DEVICE, 0, kvmGid);
  chmodSync(KVM_DEVICE, 0o660);
  return `/dev/kvm set to root:kvm 0660 (was gid ${gid} mode ${(mode & 0o7777).toString(8)}); restored by lab:down`;
}

export function restoreKvmDevice(): string | undefined {
  if (!existsSync(KVM_RECORD())) return undefined;
  const { mode, gid } = JSON.parse(readFileSync(KVM_RECORD(), 'utf8')) as { mode: number; gid: number };
  if (existsSync(KVM_DEVICE)) {
    chownSync(KVM_DEVICE, 0, gid);
    chmodSync(KVM_DEVICE, mode);
  }
  rmSync(KVM_RECORD());
  return `/dev/kvm restored to gid ${gid} mode ${mode.toString(8)}`;
}
