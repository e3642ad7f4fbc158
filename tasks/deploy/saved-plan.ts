import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { sha256 } from '../core/digest.ts';
import { InputError } from '../core/errors.ts';
import { PRIVATE_FILE_MODE, writeFileAtomic } from '../core/files.ts';
import type { StepResult } from '../core/step.ts';
import type { PipelineOptions } from './pipeline.ts';

/**
 * A reviewed plan, as Terraform's `plan -out` and `apply PLAN`: `deploy --plan-out FILE` writes what a dry-run
 * planned (each host's changes by step, their summaries and a digest of their display-safe diffs), the options it
 * was planned with, and digests of the inventory file and of the state directory's PKI and records; `deploy --plan
 * FILE` runs only if the inventory and the state are those, and a dry-run now plans exactly those changes. Pure
 * but for reading and writing the file and the digests' reads.
 */

export const PLAN_FORMAT = 'etcd-kvm-plan/1';

/** One host's changes by one step, as the dry-run planned them. */
export interface PlannedChange {
  host: string;
  step: string;
  summaries: string[];
  /** sha256 of the changes' display-safe diffs (none: of the empty list). */
  diffs: string;
}

/** The options a plan was made with: a run of the plan takes them from the file. */
export type PlanDecisions = Pick<
  PipelineOptions,
  'limit' | 'tags' | 'skipTags' | 'renewCerts' | 'rotateCa' | 'replace' | 'adopt' | 'acceptMismatch'
>;

export interface SavedPlan {
  format: typeof PLAN_FORMAT;
  created: string;
  inventory: { path: string; sha256: string };
  state: { sha256: string };
  decisions: PlanDecisions;
  changes: PlannedChange[];
}

/** What a dry-run would change, one entry per host and step, in the order the run recorded them. */
export const plannedChanges = (results: readonly StepResult[]): PlannedChange[] =>
  results
    .filter((result) => result.status === 'changed')
    .map((result) => ({
      host: result.host,
      step: result.step,
      summaries: result.changes.map((change) => change.summary),
      diffs: sha256(JSON.stringify(result.changes.map((change) => change.diff ?? null))),
    }));

const said = (change: PlannedChange) => change.summaries.join('; ');

/** Each change by host and step, a second one of the same host and step (a later pass) numbered. */
function byKey(changes: readonly PlannedChange[]): Map<string, PlannedChange> {
  const seen = new Map<string, number>();
  return new Map(
    changes.map((change) => {
      const key = `${change.host} ${change.step}`;
      const count = (seen.get(key) ?? 0) + 1;
      seen.set(key, count);
      return [count > 1 ? `${key} (pass ${count})` : key, change];
    }),
  );
}

/** How the changes planned now differ from the saved ones, a line each; none when they are the same. */
export function planDifferences(saved: readonly PlannedChange[], now: readonly PlannedChange[]): string[] {
  const before = byKey(saved);
  const after = byKey(now);
  const lines: string[] = [];
  for (const [key, change] of after) {
    const was = before.get(key);
    if (!was) lines.push(`${key}: now plans ${said(change)}, which the plan does not hold`);
    else if (said(was) !== said(change)) lines.push(`${key}: the plan holds ${said(was)}; now it plans ${said(change)}`);
    else if (was.diffs !== change.diffs) lines.push(`${key}: ${said(change)}, but with other contents than the plan's`);
  }
  for (const [key, change] of before) if (!after.has(key)) lines.push(`${key}: the plan holds ${said(change)}; now nothing is to do there`);
  return lines;
}

/** The state directory's parts a plan is decided from: its PKI, the tool's SSH keys and pins, and its records. */
const STATE_PARTS = ['pki', 'ssh', 'cluster-id.json', 'formed.json', 'recovery.json'];

function filesUnder(path: string): string[] {
  if (!existsSync(path)) return [];
  if (!statSync(path).isDirectory()) return [path];
  return readdirSync(path)
    .sort()
    .flatMap((name) => filesUnder(join(path, name)));
}

/** sha256 over each of those files' path and bytes, in order: equal when none was added, removed or changed. */
export function stateDigest(stateDir: string): string {
  const files = STATE_PARTS.flatMap((part) => filesUnder(join(stateDir, part)));
  return sha256(files.map((file) => `${relative(stateDir, file)} ${sha256(readFileSync(file))}`).join('\n'));
}

export const inventoryDigest = (path: string): string => sha256(readFileSync(path));

export function writeSavedPlan(path: string, plan: SavedPlan): void {
  // 0600: its summaries name members, addresses and users, as the dry-run's output does.
  writeFileAtomic(path, `${JSON.stringify(plan, null, 2)}\n`, PRIVATE_FILE_MODE);
}

/** The plan in FILE; bad input (exit 2) when it cannot be read or is not a plan of this format. */
export function readSavedPlan(path: string): SavedPlan {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'));
  } catch (error) {
    throw new InputError(`--plan ${path}: cannot read a plan there (${(error as Error).message}); deploy --plan-out FILE writes one`);
  }
  const plan = parsed as Partial<SavedPlan>;
  if (plan?.format !== PLAN_FORMAT || !Array.isArray(plan.changes) || !plan.inventory || !plan.state || !plan.decisions)
    throw new InputError(`--plan ${path}: not a plan of ${PLAN_FORMAT} (deploy --plan-out FILE writes one)`);
  return plan as SavedPlan;
}

/** Why the plan cannot run against this inventory and state directory, or undefined when it can. */
export function planStale(plan: SavedPlan, inventoryPath: string, stateDir: string): string | undefined {
  if (plan.inventory.path !== inventoryPath) return `it was made for the inventory ${plan.inventory.path}, not ${inventoryPath}`;
  if (plan.inventory.sha256 !== inventoryDigest(inventoryPath)) return `the inventory ${inventoryPath} changed since ${plan.created}`;
  if (plan.state.sha256 !== stateDigest(stateDir))
    return `the state directory ${stateDir} (its PKI, SSH keys or records) changed since ${plan.created}`;
  return undefined;
}
