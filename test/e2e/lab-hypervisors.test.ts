import test, { type ExecutionContext } from 'ava';
import { scenario } from '../helpers/timing.ts';
import { join } from 'node:path';
import {
  deploy,
  deployInBackground,
  etcdctl,
  freshLab,
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
 * Two hypervisors on the real lab: the first (namespace etcd-kvm-lab) and the second that lab:up starts
 * beside it (its own namespace, libvirtd, sshd, network and pools; its bridge on the first one's
 * segment). etcd-h1 and etcd-h2 run on the first, etcd-h3 on the second, each reached through its own
 * hypervisor. The scenarios share the deployed cluster, in this order; each one first makes sure the
 * cluster is there (a no-op run when it is), so its assertions do not rest on the one before.
 */

const INVENTORY = 'inventories/lab-hypervisors.yaml';
const STATE = 'inventories/.etcd-kvm/lab-hypervisors';
const MEMBERS = { 'etcd-h1': '192.168.150.21', 'etcd-h2': '192.168.150.22', 'etcd-h3': '192.168.150.23' } as const;
const ALL = Object.values(MEMBERS).map((ip) => `https://${ip}:2379`);
const ROOT: Identity = {
  caCert: join(STATE, 'pki/ca.crt'),
  cert: join(STATE, 'pki/clients/root.crt'),
  key: join(STATE, 'pki/clients/root.key'),
};

const notOk = (result: DeployRun) => result.report.results.filter((r) => r.status !== 'ok').map((r) => `${r.host}/${r.step}: ${r.status}`);

function deployed(t: ExecutionContext, label: string): DeployRun {
  const started = Date.now();
  const result = deploy(['-i', INVENTORY], join(STATE, 'e2e-report.json'));
  t.log(`${label}: exit ${result.status} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  if (result.status !== 0) t.log(result.output.slice(-3000));
  return result;
}

/** The cluster deployed and converged, whatever the scenarios before left. */
function converged(t: ExecutionContext): void {
  const run = deployed(t, 'converge first');
  if (run.status !== 0) throw new Error('the cluster could not be deployed: see the log above');
}

/** Every member answers healthy, asked from the first hypervisor's namespace (etcd-h3 across the joined bridges). */
const healthyCount = () => {
  const health = etcdctl(ALL, ROOT, ['endpoint', 'health']);
  return (health.stdout + health.stderr).match(/is healthy/g)?.length ?? 0;
};

test.before((t) => freshLab(t, STATE));
test.after.always(() => labRemoved(STATE));

scenario(
  'a cluster across two hypervisors: each member on its own libvirtd, peers across the segment, healthy; a re-run changes nothing',
  (t) => {
    const cold = deployed(t, 'cold deploy');
    t.is(cold.status, 0);
    // Two members on one host: losing it loses quorum, and the run says so.
    t.regex(cold.output, /warning: 2 of 3 members are on hypervisor lab \(etcd-h1, etcd-h2\): losing that host loses quorum/);

    // Each libvirtd has only its own members' domains.
    const first = virsh(['list', '--name'])
      .stdout.split('\n')
      .map((line) => line.trim())
      .filter(Boolean)
      .sort();
    const second = secondVirsh(['list', '--name'])
      .stdout.split('\n')
      .map((line) => line.trim())
      .filter(Boolean);
    t.deepEqual(first, ['etcd-h1', 'etcd-h2']);
    t.deepEqual(second, ['etcd-h3']);
    t.regex(secondVirsh(['domblklist', 'etcd-h3']).stdout, /^\s*vda\s+etcd-h3-os\.qcow2$/m);
    t.is(
      secondVirsh(['vol-path', '--pool', 'etcd-lab', 'etcd-h3-os.qcow2']).stdout.trim(),
      '/var/lib/etcd-kvm-lab/hv2/pools/etcd-lab/etcd-h3-os.qcow2',
    );

    const list = etcdctl(ALL, ROOT, ['member', 'list', '-w', 'json']);
    t.is(list.status, 0, list.stderr);
    const members = (JSON.parse(list.stdout) as { members: { name: string; peerURLs: string[] }[] }).members;
    t.deepEqual(
      members.map((member) => [member.name, member.peerURLs]).sort(),
      Object.entries(MEMBERS).map(([name, ip]) => [name, [`https://${ip}:2380`]]),
    );
    t.is(healthyCount(), 3);
    t.is(etcdctl([ALL[0]!], ROOT, ['put', 'e2e/hypervisors', 'written on lab, read on lab2']).status, 0);
    t.is(
      etcdctl([ALL[2]!], ROOT, ['get', '--consistency=s', '--print-value-only', 'e2e/hypervisors']).stdout.trim(),
      'written on lab, read on lab2',
    );

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
    t.is(healthyCount(), 3);

    t.is(lab('up').status, 0);
    const after = deployed(t, 'lab2 reachable again');
    t.is(after.status, 0);
    t.deepEqual(notOk(after), []);
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
    t.is(healthyCount(), 3);
  },
);
