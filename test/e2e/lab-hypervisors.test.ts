import test, { type ExecutionContext } from 'ava';
import { scenario } from '../helpers/timing.ts';
import type { Completed } from '../helpers/exec.ts';
import { spawnSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import {
  deploy,
  deployInBackground,
  etcdctl,
  etcdKvm,
  freshLab,
  inLab,
  killSecondSshSessions,
  lab,
  labRemoved,
  secondSshdPid,
  secondVirsh,
  virsh,
  type DeployRun,
  type Identity,
} from '../helpers/lab.ts';

/**
 * Two hypervisors and password mode on the real lab, on one cluster. The first hypervisor (namespace
 * etcd-kvm-lab) and the second that lab:up starts beside it (its own namespace, libvirtd, sshd, network and
 * pools; its bridge on the first one's segment): etcd-h1 and etcd-h2 run on the first, etcd-h3 on the second,
 * each reached through its own hypervisor. The cluster runs the seed's other mode (client_cert_auth: false):
 * root authenticates with the inventory's password, anonymous clients are refused, the REST gateway answers.
 * One cold deploy serves both (two files each paid for one before). The scenarios share the cluster, in this
 * order; each after the first two makes sure the cluster is there (a no-op run when it is), so its assertions
 * do not rest on the one before.
 */

const INVENTORY = 'inventories/.e2e-hypervisors.yaml';
const STATE = 'inventories/.etcd-kvm/lab-hypervisors';
const REPORT = join(STATE, 'e2e-report.json');
const ROOT_PASSWORD = 'e2e-root-password-Zq7';
const MEMBERS = { 'etcd-h1': '192.168.150.21', 'etcd-h2': '192.168.150.22', 'etcd-h3': '192.168.150.23' } as const;
const ALL = Object.values(MEMBERS).map((ip) => `https://${ip}:2379`);
const [H1, H2, H3] = ALL as [string, string, string];
const CA: Identity = { caCert: join(STATE, 'pki/ca.crt') };

const notOk = (result: DeployRun) => result.report.results.filter((r) => r.status !== 'ok').map((r) => `${r.host}/${r.step}: ${r.status}`);

function deployed(t: ExecutionContext, label: string): DeployRun {
  const started = Date.now();
  const result = deploy(['-i', INVENTORY], REPORT);
  t.log(`${label}: exit ${result.status} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  if (result.status !== 0) t.log(result.output.slice(-4000));
  return result;
}

/** The cluster deployed and converged, whatever the scenarios before left. */
function converged(t: ExecutionContext): void {
  const run = deployed(t, 'converge first');
  if (run.status !== 0) throw new Error('the cluster could not be deployed: see the log above');
}

/**
 * etcdctl as root by password. Right after formation a member may still see a leader change or time out while
 * it checks the password (bcrypt in an emulated guest): such transient answers are asked again, as the tool does.
 */
function asRoot(t: ExecutionContext, args: string[], at = ALL): Completed {
  const ask = () => etcdctl(at, CA, ['--user', `root:${ROOT_PASSWORD}`, ...args]);
  let result = ask();
  for (
    let attempt = 1;
    attempt < 5 && result.status !== 0 && /leader changed|deadline exceeded|timed out|no leader/i.test(result.stderr);
    attempt++
  ) {
    t.log(`etcdctl ${args[0]} at ${at.join(',')}: transient, asked again: ${result.stderr.trim().split('\n').at(-1)}`);
    result = ask();
  }
  return result;
}

/** Every member answers healthy, asked from the first hypervisor's namespace (etcd-h3 across the joined bridges). */
const healthyCount = (t: ExecutionContext) => {
  const health = asRoot(t, ['endpoint', 'health']);
  return (health.stdout + health.stderr).match(/is healthy/g)?.length ?? 0;
};

const domainNames = (list: Completed) =>
  list.stdout
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean)
    .sort();

test.before((t) => {
  const doc = parse(readFileSync('inventories/lab-hypervisors.yaml', 'utf8'));
  doc.etcd = { ...doc.etcd, client_cert_auth: false, grpc_gateway_enabled: true };
  doc.members[0].authentication_bootstrap = { bootstrap: true, root_password: ROOT_PASSWORD };
  writeFileSync(INVENTORY, stringify(doc), { mode: 0o600 });
  freshLab(t, STATE);
});

test.after.always(() => {
  labRemoved(STATE);
  rmSync(INVENTORY, { force: true });
});

/** Processes of this inventory's deploys still alive (none may be left behind by an interrupted run). */
const leftover = () => spawnSync('pgrep', ['-f', `deploy -i ${INVENTORY}`], { encoding: 'utf8' }).stdout.trim();

scenario(
  'a cold deploy across two hypervisors stopped four times (kill -9 after the volumes, kill -9 as the domains are defined, SIGINT during the first boot, kill -9 in the health wait) is finished by the next run',
  async (t) => {
    const stopAt = async (point: RegExp, signal: NodeJS.Signals, label: string) => {
      let sent = false;
      const started = Date.now();
      const stopped = await deployInBackground(['-i', INVENTORY], (output, child) => {
        if (!sent && point.test(output)) {
          sent = true;
          child.kill(signal);
        }
      });
      t.log(`${label}: ${signal} -> exit ${stopped.status ?? stopped.signal} after ${((Date.now() - started) / 1000).toFixed(1)} s`);
      t.true(sent, `${label}: the run reached the point`);
      t.is(leftover(), '', `${label}: no process of the run is left`);
      return stopped;
    };

    const first = await stopAt(/✔ volumes: 3 changed/, 'SIGKILL', 'after the volumes');
    t.is(first.signal, 'SIGKILL');
    const volumes = `${virsh(['vol-list', '--pool', 'etcd-lab']).stdout}\n${secondVirsh(['vol-list', '--pool', 'etcd-lab']).stdout}`;
    for (const member of Object.keys(MEMBERS)) t.regex(volumes, new RegExp(`${member}-os\\.qcow2`));

    const second = await stopAt(/❯ domain/, 'SIGKILL', 'as the domains are defined');
    t.regex(second.output, /lock: took over the lock of a run that is gone/);

    const third = await stopAt(/❯ guest/, 'SIGINT', 'during the first boot');
    // The wait in flight ends as it would; nothing after it starts; the recap is printed.
    t.is(third.status, 130);
    t.regex(third.output, /RECAP in [\d.]+ s/);
    t.regex(third.output, /health: skipped, interrupted/);
    t.deepEqual(domainNames(virsh(['list', '--all', '--name'])), ['etcd-h1', 'etcd-h2']);
    t.deepEqual(domainNames(secondVirsh(['list', '--all', '--name'])), ['etcd-h3']);

    await stopAt(/❯ health/, 'SIGKILL', 'in the health wait');
  },
);

scenario(
  'the cluster across two hypervisors in password mode: each member on its own libvirtd, peers across the segment; root by password, anonymous refused, the REST gateway answers; a re-run changes nothing',
  (t) => {
    // The run that finishes the interrupted cold deploy above (or, run alone, the cold deploy itself).
    const cold = deployed(t, 'cold deploy, finished');
    t.is(cold.status, 0);
    t.false(cold.output.includes(ROOT_PASSWORD), 'the root password is never printed');
    // Two members on one host: losing it loses quorum, and the run says so.
    t.regex(cold.output, /warning: 2 of 3 members are on hypervisor lab \(etcd-h1, etcd-h2\): losing that host loses quorum/);

    // Each libvirtd has only its own members' domains.
    t.deepEqual(domainNames(virsh(['list', '--name'])), ['etcd-h1', 'etcd-h2']);
    t.deepEqual(domainNames(secondVirsh(['list', '--name'])), ['etcd-h3']);
    t.regex(secondVirsh(['domblklist', 'etcd-h3']).stdout, /^\s*vda\s+etcd-h3-os\.qcow2$/m);
    t.is(
      secondVirsh(['vol-path', '--pool', 'etcd-lab', 'etcd-h3-os.qcow2']).stdout.trim(),
      '/var/lib/etcd-kvm-lab/hv2/pools/etcd-lab/etcd-h3-os.qcow2',
    );

    const list = asRoot(t, ['member', 'list', '-w', 'json']);
    t.is(list.status, 0, list.stderr);
    const members = (JSON.parse(list.stdout) as { members: { name: string; peerURLs: string[] }[] }).members;
    t.deepEqual(
      members.map((member) => [member.name, member.peerURLs]).sort(),
      Object.entries(MEMBERS).map(([name, ip]) => [name, [`https://${ip}:2380`]]),
    );
    t.is(healthyCount(t), 3);

    // Written through the first hypervisor's member, read through the second's.
    const put = asRoot(t, ['put', 'e2e/password', 'written on lab, read on lab2'], [H1]);
    t.is(put.status, 0, put.stderr);
    const got = asRoot(t, ['get', '--consistency=s', '--print-value-only', 'e2e/password'], [H3]);
    t.is(got.stdout.trim(), 'written on lab, read on lab2', got.stderr);

    const anonymous = etcdctl([H2], CA, ['get', 'e2e/password']);
    t.not(anonymous.status, 0);
    t.regex(anonymous.stderr, /user name is empty/);
    t.not(etcdctl([H2], CA, ['--user', 'root:wrong', 'get', 'e2e/password']).status, 0);

    // grpc_gateway_enabled: the JSON/REST endpoints, with a token from /v3/auth/authenticate.
    const rest = (path: string, body: unknown, headers: string[] = []) =>
      inLab('curl', [
        '--silent',
        '--show-error',
        '--max-time',
        '10',
        '--cacert',
        CA.caCert,
        ...headers.flatMap((h) => ['-H', h]),
        '-d',
        JSON.stringify(body),
        `${H2}${path}`,
      ]);
    const token = (JSON.parse(rest('/v3/auth/authenticate', { name: 'root', password: ROOT_PASSWORD }).stdout) as { token?: string }).token;
    t.truthy(token);
    const key = Buffer.from('e2e/password').toString('base64');
    const range = JSON.parse(rest('/v3/kv/range', { key }, [`Authorization: ${token}`]).stdout) as { kvs?: { value: string }[] };
    t.is(Buffer.from(range.kvs?.[0]?.value ?? '', 'base64').toString(), 'written on lab, read on lab2');
    t.regex(rest('/v3/kv/range', { key }).stdout, /user name is empty/);

    const again = deployed(t, 're-run');
    t.is(again.status, 0);
    t.deepEqual(notOk(again), []);
  },
);

