import type { Inventory, Member } from '../inventory/model.ts';

/**
 * A fault drill's faults, as data: what each does to which member, how it is undone, and how long it is
 * held. One at a time, and only on a cluster of three voting members or more, so the others keep the
 * quorum. The target is chosen when the fault starts, from the cluster as it is then (the leader moves).
 */

export const FAULT_KINDS = ['pause', 'link', 'kill', 'leader-link', 'reset', 'slow-disk'] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

/** A command the drill runs: virsh on the member's hypervisor, or a command in the member over its SSH. */
export type FaultAction = { on: 'hypervisor'; virsh: string[] } | { on: 'member'; argv: string[] };

export interface FaultDefinition {
  kind: FaultKind;
  /** Which member it hits: a follower, or the leader. */
  target: 'follower' | 'leader';
  /** What it is, for the plan and the report. */
  says: string;
  inject: (member: Member) => FaultAction;
  /** Undoes it; absent for a fault that undoes itself (etcd started again by systemd, a reset VM booting). */
  heal?: (member: Member) => FaultAction;
  /** The least it is held, whatever --hold says: long enough for what it is meant to cause to happen. */
  minimumHoldMs?: (inventory: Inventory) => number;
}

/** The disk etcd writes to: the data disk when the member has one (render/domain.ts names it vdb), else the OS disk. */
const dataDisk = (member: Member) => (member.volumes.data ? 'vdb' : 'vda');
const link = (member: Member, state: 'up' | 'down'): FaultAction => ({
  on: 'hypervisor',
  virsh: ['domif-setlink', member.name, member.interfaces[0]!.mac, state],
});
const iops = (member: Member, perSecond: number): FaultAction => ({
  on: 'hypervisor',
  virsh: ['blkdeviotune', member.name, dataDisk(member), '--total-iops-sec', String(perSecond), '--live'],
});

export const FAULTS: Readonly<Record<FaultKind, FaultDefinition>> = {
  pause: {
    kind: 'pause',
    target: 'follower',
    says: 'a follower frozen (virsh suspend), then resumed: its peers see it stop answering, then catch up',
    inject: (member) => ({ on: 'hypervisor', virsh: ['suspend', member.name] }),
    heal: (member) => ({ on: 'hypervisor', virsh: ['resume', member.name] }),
  },
  link: {
    kind: 'link',
    target: 'follower',
    says: "a follower's network link cut (virsh domif-setlink … down), then restored",
    inject: (member) => link(member, 'down'),
    heal: (member) => link(member, 'up'),
  },
  kill: {
    kind: 'kill',
    target: 'follower',
    says: 'etcd killed with SIGKILL in a follower (no clean shutdown); systemd starts it again',
    inject: () => ({ on: 'member', argv: ['sudo', 'systemctl', 'kill', '--signal=SIGKILL', 'etcd.service'] }),
  },
  'leader-link': {
    kind: 'leader-link',
    target: 'leader',
    says: "the leader's network link cut: the others elect a new leader; restored, the old one rejoins as a follower",
    inject: (member) => link(member, 'down'),
    heal: (member) => link(member, 'up'),
    // Followers call an election once they miss the leader for an election timeout (etcd randomizes it up to twice).
    minimumHoldMs: (inventory) => 2 * inventory.etcd.electionTimeout + 2_000,
  },
  reset: {
    kind: 'reset',
    target: 'follower',
    says: 'a follower reset (virsh reset: power cut and on again, no shutdown); it boots and rejoins',
    inject: (member) => ({ on: 'hypervisor', virsh: ['reset', member.name] }),
  },
  'slow-disk': {
    kind: 'slow-disk',
    target: 'follower',
    says: "a follower's etcd disk slowed to 20 operations a second (virsh blkdeviotune), then unthrottled",
    inject: (member) => iops(member, 20),
    heal: (member) => iops(member, 0),
  },
};

/** The drill's faults by name (`--faults pause,kill`), in the order given; every fault when none is named. */
export function faultsNamed(names: readonly string[] | undefined): { faults: FaultDefinition[] } | { refused: string } {
  if (!names || names.length === 0) return { faults: FAULT_KINDS.map((kind) => FAULTS[kind]) };
  const unknown = names.filter((name) => !(FAULT_KINDS as readonly string[]).includes(name));
  if (unknown.length > 0) return { refused: `--faults: ${unknown.join(', ')}: not a fault (the faults: ${FAULT_KINDS.join(', ')})` };
  return { faults: names.map((name) => FAULTS[name as FaultKind]) };
}

/**
 * The member a fault hits, from the cluster as it is when it starts: the leader, or a follower, taking
 * followers in turn (the `turn`-th fault on a follower takes the next one) so the faults spread out.
 */
export function faultTarget(fault: FaultDefinition, order: readonly string[], leader: string, turn: number): string {
  if (fault.target === 'leader') return leader;
  const followers = order.filter((name) => name !== leader);
  return followers[turn % followers.length]!;
}

/** How long a fault is held: --hold, or longer where the fault needs it. */
export const holdFor = (fault: FaultDefinition, inventory: Inventory, holdMs: number) =>
  Math.max(holdMs, fault.minimumHoldMs?.(inventory) ?? 0);

/** Why the drill would not start on a cluster this size: one fault at a time keeps the quorum only with three voters or more. */
export function sizeRefusal(voters: number): string | undefined {
  return voters >= 3
    ? undefined
    : `a fault drill needs three voting members or more (this cluster has ${voters}): with fewer, one member down is the quorum lost`;
}
