import { briefError } from '../core/errors.ts';
import { existsSync, mkdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createWriteStream } from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ISnapshotResponse } from 'etcd3';
import { PRIVATE_DIR_MODE, PRIVATE_FILE_MODE } from '../core/files.ts';
import { CONTROL_NODE, type ControlNode, type Step } from '../core/step.ts';
import type { ClientIdentity, EtcdClients } from '../etcd/client.ts';
import { versionOf } from '../etcd/version.ts';
import { memberStatus } from '../etcd/member-status.ts';
import { alarmsListed } from '../etcd/health.ts';
import { hexId } from '../etcd/membership.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { ExecResult } from '../remote/ssh.ts';
import { guestReleaseOf } from '../render/etcd-release.ts';
import { compareMembers, compareUntilDefinite } from '../verify/consistency.ts';
import { describePassed, preflight, type MemberVersionAnswer, type PreflightCheck, type UpgradeFacts } from '../upgrade/preflight.ts';
import { v2StoreCheckCommand, v2StoreVerdict, type V2StoreVerdict } from '../upgrade/v2store.ts';
import { formatVersion, minorOf, parseVersion, sameVersion, type EtcdVersion } from '../upgrade/version.ts';
import { deployStep } from './deploy-step.ts';

/**
 * With binaries: release on a formed cluster, before the guest step moves any member to another etcd
 * version: the pre-flight, decided from live facts (upgrade/preflight.ts) — a refusal stops the run
 * before anything changes, saying which fact failed —, then a snapshot of the cluster into the state
 * directory, once per move (a roll a killed run left half done keeps the snapshot taken before it
 * began). The roll itself is the guest step's: one member at a time, leader last, each healthy on
 * the new version with the leader's data before the next.
 */

interface UpgradeState {
  facts: UpgradeFacts;
  /** When the snapshot before this move was written (ms since the epoch), if there is one. */
  snapshotAt?: number;
}

type UpgradeAction = { kind: 'snapshot'; path: string };

export interface UpgradeStepOptions {
  inventory: Inventory;
  clients: EtcdClients;
  /** Who takes the snapshot: root (a snapshot is the whole keyspace). */
  root: () => ClientIdentity;
  /** Runs a read-only command in a member (over its SSH connection): etcdutl's check before a step into 3.6. */
  inMember: (member: Member, argv: readonly string[]) => Promise<ExecResult>;
}

export class UpgradeRefused extends Error {}

/** The snapshot taken before a move, named by the move: found again by a run resuming it. */
export const snapshotBefore = (inventory: Inventory, from: EtcdVersion, to: EtcdVersion) =>
  join(inventory.stateDir, 'snapshots', `before-etcd-${formatVersion(from)}-to-${formatVersion(to)}.db`);

export function upgradeStep(options: UpgradeStepOptions): Step<UpgradeState, UpgradeAction, ControlNode> {
  const { inventory } = options;
  const target = inventory.etcd.version;
  // The plan has this step with binaries: release only, where etcd.version is always a release (inventory/model.ts).
  if (!target) throw new Error('the upgrade step runs with binaries: release only');
  // Snapshots written since the step was made are this run's.
  const runStarted = Date.now();
  return {
    name: 'upgrade',
    targets: [CONTROL_NODE],
    async check() {
      const facts = await upgradeFacts(options, target);
      const verdict = preflight(facts, target);
      const path = verdict.kind === 'roll' ? snapshotBefore(inventory, verdict.from, verdict.to) : undefined;
      const snapshotAt = path && existsSync(path) ? statSync(path).mtimeMs : undefined;
      return { facts, ...(snapshotAt === undefined ? {} : { snapshotAt }) };
    },
    plan(state) {
      const verdict = preflight(state.facts, target);
      if (verdict.kind === 'converged') return [];
      if (verdict.kind === 'refused') {
        throw new UpgradeRefused(`etcd cannot move to ${formatVersion(target)} now (nothing was changed):\n${verdict.reason}`);
      }
      const path = snapshotBefore(inventory, verdict.from, verdict.to);
      // A roll under way (a member already moved) keeps the snapshot taken before it began; a new roll
      // takes its own (this run's), even where an earlier roll of the same move left one.
      const underWay = verdict.pending.length < state.facts.members.length;
      if (state.snapshotAt !== undefined && (underWay || state.snapshotAt >= runStarted)) return [];
      return [
        {
          summary:
            `etcd ${formatVersion(verdict.from)} → ${formatVersion(verdict.to)} ` +
            `(${verdict.step.kind} step) on ${verdict.pending.join(', ')}, ` +
            `one at a time, leader last (the guest step); pre-flight passed: ${passed(verdict.checks)}; first a snapshot into ${path}`,
          action: { kind: 'snapshot', path },
        },
      ];
    },
    async apply(changes) {
      for (const { action } of changes) await takeSnapshot(options, action.path);
    },
  };
}

const passed = (checks: readonly PreflightCheck[]) => checks.map(describePassed).join(', ');

/**
 * Each member's Status, the alarms and the cluster version, asked at about the same moment; for a
 * step into 3.6, also etcdutl's check of the v2 store of every member still on 3.5.
 */