scenario(
  "the second hypervisor's sshd stopped: the run fails exactly its member, says so in the recap, the cluster stays healthy; the next run converges",
  (t) => {
    converged(t);
    const sshd = secondSshdPid();
    t.truthy(sshd, 'the second hypervisor has an sshd');
    process.kill(sshd!, 'SIGTERM');
    t.teardown(() => lab('up'));

    const started = Date.now();
    const cut = deployed(t, 'with lab2 unreachable');
    t.is(cut.status, 1);
    // Bounded: the run does not wait for the member it cannot reach.
    t.true(Date.now() - started < 60_000);
    const failedHosts = [...new Set(cut.report.results.filter((r) => r.status === 'failed').map((r) => r.host))];
    t.deepEqual(failedHosts, ['etcd-h3']);
    t.deepEqual(
      cut.report.results.filter((r) => r.host !== 'etcd-h3' && r.status !== 'ok').map((r) => `${r.host}/${r.step}`),
      [],
      'the other members went through every step',
    );
    const report = cut.report as DeployRun['report'] & { unreachable: { hypervisor: string; members: string[]; reason: string }[] };
    t.deepEqual(
      report.unreachable.map(({ hypervisor, members }) => [hypervisor, members]),
      [['lab2', ['etcd-h3']]],
    );
    t.regex(
      cut.output,
      /UNREACHABLE \(their members failed; the others went on\)\nhypervisor lab2 at root@127\.0\.0\.1:2224 \(etcd-h3\): cannot connect: /,
    );
    // Only its sshd is gone: etcd-h3 runs on, and the cluster with it.
    t.is(healthyCount(t), 3);

    t.is(lab('up').status, 0);
    const after = deployed(t, 'lab2 reachable again');
    t.is(after.status, 0);
    t.deepEqual(notOk(after), []);
  },
);

