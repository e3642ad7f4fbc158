import test from 'ava';
import { mkdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseDeployOptions } from '../../tasks/cli/options.ts';
import { InputError } from '../../tasks/core/errors.ts';
import type { StepResult } from '../../tasks/core/step.ts';
import {
  inventoryDigest,
  PLAN_FORMAT,
  planDifferences,
  plannedChanges,
  planStale,
  readSavedPlan,
  type SavedPlan,
  stateDigest,
  writeSavedPlan,
} from '../../tasks/deploy/saved-plan.ts';
import { scratchDir } from '../helpers/scratch.ts';

const result = (host: string, step: string, status: StepResult['status'], summaries: string[] = [], after = 'new'): StepResult => ({
  host,
  step,
  status,
  changes: summaries.map((summary) => ({ summary, diff: { label: summary, before: 'old', after } })),
  durationMs: 1,
});

test('a plan holds what the dry-run would change, host by host and step by step; ok, skipped and failed results are not changes', (t) => {
  const changes = plannedChanges([
    result('localhost', 'pki', 'ok'),
    result('etcd-1', 'guest', 'changed', ['update /etc/etcd/etcd.env', 'restart etcd']),
    result('etcd-2', 'guest', 'skipped'),
    result('etcd-3', 'guest', 'failed'),
  ]);
  t.deepEqual(
    changes.map(({ host, step, summaries }) => [host, step, summaries]),
    [['etcd-1', 'guest', ['update /etc/etcd/etcd.env', 'restart etcd']]],
  );
  t.regex(changes[0]!.diffs, /^[0-9a-f]{64}$/);
});

const planned = (...results: StepResult[]) => plannedChanges(results);

const table: [string, StepResult[], string[]][] = [
  ['the same changes: no difference', [result('etcd-1', 'guest', 'changed', ['restart etcd'])], []],
  [
    'another summary',
    [result('etcd-1', 'guest', 'changed', ['restart etcd', 'update /etc/chrony/chrony.conf'])],
    ['etcd-1 guest: the plan holds restart etcd; now it plans restart etcd; update /etc/chrony/chrony.conf'],
  ],
  [
    'the same summary, other contents',
    [result('etcd-1', 'guest', 'changed', ['restart etcd'], 'newer')],
    ["etcd-1 guest: restart etcd, but with other contents than the plan's"],
  ],
  [
    'a change the plan does not hold, and one it holds gone',
    [result('etcd-2', 'volumes', 'changed', ['create etcd-2-os.qcow2'])],
    [
      'etcd-2 volumes: now plans create etcd-2-os.qcow2, which the plan does not hold',
      'etcd-1 guest: the plan holds restart etcd; now nothing is to do there',
    ],
  ],
  [
    'a second pass of the same step on the same host is its own entry',
    [result('etcd-1', 'guest', 'changed', ['restart etcd']), result('etcd-1', 'guest', 'changed', ['restart etcd'])],
    ['etcd-1 guest (pass 2): now plans restart etcd, which the plan does not hold'],
  ],
];

for (const [title, now, lines] of table)
  test(`the plan against a dry-run now: ${title}`, (t) => {
    t.deepEqual(planDifferences(planned(result('etcd-1', 'guest', 'changed', ['restart etcd'])), planned(...now)), lines);
  });

/** A state directory with a CA and formed.json, and an inventory beside it. */
function scene() {
  const dir = scratchDir('saved-plan');
  const state = join(dir, '.etcd-kvm', 'c');
  mkdirSync(join(state, 'pki'), { recursive: true });
  writeFileSync(join(state, 'pki', 'ca.crt'), 'CA');
  writeFileSync(join(state, 'formed.json'), '{}');
  const inventory = join(dir, 'inventory.yaml');
  writeFileSync(inventory, 'cluster: {name: c}\n');
  const plan: SavedPlan = {
    format: PLAN_FORMAT,
    created: '2026-12-02T03:40:00.000Z',
    inventory: { path: inventory, sha256: inventoryDigest(inventory) },
    state: { sha256: stateDigest(state) },
    decisions: { renewCerts: false, acceptMismatch: false, limit: ['etcd-1'] },
    changes: planned(result('etcd-1', 'guest', 'changed', ['restart etcd'])),
  };
  return { dir, state, inventory, plan };
}

test('a plan is stale once the inventory, the PKI or a record changed, or for another inventory; a run lock or a render does not count', (t) => {
  const { dir, state, inventory, plan } = scene();
  t.is(planStale(plan, inventory, state), undefined);
  // What runs leave that no decision reads: the run lock, the renders (a dry-run compares those itself).
  writeFileSync(join(state, 'run.lock'), 'pid');
  mkdirSync(join(state, 'rendered'));
  writeFileSync(join(state, 'rendered', 'etcd-1.json'), '{}');
  t.is(planStale(plan, inventory, state), undefined);
  t.regex(planStale(plan, join(dir, 'other.yaml'), state)!, /made for the inventory .*inventory\.yaml, not .*other\.yaml$/);
  writeFileSync(join(state, 'pki', 'ca.crt'), 'another CA');
  t.regex(planStale(plan, inventory, state)!, /the state directory .* \(its PKI, SSH keys or records\) changed since 2026-12-02T03:40:00/);
  writeFileSync(inventory, 'cluster: {name: c}\n# edited\n');
  t.regex(planStale(plan, inventory, state)!, /the inventory .* changed since/);
});

test('a plan file is written 0600 and read back; a missing or foreign file is bad input naming --plan-out', (t) => {
  const { dir, plan } = scene();
  const path = join(dir, 'plan.json');
  writeSavedPlan(path, plan);
  t.is(statSync(path).mode & 0o777, 0o600);
  t.deepEqual(readSavedPlan(path), plan);
  t.throws(() => readSavedPlan(join(dir, 'none.json')), { instanceOf: InputError, message: /cannot read a plan there.*--plan-out FILE/ });
  writeFileSync(join(dir, 'other.json'), '{"format": "terraform"}');
  t.throws(() => readSavedPlan(join(dir, 'other.json')), { instanceOf: InputError, message: /not a plan of etcd-kvm-plan\/1/ });
});

test('--plan-out is a dry-run; --plan takes the decisions from the plan and refuses them beside it, and the modes exclude each other', (t) => {
  t.like(parseDeployOptions(['-i', 'x.yaml', '--plan-out', 'p.json', '--limit', 'etcd-1']), {
    dryRun: true,
    planOut: 'p.json',
    limit: ['etcd-1'],
  });
  t.like(parseDeployOptions(['-i', 'x.yaml', '--plan', 'p.json']), { dryRun: false, plan: 'p.json' });
  const refused = (argv: string[]) => t.throws(() => parseDeployOptions(['-i', 'x.yaml', ...argv]), { instanceOf: InputError })?.message;
  t.regex(refused(['--plan', 'p.json', '--limit', 'etcd-1', '--renew-certs'])!, /--plan takes --limit, --renew-certs from the plan/);
  t.regex(refused(['--plan', 'p.json', '--dry-run'])!, /--plan runs a saved plan: it excludes --dry-run/);
  t.regex(refused(['--plan', 'p.json', '--check'])!, /excludes --check/);
  t.regex(refused(['--plan-out', 'p.json', '--plan', 'q.json'])!, /--plan-out writes a dry-run's plan/);
  t.regex(refused(['--plan-out', 'p.json', '--render-only', 'dir'])!, /--plan-out writes a dry-run's plan/);
});
