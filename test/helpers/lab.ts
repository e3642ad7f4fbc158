import { spawn } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { SECOND, SECOND_URI, labPath } from '../../scripts/lab/config.ts';
import { labKept } from '../../scripts/e2e/lab-kept.ts';
import { livePid, processCommand } from '../../scripts/lab/processes.ts';
import { freshBuild } from '../../bin/fresh-build.mjs';
import { run, type Completed } from './exec.ts';
import { timed } from './timing.ts';
import { leaderEndpoint, parseEndpointStatuses } from './etcdctl-json.ts';
import { endpoint, type Identity, LAB_INVENTORY, LAB_STATE, MEMBER_IPS, NAMESPACE, rootIdentity, tlsArgs } from './lab-names.ts';

/** Driving the local lab and looking at it from outside the tool: virsh, and etcdctl inside the namespace. */

export { endpoint, type Identity, LAB_INVENTORY, LAB_STATE, MEMBER_IPS, NAMESPACE, rootIdentity, tlsArgs } from './lab-names.ts';

/**
 * Set by a lab:up right after a lab:down or a lab:clear (a lab without VMs), cleared by the deploy after it (or a
 * command that deploys, such as recover: coldDeploy): that deploy is a cold one, timed as such. A lab:up alone (a
 * scenario bringing back a daemon it stopped) makes none.
 */
let coldDeployNext = false;
let lastLabCommand: 'up' | 'down' | 'clear' | undefined;

export function lab(command: 'up' | 'down' | 'clear'): Completed {
  const completed = timed(`lab:${command}`, `lab:${command}`, () =>
    run(process.execPath, ['--import', 'tsx', 'scripts/lab/lab.ts', command], { timeoutMs: 30 * 60_000 }),
  );
  coldDeployNext = command === 'up' && (lastLabCommand === 'down' || lastLabCommand === 'clear');
  lastLabCommand = command;
  return completed;
}

/**
 * An e2e file owns the machine's one lab: it starts from a lab without VMs and no state (whatever a killed run left:
 * lab:down; from the file before it under the e2e runner: lab:clear, scripts/e2e/lab-kept.ts)...
 */
export function freshLab(t: { log: (...values: unknown[]) => void }, stateDir: string): void {
  const emptied = lab(labKept() ? 'clear' : 'down');
  t.log(emptied.stdout);
  if (emptied.status !== 0) throw new Error(`lab:${labKept() ? 'clear' : 'down'} failed: ${emptied.stderr}`);
  rmSync(stateDir, { recursive: true, force: true });
  const up = lab('up');
  t.log(up.stdout);
  if (up.status !== 0) throw new Error(`lab:up failed: ${up.stderr}`);
}

/** ...and leaves none behind: no VM under the e2e runner (it takes the lab down after the last file), no lab otherwise. */
export function labRemoved(stateDir: string): void {
  lab(labKept() ? 'clear' : 'down');
  rmSync(stateDir, { recursive: true, force: true });
}

export interface DeployRun extends Completed {
  report: { results: { step: string; host: string; status: string; changes: { summary: string }[] }[] };
  output: string;
}

/** The macvtap segment's far end, standing for an operator's machine on the members' LAN. */
export const CLIENT_NAMESPACE = 'etcd-kvm-lab-client';

/** A command inside a network namespace, or as it is when none is given. */
const within = (namespace: string | undefined, program: string, args: string[]): [string, string[]] =>
  namespace ? ['ip', ['netns', 'exec', namespace, program, ...args]] : [program, args];

let bundleChecked = false;
/**
 * `etcd-kvm <command>`, the installed command as operators run it: its bundle (dist/, `npm run build`) made first when
 * a source is newer, so the e2e runs the bundle and not the sources through tsx (which start in about twice the time:
 * 0.8 s against 0.4 s a run here, for some hundred runs of the suite).
 */
export function installed(command: string): string[] {
  if (!bundleChecked && !freshBuild(new URL('../../', import.meta.url))) {
    const built = run(process.execPath, ['scripts/build.mjs']);
    if (built.status !== 0) throw new Error(`npm run build failed: ${built.stderr}`);
  }
  bundleChecked = true;
  return ['bin/etcd-kvm.mjs', command];
}

/** One run of `etcd-kvm <command> <args>`, from the root namespace, waited for. */
export const etcdKvm = (command: string, args: string[], options: Parameters<typeof run>[2] = {}) =>
  run(process.execPath, [...installed(command), ...args], options);

/** The first command that makes the lab's VMs after an empty lab:up, timed as its cold deploy; any other, as it is. */
export function coldDeploy<T>(title: string, work: () => T): T {
  const cold = coldDeployNext;
  coldDeployNext = false;
  return cold ? timed('cold deploy', title, work) : work();
}

/** One deploy of the lab inventory, as an operator runs it (from the root namespace, or another), with its --json report. */
export function deploy(args: string[] = [], reportPath = join(LAB_STATE, 'e2e-report.json'), namespace?: string): DeployRun {
  const inventory = args.includes('-i') ? [] : ['-i', LAB_INVENTORY];
  // A report left by an earlier run must not stand in for this one's.
  rmSync(reportPath, { force: true });
  const command = within(namespace, process.execPath, [...installed('deploy'), ...inventory, '--json', reportPath, ...args]);
  const runDeploy = () => run(...command, { timeoutMs: 20 * 60_000 });
  const completed = coldDeploy(`deploy ${args.join(' ')}`.trim(), runDeploy);
  let report: DeployRun['report'] = { results: [] };
  try {
    report = JSON.parse(readFileSync(reportPath, 'utf8')) as DeployRun['report'];
  } catch {
    // No report: the run failed before writing one; the assertions on status say so.
  }
  return { ...completed, report, output: `${completed.stdout}\n${completed.stderr}` };
}