scenario(
  "doctor on the lab: both hypervisors' ground ready (libvirt, pools, base image, network, each running member's guest agent); with lab2's sshd stopped and lab's image pool stopped it fails naming each with what to do, and changes nothing",
  (t) => {
    converged(t);
    const doctor = () => etcdKvm('doctor', ['-i', INVENTORY]);
    const ready = doctor();
    t.is(ready.status, 0, ready.stdout + ready.stderr);
    for (const [hypervisor, members] of [
      ['lab', ['etcd-h1', 'etcd-h2']],
      ['lab2', ['etcd-h3']],
    ] as const) {
      const line = (detail: string) => new RegExp(`^ok {4}hypervisor ${hypervisor} +${detail}$`, 'm');
      t.regex(ready.stdout, line('reached; libvirt \\d+\\.\\d+\\.\\d+'));
      t.regex(ready.stdout, line('pool etcd-lab runs, [\\d.]+ GiB free'));
      t.regex(ready.stdout, line('base image debian-12-etcd\\.qcow2 in pool etcd-lab-images, [\\d.]+ GiB'));
      t.regex(ready.stdout, line('network etcd-lab is active'));
      for (const member of members) t.regex(ready.stdout, line(`${member} runs; its guest agent answers`));
    }
    t.regex(ready.stdout, /^ok {4}control node +xorriso at /m);
    t.regex(ready.stdout, /\ndoctor: the ground is ready/);

    process.kill(secondSshdPid()!, 'SIGTERM');
    t.teardown(() => lab('up'));
    t.is(virsh(['pool-destroy', 'etcd-lab-images']).status, 0);
    t.teardown(() => virsh(['pool-start', 'etcd-lab-images']));
    const domains = domainNames(virsh(['list', '--name']));
    const broken = doctor();
    t.is(broken.status, 1, broken.stdout + broken.stderr);
    t.regex(
      broken.stdout,
      /^FAIL {2}hypervisor lab2 +root@127\.0\.0\.1:2224: cannot connect: .*\n +fix: check hypervisors\.lab2 .*its members: etcd-h3$/m,
    );
    t.regex(
      broken.stdout,
      /^FAIL {2}hypervisor lab +pool etcd-lab-images is not running\n +fix: virsh pool-start etcd-lab-images && virsh pool-autostart etcd-lab-images$/m,
    );
    t.regex(broken.stdout, /\ndoctor: \d+ failed/);
    // Read-only: the pool stays stopped, and every member runs on.
    t.regex(virsh(['pool-info', 'etcd-lab-images']).stdout, /State:\s+inactive/);
    t.deepEqual(domainNames(virsh(['list', '--name'])), domains);

    t.is(virsh(['pool-start', 'etcd-lab-images']).status, 0);
    t.is(lab('up').status, 0);
    t.is(doctor().status, 0);
  },
);

