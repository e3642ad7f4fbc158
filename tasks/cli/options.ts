import { parseArgs, type ParseArgsConfig } from 'node:util';
import { EXIT, InputError } from '../core/errors.ts';
import { ROTATION_TARGETS, type RotationTarget } from '../steps/ca-rotation.ts';
import { tagsHelp } from '../steps/registry.ts';

export interface DeployOptions {
  inventory: string;
  dryRun: boolean;
  renderOnly?: string;
  /** --list-phases: gather, print the plan, change nothing. */
  listPhases: boolean;
  /** --plan-out FILE: a dry-run that writes what it plans to FILE (deploy/saved-plan.ts). */
  planOut?: string;
  /** --plan FILE: run only what FILE planned, against the inventory and state it was planned from. */
  plan?: string;
  limit?: string[];
  tags?: string[];
  skipTags?: string[];
  renewCerts: boolean;
  /** --rotate-ca cluster|peer|both: start or move on a CA rotation (pki/ca-rotation.ts). */
  rotateCa?: RotationTarget;
  replace?: string[];
  adopt?: string[];
  /** --accept-mismatch: go on after a run found the members' data different (verify/consistency.ts). */
  acceptMismatch: boolean;
  /** --detailed-exitcode: a run that changed something (a dry-run: would) exits EXIT.changes, not 0. */
  detailedExitcode: boolean;
  diff: boolean;
  profile: boolean;
  json?: string;
  debug: boolean;
  help: boolean;
}

export const DEPLOY_HELP = `Usage: etcd-kvm deploy -i INVENTORY [options]

Turns an inventory into a running, TLS-secured, authenticated etcd cluster on libvirt/KVM
virtual machines, and keeps it that way. Safe to re-run: it changes only what drifted.

Options:
  -i, --inventory FILE   inventory YAML (required)
      --dry-run          check and plan only: print per host what would change, a line each
  -D, --diff             also print the diff of every change, after all of them (as Ansible's --diff)
  -C, --check            same as --dry-run (as Ansible users type it)
      --render-only DIR  issue/reuse certificates, write every rendered file under DIR/<member>/
                         and stop; contacts no hypervisor
  -l, --limit NAMES      comma-separated member names to act on (the others are left alone)
  -t, --tags STEPS       run only these steps (comma-separated); the others always run:
${tagsHelp('                           ')}
      --skip-tags STEPS  run every step but these
      --list-phases      ask the cluster what it is, then print the phases a run would take, one
                         per line (as a dry-run would run them), and change nothing
      --plan-out FILE    a dry-run that also writes its plan to FILE for review (as Terraform's plan
                         -out): each host's changes, the options, digests of the inventory and state
      --plan FILE        run that plan (as Terraform's apply PLAN): refused, changing nothing, unless
                         the inventory and the state directory are those it was made from and a
                         dry-run now plans exactly its changes; its options are the plan's. What
                         a step could not see then (a member not booted yet) it decides when the
                         run gets there, as every run does
      --renew-certs      re-issue every member and client certificate now (they are also
                         renewed within pki.early_renewal_period of expiry); the guest step
                         pushes them, no restart needed
      --rotate-ca WHICH  replace the cluster CA, the peer CA or both (cluster|peer|both) while the
                         cluster serves: a new CA beside the old, trusted by every member and the
                         tool, then certificates it issued, then the old CA dropped, each stage
                         rolled one member at a time with the health gate. The cluster CA's
                         rotation pauses before members present the new CA, for applications to
                         take their new bundles (etcd-kvm client); the same flag goes on from there
      --replace NAMES    replace these members (comma-separated), as Terraform's -replace: each is
                         removed from etcd, its VM and volumes deleted, and it joins again empty,
                         taking its data from the cluster; one at a time, never below quorum.
                         A member whose OS or data volume is gone is replaced without asking
      --adopt NAMES      take these members' existing domains, which carry no owner's mark, as
                         this cluster's and mark them (as Terraform's import); a domain another
                         cluster marked is never taken
      --accept-mismatch  go on after a run found the members' data different (recorded in etcd;
                         until then every run changes nothing): this run compares the members'
                         HashKV again, whatever it changes, and removes the record once they agree
      --profile          after the recap, each step's time on each host, the slowest step first,
                         then each phase's wall-clock time (what no step's time shows), then the
                         slowest commands sent into members over SSH, start to exit
      --detailed-exitcode
                         exit 3 when the run changed something (a dry-run: would change
                         something) and 0 only when there was nothing to do, as Terraform's
                         plan -detailed-exitcode (whose 2 is bad input here)
      --json FILE        also write a machine-readable report of every step and host to FILE
                         (- for standard output, alone: what is said for people goes to standard error)
      --debug            show stack traces of unexpected errors
  -h, --help             show this help

Exit codes: 0 success, 1 a step failed, 2 bad input (inventory or flags), 3 success with changes
(with --detailed-exitcode only); nothing is changed on 2.
Secrets (private keys, passwords) are never printed, not even in dry-run diffs.`;

const list = (value: string) =>
  value
    .split(',')
    .map((name) => name.trim())
    .filter(Boolean);

