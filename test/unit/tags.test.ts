import test from 'ava';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { DEPLOY_HELP, parseDeployOptions } from '../../tasks/cli/options.ts';
import { InputError } from '../../tasks/core/errors.ts';
import { Runner } from '../../tasks/core/runner.ts';
import { loadInventory } from '../../tasks/inventory/load.ts';
import { runDeploy, type PipelineOptions } from '../../tasks/deploy/pipeline.ts';
import { SELECTABLE_STEPS } from '../../tasks/steps/registry.ts';
import { run } from '../helpers/exec.ts';

/**
 * --tags / --skip-tags: the CLI's lists, the names a run accepts (the selectable steps) and the ones it
 * refuses before it touches anything (exit 2, the steps listed). Accepted runs are --render-only ones:
 * they contact no hypervisor.
 */

/** The selectable steps, written out: the list an operator reads in the refusal. */
const STEPS = 'volumes, cloud-init, domain, restore, guest, health, auth, users, rebuild';

test('the selectable steps are the ones --help lists', (t) => {
  t.is(SELECTABLE_STEPS.join(', '), STEPS);
  // Each selectable step on a line of its own, with the registry's line about it.
  const listed = DEPLOY_HELP.split('\n').flatMap((line) => /^ {27}([a-z-]+) +\S/.exec(line)?.[1] ?? []);
  t.is(listed.join(', '), STEPS);
});

{
  const cases: { argv: string[]; tags: string[] | undefined; skipTags: string[] | undefined }[] = [
    { argv: [], tags: undefined, skipTags: undefined },
    { argv: ['--tags', 'guest'], tags: ['guest'], skipTags: undefined },
    { argv: ['--tags', ' guest , health,'], tags: ['guest', 'health'], skipTags: undefined },
    { argv: ['--skip-tags', 'auth,users'], tags: undefined, skipTags: ['auth', 'users'] },
    { argv: ['--tags', 'domain', '--skip-tags', 'users'], tags: ['domain'], skipTags: ['users'] },
    // Parsing takes any name: the run checks them against the steps.
    { argv: ['--tags', 'bogus'], tags: ['bogus'], skipTags: undefined },
  ];
  for (const row of cases) {
    test(`options: ${JSON.stringify(row.argv)}`, (t) => {
      const options = parseDeployOptions(['-i', 'inventory.yaml', ...row.argv]);
      t.deepEqual([options.tags, options.skipTags], [row.tags, row.skipTags]);
    });
  }
  test('options: --tags without a value is bad input', (t) => {
    t.throws(() => parseDeployOptions(['-i', 'inventory.yaml', '--tags']), {
      instanceOf: InputError,
      message: /Option '-t, --tags <value>' argument missing; see --help/,
    });
  });
}

/** The lab inventory with its state in a fresh directory (not created yet). */
function labInTmp() {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-tags-'));
  return { dir, inventory: { ...loadInventory('inventories/lab.yaml'), stateDir: join(dir, 'state') } };
}

{
  const cases: { name: string; options: Pick<PipelineOptions, 'tags' | 'skipTags'>; message: string }[] = [
    {
      name: 'an unknown name',
      options: { tags: ['bogus'] },
      message: `--tags names unknown steps: bogus; steps are ${STEPS} (the others always run: deploy --help lists them)`,
    },
    {
      name: 'a step that always runs is not selectable',
      options: { skipTags: ['guest', 'pki'] },
      message: `--skip-tags names unknown steps: pki; steps are ${STEPS} (the others always run: deploy --help lists them)`,
    },
    {
      name: 'every unknown name, case matters',
      options: { tags: ['Guest', 'domain', 'cluster'] },
      message: `--tags names unknown steps: Guest, cluster; steps are ${STEPS} (the others always run: deploy --help lists them)`,
    },
    {
      name: 'a list of commas names nothing',
      options: { tags: [] },
      message: `--tags names no step; steps are ${STEPS} (the others always run: deploy --help lists them)`,
    },
    {
      name: '--skip-tags checked beside valid --tags',
      options: { tags: ['guest'], skipTags: ['render'] },
      message: `--skip-tags names unknown steps: render; steps are ${STEPS} (the others always run: deploy --help lists them)`,
    },
  ];
  for (const row of cases) {
    test(`refused before anything is touched: ${row.name}`, async (t) => {
      const { inventory } = labInTmp();
      const error = await t.throwsAsync(
        runDeploy(inventory, new Runner({ dryRun: false, renderer: 'silent' }), { dryRun: false, ...row.options }),
        { instanceOf: InputError },
      );
      t.is(error?.message, row.message);
      t.false(existsSync(inventory.stateDir), 'no state created');
    });
  }
}

test('accepted: every selectable step, in --tags and in --skip-tags', async (t) => {
  const { dir, inventory } = labInTmp();
  const rows: Pick<PipelineOptions, 'tags' | 'skipTags'>[] = [
    { tags: [...SELECTABLE_STEPS] },
    { skipTags: [...SELECTABLE_STEPS] },
    { tags: ['guest', 'health'], skipTags: ['health'] },
  ];
  for (const [i, row] of rows.entries()) {
    const runner = new Runner({ dryRun: false, renderer: 'silent' });
    const outcome = await runDeploy(inventory, runner, { dryRun: false, renderOnly: join(dir, `rendered-${i}`), ...row });
    t.false(runner.failed, JSON.stringify(row));
    t.is(outcome.written.length, 3 * 4, `${JSON.stringify(row)}: every member's four files rendered`);
  }
});

test('the CLI: unknown steps are exit 2 with the steps listed and nothing created; known ones run', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-tags-cli-'));
  const doc = parse(readFileSync('inventories/lab.yaml', 'utf8')) as { hypervisors: { lab: Record<string, unknown> } };
  // Port 1: nothing listens, should anything try to reach the hypervisor.
  doc.hypervisors.lab.port = 1;
  const inventory = join(dir, 'lab.yaml');
  writeFileSync(inventory, stringify(doc));
  const deploy = (args: string[]) => run(process.execPath, ['--import', 'tsx', 'tasks/deploy.ts', '-i', inventory, ...args]);

  for (const [flag, names, unknown] of [
    ['--tags', 'guest,bogus', 'bogus'],
    ['--skip-tags', 'render', 'render'],
  ] as const) {
    const refused = deploy(['--dry-run', flag, names]);
    t.is(refused.status, 2, refused.stderr);
    t.is(
      refused.stderr,
      `error: ${flag} names unknown steps: ${unknown}; steps are ${STEPS} (the others always run: deploy --help lists them)\n`,
    );
  }
  t.false(existsSync(join(dir, '.etcd-kvm')), 'nothing created');

  const accepted = deploy(['--render-only', join(dir, 'rendered'), '--tags', SELECTABLE_STEPS.join(','), '--skip-tags', 'guest']);
  t.is(accepted.status, 0, accepted.stderr);
});