async function upgradeFacts(options: UpgradeStepOptions, target: EtcdVersion): Promise<UpgradeFacts> {
  const cluster = await clusterFacts(options);
  const facts = { ...cluster, ...(await agreementBeforeMove(options, target, cluster)) };
  if (minorOf(target) !== '3.6') return facts;
  const onOld = facts.members.flatMap((answer) => {
    const version = 'version' in answer ? parseVersion(answer.version) : undefined;
    const member = options.inventory.members.find((m) => m.name === answer.name);
    return version && member && minorOf(version) === '3.5' && !sameVersion(version, target) ? [{ member, version }] : [];
  });
  if (onOld.length === 0) return facts;
  const verdicts = await Promise.all(onOld.map(({ member, version }) => v2StoreOf(options, member, version)));
  return { ...facts, v2store: new Map(onOld.map(({ member }, i) => [member.name, verdicts[i]!])) };
}

/** The members' data compared, when a member runs another version than the target (a roll would start, or go on). */
async function agreementBeforeMove(
  { inventory, clients, root }: UpgradeStepOptions,
  target: EtcdVersion,
  facts: UpgradeFacts,
): Promise<Pick<UpgradeFacts, 'agreement'>> {
  const moving = facts.members.some((answer) => {
    if ('error' in answer) return false;
    const version = parseVersion(answer.version);
    return !(version && sameVersion(version, target));
  });
  if (!moving) return {};
  const comparison = await compareUntilDefinite(() => compareMembers(clients, inventory.members, root()));
  return { agreement: { agree: comparison.kind === 'agree', detail: comparison.detail } };
}

async function v2StoreOf({ inventory, inMember }: UpgradeStepOptions, member: Member, running: EtcdVersion): Promise<V2StoreVerdict> {
  try {
    const etcdutl = `${guestReleaseOf(running).dir}/etcdutl`;
    const { code, stdout, stderr } = await inMember(member, v2StoreCheckCommand(etcdutl, inventory.etcd.dataDir));
    return v2StoreVerdict(code, `${stdout}\n${stderr}`);
  } catch (error) {
    return { unchecked: briefError(error) };
  }
}

async function clusterFacts({ inventory, clients, root }: UpgradeStepOptions): Promise<UpgradeFacts> {
  const answers = await Promise.all(
    inventory.members.map(async (member) => {
      try {
        return { name: member.name, ...(await memberStatus(clients, member)) };
      } catch (error) {
        return { name: member.name, error: briefError(error) };
      }
    }),
  );
  const members: MemberVersionAnswer[] = answers;
  // The cluster's alarms as the members' statuses list them (never Alarm's Get: etcd puts it through raft).
  const alarms = alarmsListed(answers.flatMap((answer) => ('error' in answer ? [] : [answer.errors]))).map(
    ({ memberId, alarm }) => `${alarm} on ${hexId(memberId)}`,
  );
  for (const member of inventory.members.filter((_, i) => !('error' in members[i]!))) {
    const versions = await versionOf(clients, member, root()).catch(() => undefined);
    // The next member that answered is asked instead.
    if (versions) return { members, alarms, clusterVersion: versions.etcdcluster };
  }
  return { members, alarms, clusterVersion: undefined };
}

/** A snapshot of the cluster from the first member that gives one, into `path` (0600), whole or not at all. */
async function takeSnapshot({ inventory, clients, root }: UpgradeStepOptions, path: string): Promise<void> {
  mkdirSync(dirname(path), { recursive: true, mode: PRIVATE_DIR_MODE });
  const partial = `${path}.partial-${process.pid}`;
  const failures: string[] = [];
  for (const member of inventory.members) {
    try {
      const client = await clients.for(member, root());
      // grpc-js's ClientReadableStream, typed by etcd3 as an event emitter: iterated, it keeps the backpressure.
      const stream = (await client.maintenance.snapshot()) as unknown as AsyncIterable<ISnapshotResponse>;
      const blobs = (async function* () {
        for await (const answer of stream) yield answer.blob;
      })();
      await pipeline(Readable.from(blobs), createWriteStream(partial, { mode: PRIVATE_FILE_MODE }));
      renameSync(partial, path);
      return;
    } catch (error) {
      rmSync(partial, { force: true });
      failures.push(`${member.name}: ${briefError(error)}`);
    }
  }
  throw new Error(`no member gave a snapshot before the roll (${failures.join('; ')}): nothing was changed`);
}

declare module './deploy-step.ts' {
  interface PassSteps {
    upgrade: true;
  }
}

export const upgrade = deployStep({
  id: 'upgrade',
  kind: 'operation',
  on: 'etcd',
  selectable: false,
  changes: [],
  doc: 'with binaries: release and a new etcd.version: the pre-flight on live facts (a refusal changes nothing), a snapshot; guest rolls',
  run: ({ pass }, run) =>
    run.runner.runStep(
      upgradeStep({
        inventory: run.clusterOf(pass.cluster),
        clients: run.resources.clients,
        root: run.resources.identities.root,
        inMember: async (member, argv) => (await run.resources.memberSsh.get(member)).exec(argv),
      }),
    ),
});