/** deploy's flags, as node's parseArgs takes them. */
const DEPLOY_FLAGS = {
  inventory: { type: 'string', short: 'i' },
  'dry-run': { type: 'boolean', default: false },
  'list-phases': { type: 'boolean', default: false },
  'plan-out': { type: 'string' },
  plan: { type: 'string' },
  check: { type: 'boolean', short: 'C', default: false },
  'render-only': { type: 'string' },
  limit: { type: 'string', short: 'l' },
  tags: { type: 'string', short: 't' },
  'skip-tags': { type: 'string' },
  'renew-certs': { type: 'boolean', default: false },
  'rotate-ca': { type: 'string' },
  replace: { type: 'string' },
  adopt: { type: 'string' },
  'accept-mismatch': { type: 'boolean', default: false },
  'detailed-exitcode': { type: 'boolean', default: false },
  diff: { type: 'boolean', short: 'D', default: false },
  profile: { type: 'boolean', default: false },
  json: { type: 'string' },
  debug: { type: 'boolean', default: false },
  help: { type: 'boolean', short: 'h', default: false },
} as const satisfies ParseArgsConfig['options'];

type DeployFlags = ReturnType<typeof parseArgs<{ options: typeof DEPLOY_FLAGS; strict: true; allowPositionals: false }>>['values'];

/** `--help` alone: nothing else is read. */
const HELP_ONLY: DeployOptions = {
  inventory: '',
  dryRun: false,
  listPhases: false,
  renewCerts: false,
  acceptMismatch: false,
  detailedExitcode: false,
  diff: false,
  profile: false,
  debug: false,
  help: true,
};

/** The flags a plan decides with: a run of a saved plan takes them from it. */
const DECISION_FLAGS = ['limit', 'tags', 'skip-tags', 'renew-certs', 'rotate-ca', 'replace', 'adopt', 'accept-mismatch'] as const;

/** --plan runs a saved plan as it was made; --plan-out makes one in a dry-run. */
function refusePlanConflicts(values: DeployFlags): void {
  const making = values['plan-out'] !== undefined;
  if (making && (values['list-phases'] || values['render-only'] || values.plan !== undefined))
    throw new InputError("--plan-out writes a dry-run's plan: it excludes --list-phases, --render-only and --plan");
  if (values.plan === undefined) return;
  const others = ['dry-run', 'check', 'list-phases', 'render-only'].filter((flag) => values[flag as keyof DeployFlags]);
  if (others.length) throw new InputError(`--plan runs a saved plan: it excludes --${others.join(', --')}`);
  const decided = DECISION_FLAGS.filter((flag) => values[flag] !== undefined && values[flag] !== false);
  if (decided.length) throw new InputError(`--plan takes --${decided.join(', --')} from the plan it runs; give them to --plan-out instead`);
}

/** Flags that exclude each other, refused with why. */
function refuseConflicts(values: DeployFlags, dryRun: boolean): void {
  refusePlanConflicts(values);
  if (values['list-phases'] && values['render-only'])
    throw new InputError('--list-phases and --render-only exclude each other: --render-only renders only');
  if (dryRun && values['render-only'])
    throw new InputError('--dry-run and --render-only exclude each other: --render-only already contacts nothing');
  if (values['detailed-exitcode'] && (values['list-phases'] || values['render-only'])) {
    const instead = values['list-phases'] ? '--list-phases lists phases' : '--render-only renders files';
    throw new InputError(`--detailed-exitcode says whether a run or a dry-run changes anything; ${instead}, not changes`);
  }
}

function rotationTargetOf(value: string): RotationTarget {
  if (!(ROTATION_TARGETS as readonly string[]).includes(value))
    throw new InputError(`--rotate-ca ${value}: say which CA, one of ${ROTATION_TARGETS.join(', ')}`);
  return value as RotationTarget;
}

export function parseDeployOptions(argv: string[]): DeployOptions {
  let values: DeployFlags;
  try {
    ({ values } = parseArgs({ args: argv, options: DEPLOY_FLAGS, strict: true, allowPositionals: false }));
  } catch (error) {
    throw new InputError(`${(error as Error).message}; see --help`);
  }
  if (values.help) return HELP_ONLY;
  if (!values.inventory) throw new InputError('missing -i/--inventory FILE; see --help');
  // Listing the phases gathers what a dry-run gathers, and changes nothing either.
  const dryRun = values['dry-run'] || values.check || values['list-phases'] || values['plan-out'] !== undefined;
  refuseConflicts(values, dryRun);
  return {
    inventory: values.inventory,
    dryRun,
    listPhases: values['list-phases'],
    ...(values['plan-out'] ? { planOut: values['plan-out'] } : {}),
    ...(values.plan ? { plan: values.plan } : {}),
    ...(values['render-only'] ? { renderOnly: values['render-only'] } : {}),
    ...(values.limit ? { limit: list(values.limit) } : {}),
    ...(values.tags ? { tags: list(values.tags) } : {}),
    ...(values['skip-tags'] ? { skipTags: list(values['skip-tags']) } : {}),
    renewCerts: values['renew-certs'],
    ...(values['rotate-ca'] !== undefined ? { rotateCa: rotationTargetOf(values['rotate-ca']) } : {}),
    ...(values.replace ? { replace: list(values.replace) } : {}),
    ...(values.adopt ? { adopt: list(values.adopt) } : {}),
    acceptMismatch: values['accept-mismatch'],
    detailedExitcode: values['detailed-exitcode'],
    diff: values.diff,
    profile: values.profile,
    ...(values.json ? { json: values.json } : {}),
    debug: values.debug,
    help: false,
  };
}

/** How a deploy ends, as its exit code: a failure first, then (asked for) whether anything changed. */
export function deployExitCode(
  run: { lockLost: boolean; interrupted: boolean; failed: boolean; changed: boolean },
  detailedExitcode: boolean,
): number {
  if (run.lockLost) return EXIT.failed;
  if (run.interrupted) return EXIT.interrupted;
  if (run.failed) return EXIT.failed;
  return detailedExitcode && run.changed ? EXIT.changes : EXIT.ok;
}
