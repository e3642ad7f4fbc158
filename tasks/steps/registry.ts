/**
 * The deploy's steps, in the order a run takes them: one table that `--tags`, `--help`, the docs'
 * step table and the plan (deploy/plan.ts) read. Adding a step is one entry here plus its module.
 */

/**
 * What a step's changes can make stale, so the run asks those facts again on that member: libvirt's
 * objects, the guest's files and services, etcd's users and roles, and the VM itself (restarted: an
 * SSH connection into it is gone).
 */
export type FactKind = 'libvirt' | 'guest' | 'etcd-access' | 'vm';

export type StepKind = 'fact' | 'wait' | 'operation';

export interface StepEntry {
  id: string;
  kind: StepKind;
  /** Where it acts: the machine running the tool, each member's hypervisor, each member's guest, etcd's API. */
  on: 'control node' | 'hypervisors' | 'guests' | 'etcd';
  /** `--tags` / `--skip-tags` choose it; the others feed every later step and always run. */
  selectable: boolean;
  /** One line for `--help` and the docs. */
  doc: string;
  /** The facts its changes make stale on the member it changed. */
  changes: readonly FactKind[];
  /** The names its results carry, when not its id (a departure is a `leave` or a `replace`). */
  results?: readonly string[];
}

export const DEPLOY_STEPS = [
  {
    id: 'pki',
    kind: 'operation',
    on: 'control node',
    selectable: false,
    changes: [],
    doc: "CA, peer CA, member and client certificates, the tool's SSH key; the cluster's ID",
  },
  {
    id: 'cluster',
    kind: 'fact',
    on: 'etcd',
    selectable: false,
    changes: [],
    doc: 'has the cluster formed? Any member with a leader; when none answers, the VMs recorded in formed.json',
  },
  {
    id: 'formation',
    kind: 'operation',
    on: 'control node',
    selectable: false,
    changes: [],
    doc: 'formed.json: the VMs the cluster formed on, kept while they change',
  },
  {
    id: 'networks',
    kind: 'fact',
    on: 'hypervisors',
    selectable: false,
    changes: [],
    doc: "the libvirt network's name for each interface given by network_id",
  },
  {
    id: 'members',
    kind: 'fact',
    on: 'etcd',
    selectable: false,
    changes: [],
    doc: "etcd's member list against the inventory: who votes, joins, leaves, is replaced; a mismatch stops the run",
  },
  {
    id: 'depart',
    kind: 'operation',
    on: 'etcd',
    selectable: false,
    changes: ['libvirt', 'guest', 'vm'],
    results: ['leave', 'replace'],
    doc: 'members replaced or marked absent, one at a time, never below a healthy quorum: removed from etcd, VM undefined',
  },
  {
    id: 'render',
    kind: 'operation',
    on: 'control node',
    selectable: false,
    changes: [],
    doc: "domain XML, cloud-init and each guest's contents, recorded in the state directory",
  },
  {
    id: 'owner',
    kind: 'operation',
    on: 'hypervisors',
    selectable: false,
    changes: ['libvirt'],
    doc: "only this cluster's domains are touched: another's or an unmarked one stops that member",
  },
  { id: 'volumes', kind: 'operation', on: 'hypervisors', selectable: true, changes: ['libvirt'], doc: 'OS overlay and data disks' },
  {
    id: 'cloud-init',
    kind: 'operation',
    on: 'hypervisors',
    selectable: true,
    changes: ['libvirt'],
    doc: 'the NoCloud seed ISO of each member',
  },
  {
    id: 'domain',
    kind: 'operation',
    on: 'hypervisors',
    selectable: true,
    changes: ['libvirt', 'guest', 'vm'],
    doc: 'define, start, autostart; a changed definition restarts one member at a time, leader last',
  },
  {
    id: 'restore',
    kind: 'operation',
    on: 'guests',
    selectable: true,
    changes: ['guest'],
    doc: "with restore.enabled, while the cluster forms: one snapshot into every member's empty data directory",
  },
  {
    id: 'upgrade',
    kind: 'operation',
    on: 'etcd',
    selectable: false,
    changes: [],
    doc: 'with binaries: release and a new etcd.version: the pre-flight on live facts (a refusal changes nothing), a snapshot; guest rolls',
  },
  {
    id: 'guest',
    kind: 'operation',
    on: 'guests',
    selectable: true,
    changes: ['guest'],
    doc: "every member's files and services as rendered; etcd restarts rolled, leader last, never below quorum",
  },
  {
    id: 'health',
    kind: 'wait',
    on: 'etcd',
    selectable: true,
    changes: [],
    doc: "every member healthy with the inventory's voting members, within cluster.health_timeout",
  },
  {
    id: 'cluster-version',
    kind: 'wait',
    on: 'etcd',
    selectable: false,
    changes: [],
    doc: "with binaries: release on a formed cluster: /version's cluster version at etcd.version's minor on every member",
  },
  {
    id: 'auth',
    kind: 'operation',
    on: 'etcd',
    selectable: true,
    changes: ['etcd-access'],
    doc: 'root role and user, then auth enable, from the designated member',
  },
  {
    id: 'users',
    kind: 'operation',
    on: 'etcd',
    selectable: true,
    changes: ['etcd-access'],
    doc: "the inventory's roles and users: created, changed, removed when they leave it (only the tool's own)",
  },
  {
    id: 'rebuild',
    kind: 'operation',
    on: 'hypervisors',
    selectable: true,
    changes: ['libvirt', 'guest', 'vm'],
    doc: 'a member built from another image than base_image: a new OS disk on it, data disk kept (without one: replaced on it); one at a time, leader last',
  },
  {
    id: 'join',
    kind: 'operation',
    on: 'etcd',
    selectable: false,
    changes: [],
    results: ['add'],
    doc: 'each member new to a formed cluster, one at a time: a learner, its VM and guest, then promoted and healthy',
  },
  {
    id: 'formed',
    kind: 'operation',
    on: 'control node',
    selectable: false,
    changes: [],
    doc: 'after the cluster formed or members joined: seeds and guests again as `existing` with the whole cluster',
  },
  {
    id: 'peer-trust',
    kind: 'operation',
    on: 'guests',
    selectable: false,
    changes: ['guest'],
    doc: "the peer port's move to the peer CA, one rolled stage at a time",
  },
  {
    id: 'consistency',
    kind: 'wait',
    on: 'etcd',
    selectable: false,
    changes: [],
    doc: "once a member changed in the run: every voting member's HashKV at one revision, equal; a difference fails the run, and later runs change nothing until --accept-mismatch",
  },
] as const satisfies readonly StepEntry[];

export type StepId = (typeof DEPLOY_STEPS)[number]['id'];

/** The steps `--tags` / `--skip-tags` choose among. */
export const SELECTABLE_STEPS: readonly StepId[] = DEPLOY_STEPS.filter((step) => step.selectable).map((step) => step.id);

/** The steps that always run, for messages about the selectable ones. */
export const ALWAYS_RUN: readonly StepId[] = DEPLOY_STEPS.filter((step) => !step.selectable).map((step) => step.id);

const byResultName = new Map<string, StepEntry>(
  DEPLOY_STEPS.flatMap((step: StepEntry) => (step.results ?? [step.id]).map((name) => [name, step] as const)),
);

/** The facts a step's changes make stale (none for a name the registry does not have: maintain's own steps). */
export const staleAfter = (step: string): readonly FactKind[] => byResultName.get(step)?.changes ?? [];

/** `--help`'s list of the steps `--tags` chooses among, one per line. */
export const tagsHelp = (indent: string): string =>
  DEPLOY_STEPS.filter((entry) => entry.selectable)
    .map((step) => `${indent}${step.id.padEnd(11)}${step.doc}`)
    .join('\n');