scenario(
  "the second hypervisor's SSH session killed during runs (at four points): each run ends within a minute, healed or failing with the hypervisor's name, and the next run converges",
  async (t) => {
    converged(t);
    for (const point of ['❯ owner', '❯ volumes', '❯ guest', '❯ health']) {
      let killed = -1;
      const started = Date.now();
      const result = await deployInBackground(['-i', INVENTORY], (output) => {
        if (killed < 0 && output.includes(point)) killed = killSecondSshSessions();
      });
      const seconds = (Date.now() - started) / 1000;
      t.log(`cut at ${point}: ${killed} session(s) killed, exit ${result.status} in ${seconds.toFixed(1)} s`);
      t.true(killed > 0, `a session was cut at ${point}`);
      t.true(seconds < 60, `the run at ${point} ended within a minute`);
      // The pool opens a new connection where sshd still listens; if the cut lands under a command, that member's step fails, naming the hypervisor.
      if (result.status !== 0) t.regex(result.output, /hypervisor lab2|member etcd-h3/, `${point}: the failure names the host`);
      t.true(result.status === 0 || result.status === 1, `${point}: exit 0 or 1 (${result.status ?? result.signal})`);
      t.notRegex(result.output, /^\s+at .+:\d+:\d+\)?$|^Node\.js v\d+/m, `${point}: no crash (stack trace)`);
    }
    const after = deployed(t, 'after the cuts');
    t.is(after.status, 0);
    t.deepEqual(notOk(after), []);
    t.is(healthyCount(t), 3);
  },
);