/** A deploy in its own process, its output handed to `onOutput` as it comes (to stop it at a point of the run). */
export function deployInBackground(
  args: string[],
  onOutput?: (text: string, child: ReturnType<typeof spawn>) => void,
): Promise<{ status: number | null; signal: NodeJS.Signals | null; output: string }> {
  const child = spawn(process.execPath, [...installed('deploy'), ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const take = (chunk: Buffer) => {
    output += chunk.toString();
    onOutput?.(output, child);
  };
  child.stdout!.on('data', take);
  child.stderr!.on('data', take);
  return new Promise((resolve) => child.on('close', (status, signal) => resolve({ status, signal, output })));
}

export const virsh = (args: string[]) => run('virsh', ['-q', '-c', 'qemu:///system', ...args]);
/** virsh against the lab's second hypervisor (its own libvirtd, through its socket). */
export const secondVirsh = (args: string[]) => run('virsh', ['-q', '-c', SECOND_URI, ...args]);

/** The PID of the second hypervisor's listening sshd, if it runs. */
export const secondSshdPid = (): number | undefined => livePid(labPath('run', 'lab2-sshd.pid'), 'sshd');

/** Kills (-9) the second hypervisor's SSH sessions (not its listening sshd): a connection cut under a run. Returns how many. */
export function killSecondSshSessions(): number {
  const listener = secondSshdPid();
  const pids = run('ip', ['netns', 'pids', SECOND.namespace]).stdout.split('\n').filter(Boolean).map(Number);
  const sessions = pids.filter((pid) => pid !== listener && processCommand(pid) === 'sshd');
  for (const pid of sessions) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Gone between the listing and the kill: cut all the same.
    }
  }
  return sessions.length;
}

/** etcdctl 3.4 inside the lab namespace (or another), where the member addresses exist. */
export function etcdctl(endpoints: string[], identity: Identity, args: string[], namespace = NAMESPACE): Completed {
  const tls = tlsArgs(identity);
  return run(
    ...within(namespace, 'etcdctl', ['--dial-timeout=5s', '--command-timeout=10s', `--endpoints=${endpoints.join(',')}`, ...tls, ...args]),
  );
}

/** The endpoint of the lab member that says it leads, as root asks every member; none while no member does. */
export const leaderNow = (): string | undefined =>
  leaderEndpoint(
    parseEndpointStatuses(
      etcdctl(
        Object.keys(MEMBER_IPS).map((name) => endpoint(name as keyof typeof MEMBER_IPS)),
        rootIdentity,
        ['endpoint', 'status', '-w', 'json'],
      ).stdout,
    ),
  );

/** `count` keys `<prefix>1`… written one request each (one raft entry each), in one shell inside the namespace. */
export function etcdctlPuts(endpoints: string[], identity: Identity, prefix: string, count: number): Completed {
  const put = ['etcdctl', '--dial-timeout=5s', '--command-timeout=10s', `--endpoints=${endpoints.join(',')}`, ...tlsArgs(identity), 'put'];
  const loop = `i=1; while [ $i -le ${count} ]; do "$@" "${prefix}$i" v >/dev/null || exit 1; i=$((i + 1)); done`;
  return run(...within(NAMESPACE, 'sh', ['-c', loop, 'sh', ...put]));
}

/**
 * How long one command on a member may take over SSH. Not run()'s 60 s: right after a cold deploy a guest is still
 * finishing its first boot, and under load its SSH session alone outlasts that (40 s for one `systemd-analyze` on an
 * idle machine, 2026-12-02 12:42; a scenario of CI's run that day failed after 70 s at load 10, one of its commands
 * cut at 60 s). A command that hangs still fails, later.
 */
const MEMBER_SSH_TIMEOUT_MS = 3 * 60_000;

/** A command on a member over SSH, through the hypervisor, with the tool's key and pinned host key. */
export function memberSsh(member: keyof typeof MEMBER_IPS, command: string): Completed {
  const hypervisor = '.etcd-kvm/lab/hypervisor';
  const proxy = `ssh -i ${hypervisor}/client_key -o UserKnownHostsFile=${hypervisor}/known_hosts -o StrictHostKeyChecking=yes -p 2222 -W %h:%p root@127.0.0.1`;
  return run(
    'ssh',
    [
      '-o',
      'BatchMode=yes',
      '-o',
      'StrictHostKeyChecking=yes',
      '-o',
      `UserKnownHostsFile=${join(LAB_STATE, 'ssh/known_hosts')}`,
      '-o',
      `ProxyCommand=${proxy}`,
      '-i',
      join(LAB_STATE, 'ssh/admin.key'),
      `admin@${MEMBER_IPS[member]}`,
      command,
    ],
    { timeoutMs: MEMBER_SSH_TIMEOUT_MS },
  );
}

/** A program run inside the lab namespace, where the member addresses exist. */
export const inLab = (program: string, args: string[]) => run(...within(NAMESPACE, program, args));

/** A NOSPACE alarm raised on one member as etcd raises it at its quota (test/helpers/raise-alarm.ts), as root. */
export const raiseNospace = (member: keyof typeof MEMBER_IPS) =>
  inLab(process.execPath, [
    '--import',
    'tsx',
    'test/helpers/raise-alarm.ts',
    endpoint(member),
    rootIdentity.caCert,
    rootIdentity.cert!,
    rootIdentity.key!,
  ]);
