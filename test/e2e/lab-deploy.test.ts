import test, { type ExecutionContext } from 'ava';
import { scenario } from '../helpers/timing.ts';
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { run } from '../helpers/exec.ts';
import { FORCE_NEW_CLUSTER_LEFT, type StatusReport } from '../../tasks/status/report.ts';
import type { Check } from '../../tasks/verify/verdict.ts';
import { CANARY_KEY } from '../../tasks/verify/facts.ts';
import { faultDrillLines } from '../../tasks/faults/report.ts';
import type { FaultDrillReport } from '../../tasks/faults/run.ts';
import { loadInventory } from '../../tasks/inventory/load.ts';
import { certificatesIn, isSignedBy } from '../../tasks/pki/x509.ts';
import {
  deploy,
  deployInBackground,
  type DeployRun,
  endpoint,
  etcdctl,
  etcdctlPuts,
  etcdKvm,
  freshLab,
  inLab,
  installed,
  LAB_INVENTORY,
  LAB_STATE,
  labRemoved,
  MEMBER_IPS,
  memberSsh,
  NAMESPACE,
  raiseNospace,
  rootIdentity,
  tlsArgs,
  virsh,
} from '../helpers/lab.ts';
import { quorumKept, sampledHealth, withWriter } from '../helpers/lab-watch.ts';

/**
 * The whole thing, for real: the local lab (libvirtd + QEMU in a network namespace), three Debian VMs
 * booted by cloud-init, etcd over TLS with auth. Everything is checked from outside the tool: virsh, and
 * etcdctl inside the lab namespace. Brings the lab up from scratch and takes it down at the end.
 */

const MEMBERS = Object.keys(MEMBER_IPS) as (keyof typeof MEMBER_IPS)[];
const ALL = MEMBERS.map((name) => endpoint(name));
const outputs: string[] = [];

function deployed(t: { log: (...values: unknown[]) => void }, args: string[] = [], reportPath?: string): DeployRun {
  const started = Date.now();
  const result = deploy(args, reportPath);
  outputs.push(result.output);
  t.log(`deploy ${args.join(' ')}: exit ${result.status} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  if (result.status !== 0) t.log(result.output.slice(-4000));
  return result;
}

/** What `deploy --list-phases` says a run with these arguments takes now: the phases that run, in order. */
function listedPhases(t: { log: (...values: unknown[]) => void; is: ExecutionContext['is'] }, args: string[]): string[] {
  const path = join(mkdtempSync(join(tmpdir(), 'etcd-kvm-e2e-')), 'plan.json');
  const listed = deployed(t, [...args, '--list-phases'], path);
  t.is(listed.status, 0, listed.output.slice(-2000));
  const { plan } = JSON.parse(readFileSync(path, 'utf8')) as { plan: { phase: string; runs: boolean }[] };
  return plan.filter((phase) => phase.runs).map((phase) => phase.phase);
}

/** The phases a run took but the gather stage's facts (asked before the plan is made), from its --json report. */
const phasesRun = (reportPath: string): string[] =>
  (JSON.parse(readFileSync(reportPath, 'utf8')) as { timing: { phases: { phase: string }[] } }).timing.phases
    .map(({ phase }) => phase)
    .filter((phase) => !['cluster', 'networks'].includes(phase));

/** A failed run's last lines, as an assertion's message: CI's summary of a failure then says why (its logs come earlier). */
const endOf = (result: DeployRun) => result.output.slice(-1500);

const changed = (result: DeployRun) =>
  result.report.results
    .filter((r) => r.status !== 'ok')
    .map((r) => `${r.host}/${r.step}: ${r.status} ${r.changes.map((c) => c.summary).join('; ')}`);

test.before((t) => freshLab(t, LAB_STATE));

test.after.always(() => labRemoved(LAB_STATE));

scenario('a cold deploy creates a healthy, TLS-only, authenticated 3-member cluster', (t) => {
  const result = deployed(t);
  t.is(result.status, 0, endOf(result));

  const list = etcdctl(ALL, rootIdentity, ['member', 'list', '-w', 'json']);
  t.is(list.status, 0, list.stderr);
  const members = (JSON.parse(list.stdout) as { members: { name: string; peerURLs: string[]; clientURLs: string[] }[] }).members;
  t.deepEqual(members.map((m) => m.name).sort(), ['etcd-1', 'etcd-2', 'etcd-3']);
  for (const m of members) for (const url of [...m.peerURLs, ...m.clientURLs]) t.regex(url, /^https:\/\//);

  const health = etcdctl(ALL, rootIdentity, ['endpoint', 'health']);
  t.is(health.status, 0, health.stderr);
  // etcdctl 3.4 reports health on stderr.
  t.is((health.stdout + health.stderr).match(/is healthy/g)?.length, 3);
});

scenario(
  "after the cold deploy every member's first boot ended in done, its etcd environment says existing, its etcd runs the lab's raft timing and etcd's own corruption checks",
  (t) => {
    for (const member of MEMBERS) {
      const status = memberSsh(
        member,
        'cloud-init status; grep ^ETCD_INITIAL_CLUSTER_STATE= /etc/etcd/etcd.env; ' +
          // What the running etcd was started with, not only what its file says: lab.yaml's heartbeat and election timeout,
          // and the corruption checks by the names the image's etcd (3.4) reads.
          "sudo cat /proc/$(systemctl show -p MainPID --value etcd)/environ | tr '\\0' '\\n' | grep -E '^ETCD_(HEARTBEAT_INTERVAL|ELECTION_TIMEOUT|EXPERIMENTAL_[A-Z_]*CORRUPT[A-Z_]*)=' | sort",
      );
      t.is(status.status, 0, status.stderr);
      t.deepEqual(
        status.stdout.trim().split('\n'),
        [
          'status: done',
          'ETCD_INITIAL_CLUSTER_STATE=existing',
          'ETCD_ELECTION_TIMEOUT=5000',
          'ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME=4h',
          'ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK=true',
          'ETCD_HEARTBEAT_INTERVAL=500',
        ],
        member,
      );
    }
  },
);

scenario('a key written through etcd-1 is read back through etcd-3 with the root client certificate', (t) => {
  t.is(etcdctl([endpoint('etcd-1')], rootIdentity, ['put', 'e2e/greeting', 'hello from etcd-1']).status, 0);
  const read = etcdctl([endpoint('etcd-3')], rootIdentity, ['get', '--print-value-only', 'e2e/greeting']);
  t.is(read.stdout.trim(), 'hello from etcd-1');
});

/**
 * A refused TLS handshake is retried by etcdctl until its command timeout: 2 s, not the helper's 10, for the two
 * clients refused that way (the later flag wins), which spent 20 s of this scenario waiting for it.
 */
const REFUSED_SOON = '--command-timeout=2s';

scenario('clients without a certificate, with another CA, or without a user are refused; auth is enabled', (t) => {
  const noCert = etcdctl([endpoint('etcd-1')], { caCert: rootIdentity.caCert }, [REFUSED_SOON, 'get', 'e2e/greeting']);
  t.not(noCert.status, 0);

  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-e2e-ca-'));
  const openssl = (args: string[]) => t.is(run('openssl', args).status, 0);
  openssl([
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-subj',
    '/CN=rogue-ca',
    '-keyout',
    join(dir, 'ca.key'),
    '-out',
    join(dir, 'ca.crt'),
    '-days',
    '1',
  ]);
  openssl(['req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=root', '-keyout', join(dir, 'root.key'), '-out', join(dir, 'root.csr')]);
  openssl([
    'x509',
    '-req',
    '-in',
    join(dir, 'root.csr'),
    '-CA',
    join(dir, 'ca.crt'),
    '-CAkey',
    join(dir, 'ca.key'),
    '-CAcreateserial',
    '-out',
    join(dir, 'root.crt'),
    '-days',
    '1',
  ]);
  const rogue = etcdctl([endpoint('etcd-1')], { caCert: rootIdentity.caCert, cert: join(dir, 'root.crt'), key: join(dir, 'root.key') }, [
    REFUSED_SOON,
    'get',
    'e2e/greeting',
  ]);
  t.not(rogue.status, 0);
  t.false(rogue.stdout.includes('hello'));
  rmSync(dir, { recursive: true, force: true });

  // A valid certificate whose CN is no etcd user (the member's own) is denied: auth is on.
  const asMember = etcdctl(
    [endpoint('etcd-1')],
    { caCert: rootIdentity.caCert, cert: join(LAB_STATE, 'pki/members/etcd-1.crt'), key: join(LAB_STATE, 'pki/members/etcd-1.key') },
    ['get', 'e2e/greeting'],
  );
  t.not(asMember.status, 0);
  t.regex(asMember.stderr, /permission denied|user name not found/);
  t.regex(etcdctl([endpoint('etcd-1')], rootIdentity, ['user', 'get', 'root']).stdout, /Roles: root/);
});

/** A TLS request to a member's peer port with a client certificate: the HTTP code, '000' when the handshake failed. */
const peerPortAnswer = (member: keyof typeof MEMBER_IPS, cert: string, key: string, serverCa = join(LAB_STATE, 'pki/peer-ca.crt')) =>
  inLab('curl', [
    '--silent',
    '--show-error',
    '--http1.1',
    '--max-time',
    '10',
    '--cacert',
    serverCa,
    '--cert',
    cert,
    '--key',
    key,
    '-o',
    '/dev/null',
    '-w',
    '%{http_code}',
    `https://${MEMBER_IPS[member]}:2380/members`,
  ]);

scenario(
  'the peer port admits members only: the root client certificate fails the TLS handshake on every member, and the members talk',
  (t) => {
    for (const member of MEMBERS) {
      const answer = peerPortAnswer(member, rootIdentity.cert!, rootIdentity.key!);
      t.is(answer.stdout, '000', `${member}: root's certificate must not reach /members on the peer port`);
      t.regex(answer.stderr, /alert|certificate|SSL/i, member);
      t.is(runningValue(member, 'ETCD_PEER_CERT_ALLOWED_CN'), 'etcd-kvm-peer', member);
    }
    const health = etcdctl(ALL, rootIdentity, ['endpoint', 'health']);
    t.is((health.stdout + health.stderr).match(/is healthy/g)?.length, 3);
  },
);

scenario('each VM serves the SSH host key the tool generated and pinned: ssh through the hypervisor with strict checking', (t) => {
  for (const member of MEMBERS) {
    const ssh = memberSsh(member, 'hostname');
    t.is(ssh.status, 0, ssh.stderr);
    t.is(ssh.stdout.trim(), member);
  }
});

scenario("etcd's data is on the data disk, chrony uses the inventory's sources, the node exporter answers", (t) => {
  for (const member of MEMBERS) {
    const mount = memberSsh(
      member,
      'findmnt -n -o SOURCE,FSTYPE,LABEL /var/lib/etcd && sudo test -d /var/lib/etcd/member && stat -c %U:%a /var/lib/etcd',
    );
    t.is(mount.status, 0, mount.stderr);
    t.deepEqual(
      mount.stdout
        .trim()
        .split('\n')
        .map((line) => line.trim().split(/\s+/).join(' ')),
      ['/dev/vdb ext4 etcd-data', 'etcd:700'],
      member,
    );

    // The lab has no time server: the configured sources are listed, unreachable.
    const sources = memberSsh(member, 'chronyc -n sources');
    t.is(sources.status, 0, sources.stderr);
    t.regex(sources.stdout, /192\.168\.150\.1 /);
    t.regex(sources.stdout, /192\.168\.150\.2 /);
    t.is(memberSsh(member, 'grep -c "^makestep 1 3$" /etc/chrony/chrony.conf').stdout.trim(), '1');

    const metrics = inLab('curl', ['--silent', '--max-time', '10', `http://${MEMBER_IPS[member]}:9100/metrics`]);
    t.is(metrics.status, 0, metrics.stderr);
    t.regex(metrics.stdout, /node_filesystem_size_bytes\{device="\/dev\/vdb",fstype="ext4",mountpoint="\/var\/lib\/etcd"\}/);
  }
});

scenario(
  'a second run changes nothing, and a dry-run after it plans nothing; every guest answered through its agent; --list-phases said the phases it took',
  (t) => {
    const listed = listedPhases(t, []);
    const report = join(mkdtempSync(join(tmpdir(), 'etcd-kvm-e2e-')), 'report.json');
    const second = deployed(t, ['--profile'], report);
    t.is(second.status, 0);
    t.deepEqual(phasesRun(report), listed);
    t.deepEqual(listed, ['pki', 'render', 'owner', 'volumes', 'cloud-init', 'domain', 'guest', 'health', 'auth', 'users', 'consistency']);
    // The guest agent answered for every member: no member's facts fell back to SSH.
    t.regex(second.output, /^PROFILE/m);
    t.notRegex(second.output, /not through the guest agent/);
    // Every step on every host it acts on, each exactly once: the pipeline ran whole, nothing was skipped.
    const perMember = ['render', 'owner', 'volumes', 'cloud-init', 'domain', 'guest', 'health'];
    t.deepEqual(
      second.report.results.map((r) => `${r.step}@${r.host}`).sort(),
      [
        'pki@localhost',
        'members@localhost',
        'formation@localhost',
        'auth@etcd-1',
        'users@etcd-1',
        ...perMember.flatMap((step) => MEMBERS.map((member) => `${step}@${member}`)),
      ].sort(),
    );
    t.deepEqual(changed(second), []);
    // As a CI gate would ask it: nothing to do is 0 (3 would say changes are pending).
    const dry = deployed(t, ['--dry-run', '--detailed-exitcode']);
    t.is(dry.status, 0);
    t.deepEqual(changed(dry), []);
  },
);

scenario('ten consecutive runs on a converged cluster: changed=0 every time', (t) => {
  const times: number[] = [];
  for (let run = 1; run <= 10; run++) {
    const started = Date.now();
    const result = deploy();
    times.push(Date.now() - started);
    t.is(result.status, 0, `run ${run}`);
    t.deepEqual(changed(result), [], `run ${run}`);
  }
  t.log(`run times (s): ${times.map((ms) => (ms / 1000).toFixed(1)).join(' ')}`);
});

/** status.ts as a script reads it (its JSON) and as a person does (its table's last line). */
function status(t: ExecutionContext): { status: number; report: StatusReport; table: string } {
  const json = etcdKvm('status', ['-i', 'inventories/lab.yaml', '--json']);
  const table = etcdKvm('status', ['-i', 'inventories/lab.yaml']);
  t.log(table.stdout.trim());
  t.is(json.status, table.status);
  return { status: json.status, report: JSON.parse(json.stdout) as StatusReport, table: table.stdout };
}

/** etcdctl's JSON with its uint64 IDs kept exact (JSON.parse would round them), as hex. */
function etcdctlJson<T>(args: string[]): T {
  const result = etcdctl(ALL, rootIdentity, [...args, '-w', 'json']);
  if (result.status !== 0) throw new Error(result.stderr);
  const exact = result.stdout.replace(
    /"(ID|member_id|cluster_id|leader)":(\d+)/g,
    (_, key: string, id: string) => `"${key}":"${BigInt(id).toString(16)}"`,
  );
  return JSON.parse(exact) as T;
}

interface EndpointStatus {
  Status: { header: { member_id: string; revision: number }; leader: string; isLearner?: boolean };
}
interface MemberList {
  members: { ID: string; name: string; isLearner?: boolean }[];
}

scenario("status agrees with etcdctl's endpoint status and member list taken around it: IDs, leader, learners, revision", (t) => {
  // What status must agree on; raft indexes move even in a quiet cluster, these do not.
  const take = () => ({
    endpoints: etcdctlJson<EndpointStatus[]>(['endpoint', 'status', '--cluster']).map(({ Status: s }) => ({
      Status: { header: { member_id: s.header.member_id, revision: s.header.revision }, leader: s.leader, isLearner: Boolean(s.isLearner) },
    })),
    list: {
      members: etcdctlJson<MemberList>(['member', 'list']).members.map((m) => ({
        ID: m.ID,
        name: m.name,
        isLearner: Boolean(m.isLearner),
      })),
    },
  });
  const before = take();
  const { status: code, report, table } = status(t);
  const after = take();
  t.is(code, 0);
  t.true(report.healthy);
  t.regex(table, /\ncluster: healthy, 3 of 3 members voting, leader etcd-\d\n?$/);
  // A quiet cluster: what etcdctl saw before and after is the same, so status saw it too.
  t.deepEqual(before, after);
  const leaderId = before.endpoints[0]!.Status.leader;
  const byId = new Map(before.list.members.map((m) => [m.ID, m]));
  t.deepEqual(report.members.map((m) => m.id).sort(), [...byId.keys()].sort());
  for (const row of report.members) {
    const listed = byId.get(row.id!)!;
    const endpoint = before.endpoints.find((e) => e.Status.header.member_id === row.id)!;
    t.is(row.name, listed.name);
    t.is(row.role, row.id === leaderId ? 'leader' : listed.isLearner ? 'learner' : 'follower', row.name);
    t.is(row.revision, String(endpoint.Status.header.revision), row.name);
    t.is(row.vm, 'running');
    t.true(Date.parse(row.certificateExpires!) > Date.now(), row.name);
  }
  t.is(report.leader, byId.get(leaderId)!.name);
});

scenario(
  'verify: the members agree (HashKV equal at one pinned revision, as etcdctl endpoint hashkv gives it there); its canary read through each and gone',
  (t) => {
    const verified = etcdKvm('verify', ['-i', 'inventories/lab.yaml', '--json']);
    t.is(verified.status, 0, verified.stdout + verified.stderr);
    const report = JSON.parse(verified.stdout) as { passed: boolean; pinnedRevision: number; checks: Check[] };
    t.true(report.passed);
    t.deepEqual(
      report.checks.filter((check) => !check.ok),
      [],
    );
    // etcd's own answer at the revision verify pinned: the same hash on every member, and the one verify reports.
    const hashed = etcdctl(ALL, rootIdentity, ['endpoint', 'hashkv', '--rev', String(report.pinnedRevision), '-w', 'json']);
    t.is(hashed.status, 0, hashed.stderr);
    const hashes = (JSON.parse(hashed.stdout) as { HashKV: { hash: number } }[]).map(({ HashKV }) => HashKV.hash);
    t.is(hashes.length, 3);
    t.is(new Set(hashes).size, 1, hashes.join(', '));
    t.regex(
      report.checks.find((check) => check.check === 'hashkv')!.detail,
      new RegExp(`^equal on 3 voting members at revision ${report.pinnedRevision}: etcd-1 ${hashes[0]} `),
    );
    t.regex(report.checks.find((check) => check.check === 'canary')!.detail, /read back linearizably through etcd-1, etcd-2, etcd-3$/);
    t.is(etcdctl(ALL, rootIdentity, ['get', CANARY_KEY, '--print-value-only']).stdout.trim(), '', 'the canary is deleted');
    // The same checks as lines, one each.
    const lines = etcdKvm('verify', ['-i', 'inventories/lab.yaml']);
    t.is(lines.status, 0, lines.stdout + lines.stderr);
    t.regex(lines.stdout, /^ok {3}hashkv: equal on 3 voting members at revision \d+/m);
    t.regex(lines.stdout, /^ok {3}certificate etcd-3: chains to the CA, ends in \d+ days$/m);
  },
);

/** Each member's MAC, as the lab's inventory gives it (a link is cut and restored by it). */
const memberMac = (member: string) => loadInventory(LAB_INVENTORY).members.find((m) => m.name === member)!.interfaces[0]!.mac;

scenario(
  'drill: a fault drill on the lab cluster (a follower paused, its link cut, etcd killed, the leader cut off, a reset, a slow disk) under its own clients: no acknowledged write lost, every read linearizable, verify passed after each; nothing left behind, and the next deploy changes nothing',
  (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-e2e-drill-'));
    const started = Date.now();
    const args = ['-i', LAB_INVENTORY, '--hold', '5', '--json', '--report', join(dir, 'drill.md')];
    const drill = etcdKvm('drill', args, { timeoutMs: 20 * 60_000 });
    outputs.push(drill.stdout, drill.stderr);
    t.log(`drill: exit ${drill.status} in ${((Date.now() - started) / 1000).toFixed(1)} s\n${drill.stderr}`);
    t.is(drill.status, 0, drill.stderr.slice(-3000));
    const report = JSON.parse(drill.stdout) as FaultDrillReport;
    t.log(faultDrillLines(report));
    t.true(report.passed);
    t.deepEqual(
      report.faults.map((fault) => fault.kind),
      ['pause', 'link', 'kill', 'leader-link', 'reset', 'slow-disk'],
    );
    for (const fault of report.faults) {
      t.is(fault.error, undefined, `${fault.kind}: ${fault.error}`);
      t.deepEqual(fault.verifyFailed, [], fault.kind);
      // The leader's fault hits the leader, and another member leads after it; every other fault, a follower.
      if (fault.kind === 'leader-link') {
        t.is(fault.member, fault.leaderBefore);
        t.not(fault.leaderAfter, fault.leaderBefore, 'cut off, the leader is replaced');
      } else t.not(fault.member, fault.leaderBefore, fault.kind);
    }
    t.deepEqual(report.history.problems, []);
    t.true(report.history.writes.acknowledged > 50, `${report.history.writes.acknowledged} writes acknowledged`);
    t.true(report.history.reads.answered > 50, `${report.history.reads.answered} reads answered`);
    t.regex(readFileSync(join(dir, 'drill.md'), 'utf8'), /^\| leader-link \| etcd-\d \| [\d.]+ s \| [\d.]+ s \| \d+ \| \d+ \| passed \|$/m);
    // Nothing left behind: no key of the drill's, every domain running, every link up, no disk throttled.
    t.is(etcdctl(ALL, rootIdentity, ['get', 'etcd-kvm/drill/', '--prefix', '--keys-only']).stdout.trim(), '');
    for (const member of MEMBERS) {
      t.is(virsh(['domstate', member]).stdout.trim(), 'running', member);
      t.regex(virsh(['domif-getlink', member, memberMac(member)]).stdout, /\bup\b/, member);
      t.regex(virsh(['blkdeviotune', member, 'vdb']).stdout, /^total_iops_sec\s*:\s*0$/m, member);
    }
    const again = deployed(t);
    t.is(again.status, 0);
    t.deepEqual(changed(again), []);
  },
);

/**
 * A member's database changed behind etcd's back: every copy of `from` in etcd-3's bbolt file replaced by `to` (as
 * long). bbolt checks no page but its meta pages, so etcd runs on it. Stopped (`stopped`): etcd is stopped first and
 * left stopped. Running: written in place under the running etcd, which reads its file through a shared mapping and
 * so serves the edited bytes at once, with no restart (its own check at start-up would refuse them).
 */
function editDatabaseBytes(t: ExecutionContext, from: string, to: string, how: 'stopped' | 'running'): void {
  const edit = `import mmap; f = open('/var/lib/etcd/member/snap/db', 'r+b'); m = mmap.mmap(f.fileno(), 0); i = m.find(b'${from}'); n = 0
while i >= 0: m[i:i + ${from.length}] = b'${to}'; n += 1; i = m.find(b'${from}', i + 1)
m.flush(); print(n)`;
  const swap = [...(how === 'stopped' ? ['sudo systemctl stop etcd'] : []), `sudo python3 -c "${edit}"`].join(' && ');
  const swapped = memberSsh('etcd-3', swap);
  t.is(swapped.status, 0, swapped.stderr);
  t.true(Number(swapped.stdout.trim()) >= 1, `copies of the value in etcd-3's database: ${swapped.stdout}`);
}

/** etcd-3 started again (after its data was put back) and answering. */
async function startedAgain(): Promise<void> {
  memberSsh('etcd-3', 'sudo systemctl reset-failed etcd; sudo systemctl start etcd');
  const deadline = Date.now() + 120_000;
  while (etcdctl([endpoint('etcd-3')], rootIdentity, ['endpoint', 'health']).status !== 0) {
    if (Date.now() > deadline) throw new Error('etcd-3 not healthy 120 s after its data was put back');
    await new Promise((resolve) => setTimeout(resolve, 2_000));
  }
}

const MISMATCH_KEY = 'etcd-kvm/consistency/mismatch';
const mismatchRecord = () => etcdctl([endpoint('etcd-1')], rootIdentity, ['get', MISMATCH_KEY, '--print-value-only']).stdout.trim();

scenario(
  "a member's data changed behind etcd's back: etcd's own check refuses to start it; changed under it while it runs, the run that changes it compares the members and fails naming etcd-3's hash; the next run changes nothing; status names it; verify fails hashkv alone; put back, --accept-mismatch compares again and clears the record",
  async (t) => {
    const original = `e2e-verify-${'A'.repeat(32)}`;
    const edited = `e2e-verify-${'B'.repeat(32)}`;
    t.is(etcdctl(ALL, rootIdentity, ['put', 'e2e/verify/marker', original]).status, 0);
    // Applied on etcd-3 (its own store answers a serializable read) before its file is edited.
    const deadline = Date.now() + 60_000;
    while (
      etcdctl([endpoint('etcd-3')], rootIdentity, ['get', '--consistency=s', '--print-value-only', 'e2e/verify/marker']).stdout.trim() !==
      original
    ) {
      if (Date.now() > deadline) throw new Error('etcd-3 did not apply the marker');
      await new Promise((resolve) => setTimeout(resolve, 1_000));
    }
    // Whatever fails below, the record does not outlive this scenario: the chain's next runs could change nothing.
    t.teardown(() => {
      if (mismatchRecord() !== '') etcdctl(ALL, rootIdentity, ['del', MISMATCH_KEY]);
    });

    // etcd's own initial check (etcd.corruption_checks.initial, on by default): edited while stopped, etcd-3 will not
    // start on data its peers' hashes disagree with; the deploy that starts it fails there, and compares nothing after.
    // etcd asks its peers only once it has a snapshot that names them: lab.yaml's snapshot_count is 100, and this many
    // entries more make sure etcd-3 has taken one, however few the chain's runs wrote before.
    t.is(etcdctlPuts([endpoint('etcd-1')], rootIdentity, 'e2e/verify/entries/', 110).status, 0);
    const snapshots = memberSsh('etcd-3', 'sudo ls /var/lib/etcd/member/snap');
    t.regex(snapshots.stdout, /\.snap$/m, `etcd-3 has a snapshot: ${snapshots.stdout}`);
    const since = memberSsh('etcd-3', 'date -u "+%Y-%m-%d %H:%M:%S"').stdout.trim();
    editDatabaseBytes(t, original, edited, 'stopped');
    const refusedStart = deployed(t);
    t.is(refusedStart.status, 1, endOf(refusedStart));
    t.regex(refusedStart.output, /\[etcd-3\] guest: .*etcd/, endOf(refusedStart));
    t.notRegex(refusedStart.output, /consistency \[FAILED/);
    // Read as an operator would, with the tool's own logs command (no ssh_config, keys read in memory).
    const journal = etcdKvm('logs', ['-i', 'inventories/lab.yaml', 'etcd-3', '--since', since, '-n', '2000']);
    t.is(journal.status, 0, journal.stderr);
    t.regex(journal.stdout, /found data inconsistency with peers/);
    t.is(mismatchRecord(), '');
    editDatabaseBytes(t, edited, original, 'stopped');
    await startedAgain();

    // The tool's own comparison: the data changed under the running etcd-3, and a run that changes etcd-3 (its seed
    // ISO deleted and made again) compares the members after it.
    editDatabaseBytes(t, original, edited, 'running');
    let isoDeleted = false;
    try {
      t.is(
        etcdctl([endpoint('etcd-3')], rootIdentity, ['get', '--consistency=s', '--print-value-only', 'e2e/verify/marker']).stdout.trim(),
        edited,
      );
      t.is(virsh(['vol-delete', '--pool', 'etcd-lab', 'etcd-3-cloud-init.iso']).status, 0);
      isoDeleted = true;
      const compared = deployed(t);
      t.is(compared.status, 1, endOf(compared));
      t.true(
        changed(compared).some((line) => line.startsWith('etcd-3/')),
        changed(compared).join(' | '),
      );
      const found =
        /consistency \[FAILED: after this run's changes, the members' data differ at revision (\d+): etcd-1 (\d+) \([^)]*\), etcd-2 (\d+) \([^)]*\), etcd-3 (\d+) /.exec(
          compared.output,
        );
      t.truthy(found, endOf(compared));
      t.is(found?.[2], found?.[3], 'etcd-1 and etcd-2 agree');
      t.not(found?.[4], found?.[2], "etcd-3's hash differs");
      t.regex(mismatchRecord(), /"detail":"the members' data differ at revision \d+/);

      // The next run's first change (a deleted seed) is refused, saying what was found and how to go on.
      t.is(virsh(['vol-delete', '--pool', 'etcd-lab', 'etcd-3-cloud-init.iso']).status, 0);
      const refused = deployed(t);
      t.is(refused.status, 1, endOf(refused));
      t.regex(
        refused.output,
        /the members' data differed after a run at \S+ \(the members' data differ at revision \d+.*\); this run changes nothing\./,
      );
      t.regex(refused.output, /--accept-mismatch/);
      t.not(virsh(['vol-info', '--pool', 'etcd-lab', 'etcd-3-cloud-init.iso']).status, 0, 'the seed is still missing');
      // status names the record as a problem, and points to verify.
      const seen = status(t);
      t.is(seen.status, 1);
      t.true(
        seen.report.problems.some((problem) =>
          /^the members' data differed after a run at \S+ \(the members' data differ at revision/.test(problem),
        ),
        seen.report.problems.join(' | '),
      );
      t.regex(seen.table, /^hint: etcd-kvm verify -i INVENTORY/m);

      const caught = etcdKvm('verify', ['-i', 'inventories/lab.yaml']);
      t.log(caught.stdout);
      t.is(caught.status, 1, caught.stdout + caught.stderr);
      const differ =
        /^FAIL hashkv: the members' data differ at revision \d+: etcd-1 (\d+) \([^)]*\), etcd-2 (\d+) \([^)]*\), etcd-3 (\d+) /m.exec(
          caught.stdout,
        );
      t.truthy(differ, caught.stdout);
      t.is(differ?.[1], differ?.[2], 'etcd-1 and etcd-2 agree');
      t.not(differ?.[3], differ?.[1], "etcd-3's hash differs");
      // Only the data is wrong: every other check still passes.
      t.deepEqual(
        caught.stdout
          .split('\n')
          .filter((line) => line.startsWith('FAIL'))
          .map((line) => line.split(':')[0]),
        ['FAIL hashkv'],
      );
    } finally {
      editDatabaseBytes(t, edited, original, 'running');
    }
    // Mended by hand: the operator says so; the run repairs the seed, compares, and removes the record.
    const accepted = deployed(t, ['--accept-mismatch']);
    t.is(accepted.status, 0, endOf(accepted));
    t.true(isoDeleted);
    t.regex(
      accepted.output,
      /consistency: the members agree after changes on etcd-3: equal on 3 voting members at revision \d+.*; the mismatch recorded at \S+ is removed/,
    );
    t.is(mismatchRecord(), '');
    const repaired = etcdKvm('verify', ['-i', 'inventories/lab.yaml']);
    t.is(repaired.status, 0, repaired.stdout + repaired.stderr);
    t.is(etcdctl(ALL, rootIdentity, ['del', 'e2e/verify/marker']).status, 0);
    t.is(etcdctl(ALL, rootIdentity, ['del', '--prefix', 'e2e/verify/entries/']).status, 0);
  },
);

scenario('drift: a destroyed member VM is started again and the data survives', (t) => {
  t.is(virsh(['destroy', 'etcd-2']).status, 0);
  // Seen by status first: degraded, naming the member and why, exit 1.
  const down = status(t);
  t.is(down.status, 1);
  t.false(down.report.healthy);
  t.like(
    down.report.members.find((m) => m.name === 'etcd-2'),
    { vm: 'shut off', role: 'unknown' },
  );
  t.true(
    down.report.problems.some((p) => p.startsWith('etcd-2: etcd does not answer')),
    down.report.problems.join(' | '),
  );
  t.regex(down.table, /\ncluster: DEGRADED \(\d+ problems?\), 2 of 3 members voting/);
  const result = deployed(t);
  t.is(result.status, 0, endOf(result));
  t.deepEqual(changed(result), ['etcd-2/domain: changed start etcd-2 (was shut off)']);
  t.regex(virsh(['domstate', 'etcd-2']).stdout, /running/);
  t.is(etcdctl(ALL, rootIdentity, ['endpoint', 'health']).status, 0);
  t.is(etcdctl([endpoint('etcd-2')], rootIdentity, ['get', '--print-value-only', 'e2e/greeting']).stdout.trim(), 'hello from etcd-1');
});

scenario('drift: a deleted cloud-init ISO is recreated and nothing else changes', (t) => {
  t.is(virsh(['vol-delete', '--pool', 'etcd-lab', 'etcd-3-cloud-init.iso']).status, 0);
  const result = deployed(t);
  t.is(result.status, 0, endOf(result));
  // The size the tool reports is the size libvirt has for the new volume, asked independently.
  const info = virsh(['vol-info', '--bytes', '--pool', 'etcd-lab', 'etcd-3-cloud-init.iso']);
  t.is(info.status, 0);
  const bytes = info.stdout.match(/^Capacity:\s+(\d+) bytes$/m)?.[1];
  t.truthy(bytes);
  t.deepEqual(changed(result), [`etcd-3/cloud-init: changed upload cloud-init ISO etcd-lab/etcd-3-cloud-init.iso (${bytes} bytes)`]);
  t.regex(virsh(['domstate', 'etcd-3']).stdout, /running/);
});

const FORCE_DROP_IN = '/run/systemd/system/etcd.service.d/etcd-kvm-force-new-cluster.conf';

scenario(
  "a recovery's --force-new-cluster drop-in left behind: removed and systemd reloaded, etcd not restarted; the next run changes nothing",
  (t) => {
    // Whatever fails below, no drop-in outlives this scenario (the chain's later restarts read it).
    t.teardown(() => memberSsh('etcd-2', `sudo rm -f ${FORCE_DROP_IN}; sudo systemctl daemon-reload`));
    // Its path as a recover killed after the forced start leaves it; its content sets no flag, so that the chain goes on
    // whatever happens here: the tool goes by the path.
    const left = memberSsh(
      'etcd-2',
      `sudo mkdir -p ${FORCE_DROP_IN.replace(/\/[^/]+$/, '')} && printf '[Service]\\n# left behind\\n' | sudo tee ${FORCE_DROP_IN} >/dev/null && sudo systemctl daemon-reload && systemctl show -p MainPID --value etcd`,
    );
    t.is(left.status, 0, left.stderr);
    // status looks in the guests too: the drop-in is named as a problem of etcd-2's, and only that.
    const before = etcdKvm('status', ['-i', 'inventories/lab.yaml']);
    t.is(before.status, 1, before.stdout + before.stderr);
    t.deepEqual(
      before.stdout.split('\n').filter((line) => line.startsWith('problem: ')),
      [`problem: etcd-2: ${FORCE_NEW_CLUSTER_LEFT}`],
    );
    const result = deployed(t);
    t.is(result.status, 0, endOf(result));
    t.deepEqual(changed(result), [
      `etcd-2/guest: changed remove ${FORCE_DROP_IN} (a recovery's --force-new-cluster, left by a recover that did not finish: the next start of etcd would found a new cluster of this member alone); reload systemd (unit files changed)`,
    ]);
    // Looked at as an operator would, with the tool's own ssh command (one command, its exit status).
    const after = etcdKvm('ssh', [
      '-i',
      'inventories/lab.yaml',
      'etcd-2',
      '--',
      'sh',
      '-c',
      `test -e ${FORCE_DROP_IN}; echo $?; systemctl show -p DropInPaths --value etcd; systemctl show -p MainPID --value etcd`,
    ]);
    t.is(after.status, 0, after.stderr);
    const [exists, dropIns, pid] = after.stdout.trim().split('\n');
    t.is(exists, '1', 'the drop-in is gone');
    t.false((dropIns ?? '').includes('force-new-cluster'), `systemd forgot it: ${dropIns}`);
    t.is(pid, left.stdout.trim(), 'etcd kept running, not restarted');
    t.deepEqual(changed(deployed(t)), []);
    const healthy = etcdKvm('status', ['-i', 'inventories/lab.yaml']);
    t.is(healthy.status, 0, healthy.stdout + healthy.stderr);
  },
);

// Ownership: a run touches only domains marked with its cluster's ID.

const OWNER_NS = 'urn:etcd-kvm:owner:1';
const markOf = (member: string) => virsh(['metadata', '--domain', member, '--uri', OWNER_NS]).stdout.trim();
/** QEMU's domain ID: a new one means the VM was started again. */
const domainId = (member: string) => virsh(['domid', member]).stdout.trim();

scenario(
  "a second cluster whose members share etcd-1..3's names is refused on every member; the first cluster's domains, seeds and data are untouched",
  (t) => {
    const intruder = variant('intruder', (yaml) =>
      yaml.replace(/^ {2}name: lab$/m, '  name: intruder').replace('initial_token: etcd-kvm-lab', 'initial_token: intruder'),
    );
    const looked = () =>
      MEMBERS.map((member) => ({
        member,
        xml: virsh(['dumpxml', '--inactive', member]).stdout,
        id: domainId(member),
        seed: run('sh', [
          '-c',
          'virsh -q -c qemu:///system vol-download --pool etcd-lab "$1" /dev/stdout | sha256sum',
          'sh',
          `${member}-cloud-init.iso`,
        ]).stdout,
        volumes: virsh(['vol-list', '--pool', 'etcd-lab']).stdout,
      }));
    try {
      const before = looked();
      for (const { member, xml } of before)
        t.regex(xml, /<etcd-kvm:owner xmlns:etcd-kvm="urn:etcd-kvm:owner:1" cluster="lab" id="[0-9a-f-]{36}"\/>/, member);
      const result = deployed(t, ['-i', intruder], join(mkdtempSync(join(tmpdir(), 'etcd-kvm-e2e-')), 'report.json'));
      t.is(result.status, 1);
      for (const member of MEMBERS) {
        t.regex(
          result.output,
          new RegExp(
            `${member}:[\\s\\S]*owner: FAILED: refusing to touch ${member}: domain ${member} belongs to cluster lab \\(id [0-9a-f-]{36}\\), not to this one \\(intruder`,
          ),
        );
        // Nothing on the hypervisor changed for it: every libvirt step after the owner's skipped.
        t.deepEqual(
          result.report.results.filter((r) => r.host === member && r.status === 'changed').map((r) => r.step),
          ['render'],
          member,
        );
      }
      t.deepEqual(looked(), before);
      t.is(etcdctl(ALL, rootIdentity, ['get', '--print-value-only', 'e2e/greeting']).stdout.trim(), 'hello from etcd-1');
    } finally {
      rmSync(intruder, { force: true });
      rmSync('inventories/.etcd-kvm/intruder', { recursive: true, force: true });
    }
  },
);

scenario(
  'a domain without the mark is refused until --adopt names it; a cluster deployed before marks gets them; marking restarts nothing',
  (t) => {
    const ids = Object.fromEntries(MEMBERS.map((member) => [member, domainId(member)]));
    // One mark gone (as if defined by hand): refused on that member alone, until --adopt.
    t.is(virsh(['metadata', '--domain', 'etcd-2', '--uri', OWNER_NS, '--remove', '--config', '--live']).status, 0);
    const refused = deployed(t);
    t.is(refused.status, 1);
    t.regex(
      refused.output,
      /owner: FAILED: refusing to touch etcd-2: domain etcd-2 exists without this tool's mark \(titled for cluster lab\); nothing of it or its volumes is touched\. If it is this cluster's member, run with --adopt/,
    );
    t.deepEqual(
      refused.report.results.filter((r) => r.status === 'failed').map((r) => `${r.host}/${r.step}`),
      ['etcd-2/owner'],
    );
    const adopted = deployed(t, ['--adopt', 'etcd-2']);
    t.is(adopted.status, 0);
    t.deepEqual(changed(adopted), [
      "etcd-2/owner: changed mark domain etcd-2 as cluster lab's (adopted (--adopt); live and persistent, no restart)",
    ]);
    t.is(markOf('etcd-2'), markOf('etcd-1'));

    // A cluster deployed before domains were marked: no marks, no cluster-id.json, a state directory with its CA.
    for (const member of MEMBERS)
      t.is(virsh(['metadata', '--domain', member, '--uri', OWNER_NS, '--remove', '--config', '--live']).status, 0);
    rmSync(join(LAB_STATE, 'cluster-id.json'));
    const migrated = deployed(t);
    t.is(migrated.status, 0);
    const id = (JSON.parse(readFileSync(join(LAB_STATE, 'cluster-id.json'), 'utf8')) as { id: string }).id;
    for (const member of MEMBERS) {
      t.is(markOf(member), `<owner cluster="lab" id="${id}"/>`);
      t.regex(
        virsh(['dumpxml', '--inactive', member]).stdout,
        new RegExp(`cluster="lab" id="${id}"`),
        `${member}: in its persistent definition too`,
      );
    }
    t.deepEqual(
      changed(migrated).filter((line) => !line.includes('/render:')),
      [
        "localhost/pki: changed create the cluster's ID (cluster-id.json), which marks its domains as its own; domains an earlier version made for this cluster get the mark",
        ...MEMBERS.map(
          (member) =>
            `${member}/owner: changed mark domain ${member} as cluster lab's (made for this cluster before domains were marked; live and persistent, no restart)`,
        ),
        "localhost/adoption: changed stop taking unmarked domains titled for cluster lab as its own (cluster-id.json): every member's domain carries the mark now",
      ],
    );
    t.false((JSON.parse(readFileSync(join(LAB_STATE, 'cluster-id.json'), 'utf8')) as { adoptsUnmarked: boolean }).adoptsUnmarked);
    t.deepEqual(Object.fromEntries(MEMBERS.map((member) => [member, domainId(member)])), ids, 'no VM was started again');
    t.deepEqual(changed(deployed(t)), []);
  },
);

scenario(
  'a member attached by network_id: resolved on the hypervisor to the same network, nothing changes; an unknown UUID fails that member alone',
  (t) => {
    const uuid = virsh(['net-uuid', 'etcd-lab']).stdout.trim();
    t.regex(uuid, /^[0-9a-f-]{36}$/);
    const attach = (id: string) => (yaml: string) =>
      yaml.replace(/(- name: etcd-1\n {4}libvirt_networks:\n {6}- )network_name: etcd-lab/, `$1network_id: ${id}`);
    const byId = variant('network-id', attach(uuid));
    const unknownId = variant('network-id-unknown', attach('1b4e28ba-2fa1-11d2-883f-0016d3cca427'));
    try {
      const resolved = deployed(t, ['-i', byId]);
      t.is(resolved.status, 0);
      t.regex(resolved.output, /networks: 0 changed, 1 ok/);
      t.deepEqual(changed(resolved), [], "the domain renders with the network's name: the same definition");
      const unknown = deployed(t, ['-i', unknownId]);
      t.is(unknown.status, 1);
      t.regex(
        unknown.output,
        /networks: FAILED: network_id 1b4e28ba-2fa1-11d2-883f-0016d3cca427 names no libvirt network on hypervisor lab/,
      );
      t.deepEqual(
        unknown.report.results.filter((r) => r.status === 'failed').map((r) => `${r.host}/${r.step}`),
        ['etcd-1/networks'],
      );
      t.deepEqual(
        unknown.report.results.filter((r) => r.status === 'changed').map((r) => `${r.host}/${r.step}`),
        [],
      );
    } finally {
      rmSync(byId, { force: true });
      rmSync(unknownId, { force: true });
    }
  },
);

// Application users and their client bundles.

/** etcdctl as an operator's client machine runs it: only the bundle's etcdctl.env, inside the lab namespace. */
const asBundle = (dir: string, args: string[]) =>
  inLab('sh', [
    '-c',
    `set -a; . ${dir}/etcdctl.env; set +a; exec etcdctl --dial-timeout=5s --command-timeout=10s "$@"`,
    'etcdctl',
    ...args,
  ]);

scenario(
  'an application user: its bundle writes and reads under /app1/ only, a narrower permission applies on the next run, removed from the inventory it is gone; a user made by hand is left alone',
  (t) => {
    const users = (access: string) => (yaml: string) =>
      `${yaml}\nroles:\n  app1-rw:\n    permissions:\n      - prefix: /app1/\n        access: ${access}\nusers:\n  app1:\n    roles: [app1-rw]\n`;
    const readwrite = variant('users-rw', users('readwrite'));
    const readOnly = variant('users-r', users('read'));
    const bundle = mkdtempSync(join(tmpdir(), 'etcd-kvm-e2e-bundle-'));
    try {
      t.is(etcdctl(ALL, rootIdentity, ['user', 'add', 'handmade:handmade-pw']).status, 0);
      const created = deployed(t, ['-i', readwrite]);
      t.is(created.status, 0);
      t.deepEqual(
        created.report.results.filter((r) => r.step === 'users').flatMap((r) => r.changes.map((c) => c.summary)),
        [
          'record the users and roles the tool manages in etcd-kvm/managed-access and the state directory (managed-access.json)',
          'create role app1-rw',
          'grant readwrite prefix "/app1/" to role app1-rw',
          'create user app1 (no password: its client certificate CN=app1 logs it in)',
          'grant role app1-rw to user app1',
        ],
      );
      const written = etcdKvm('client', ['-i', readwrite, '--user', 'app1', '--out', bundle]);
      t.is(written.status, 0, written.stderr);
      t.is(statSync(join(bundle, 'app1.key')).mode & 0o777, 0o600);

      t.is(asBundle(bundle, ['put', '/app1/greeting', 'hello app1']).status, 0);
      t.is(asBundle(bundle, ['get', '--print-value-only', '/app1/greeting']).stdout.trim(), 'hello app1');
      t.regex(asBundle(bundle, ['put', '/app2/greeting', 'no']).stderr, /permission denied/);
      t.regex(asBundle(bundle, ['get', 'e2e/greeting']).stderr, /permission denied/);
      t.regex(asBundle(bundle, ['user', 'list']).stderr, /permission denied/);
      t.deepEqual(changed(deployed(t, ['-i', readwrite])), []);

      const narrowed = deployed(t, ['-i', readOnly]);
      t.is(narrowed.status, 0);
      t.deepEqual(changed(narrowed), ['etcd-1/users: changed grant read prefix "/app1/" to role app1-rw']);
      t.is(asBundle(bundle, ['get', '--print-value-only', '/app1/greeting']).stdout.trim(), 'hello app1');
      t.regex(asBundle(bundle, ['put', '/app1/greeting', 'changed']).stderr, /permission denied/);

      // The lab's own inventory has no users: app1 and its role leave etcd, its certificate the state directory.
      const removed = deployed(t);
      t.is(removed.status, 0);
      t.deepEqual(changed(removed), [
        'localhost/pki: changed delete certificate client/app1 and its key (no such user in the inventory)',
        'etcd-1/users: changed delete user app1 (no longer in the inventory); delete role app1-rw (no longer in the inventory); forget user app1, role app1-rw in etcd-kvm/managed-access and the state directory (managed-access.json)',
      ]);
      t.deepEqual(etcdctl(ALL, rootIdentity, ['user', 'list']).stdout.trim().split('\n').sort(), ['handmade', 'root']);
      t.deepEqual(etcdctl(ALL, rootIdentity, ['role', 'list']).stdout.trim().split('\n'), ['root']);
      t.false(existsSync(join(LAB_STATE, 'pki/clients/app1.key')));
      t.not(asBundle(bundle, ['get', '/app1/greeting']).status, 0, 'the removed user is refused');
    } finally {
      rmSync(readwrite, { force: true });
      rmSync(readOnly, { force: true });
      rmSync(bundle, { recursive: true, force: true });
      etcdctl(ALL, rootIdentity, ['user', 'delete', 'handmade']);
      etcdctl(ALL, rootIdentity, ['del', '--prefix', '/app1/']);
    }
  },
);

scenario(
  'encrypted state on the lab: deploys work with the passphrase and change nothing, no key is in the clear, a wrong passphrase is exit 2 with nothing changed',
  (t) => {
    const env = (passphrase: string) => ({ ...process.env, ETCD_KVM_PASSPHRASE: passphrase });
    const state = (flag: string) =>
      etcdKvm('state', ['-i', 'inventories/lab.yaml', flag], {
        env: env('lab-e2e-passphrase'),
      });
    const files = () => {
      const all = new Map<string, string>();
      const walk = (sub: string) => {
        for (const entry of readdirSync(join(LAB_STATE, sub), { withFileTypes: true })) {
          if (entry.isDirectory()) walk(join(sub, entry.name));
          else if (entry.name.endsWith('.key') || entry.name.endsWith('.crt'))
            all.set(join(sub, entry.name), readFileSync(join(LAB_STATE, sub, entry.name), 'utf8'));
        }
      };
      walk('');
      return all;
    };
    const plain = files();
    const encrypted = state('--encrypt');
    t.is(encrypted.status, 0, encrypted.stderr);
    try {
      t.is(run('grep', ['-rl', 'PRIVATE KEY', LAB_STATE]).stdout, '');
      for (const passphraseRun of [1, 2]) {
        const result = runWith(t, env('lab-e2e-passphrase'));
        t.is(result.status, 0, `run ${passphraseRun}`);
        t.deepEqual(changed(result), [], `run ${passphraseRun}`);
      }
      const sealed = files();
      const wrong = runWith(t, env('wrong-passphrase'));
      t.is(wrong.status, 2);
      t.regex(wrong.output, /wrong passphrase for the state directory/);
      t.deepEqual(files(), sealed);
    } finally {
      const decrypted = state('--decrypt');
      t.is(decrypted.status, 0, decrypted.stderr);
    }
    t.deepEqual(files(), plain, 'decrypted, every key and certificate is as before');
  },
);

/** A deploy of the lab inventory with this environment (the passphrase's), its output kept for the secrets check. */
function runWith(t: { log: (...values: unknown[]) => void }, env: NodeJS.ProcessEnv): DeployRun {
  const reportPath = join(LAB_STATE, 'e2e-report-encrypted.json');
  rmSync(reportPath, { force: true });
  const started = Date.now();
  const completed = run(process.execPath, [...installed('deploy'), '-i', 'inventories/lab.yaml', '--json', reportPath], {
    env,
    timeoutMs: 20 * 60_000,
  });
  const output = `${completed.stdout}\n${completed.stderr}`;
  outputs.push(output);
  t.log(`deploy (encrypted state): exit ${completed.status} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  const report = existsSync(reportPath) ? (JSON.parse(readFileSync(reportPath, 'utf8')) as DeployRun['report']) : { results: [] };
  return { ...completed, output, report };
}

scenario(
  'the hypervisor reached only through a bastion (a third sshd, in another namespace): a run converges through it and changes nothing; a bastion that does not answer fails every member, naming it',
  (t) => {
    // 192.168.160.1 is the hypervisor's address on the macvtap segment: the root namespace has no route
    // there, the bastion (in the segment's client namespace, exposed on 127.0.0.1:2223) has.
    const throughBastion = (port: number) => (yaml: string) =>
      yaml.replace('    address: 127.0.0.1\n    port: 2222\n', '    address: 192.168.160.1\n    port: 22\n    jump: [lab-edge]\n') +
      `\nbastions:\n  lab-edge:\n    address: 127.0.0.1\n    port: ${port}\n    user: root\n    private_key: ../.etcd-kvm/lab/hypervisor/client_key\n    known_hosts: ../.etcd-kvm/lab/hypervisor/known_hosts\n`;
    const viaBastion = variant('bastion', throughBastion(2223));
    const bastionDown = variant('bastion-down', throughBastion(1));
    try {
      const converged = deployed(t, ['-i', viaBastion]);
      t.is(converged.status, 0);
      t.deepEqual(changed(converged), []);
      t.true(
        converged.report.results.some((r) => r.step === 'guest' && r.status === 'ok'),
        'the members were reached (SSH and etcd) through the chain',
      );
      const refused = deployed(t, ['-i', bastionDown]);
      t.is(refused.status, 1);
      t.regex(refused.output, /bastion lab-edge \(root@127\.0\.0\.1:1\): cannot connect/);
      t.deepEqual(
        refused.report.results
          .filter((r) => r.status === 'failed')
          .map((r) => `${r.host}/${r.step}`)
          .sort(),
        MEMBERS.map((member) => `${member}/owner`),
      );
    } finally {
      rmSync(viaBastion, { force: true });
      rmSync(bastionDown, { force: true });
      // The run that reached nothing took the cluster for unformed and recorded `new` renders (nothing
      // remote changed): the lab's own run records them as they are again, for the scenarios after this one.
      t.is(deployed(t).status, 0);
    }
  },
);

scenario(
  'the hypervisor named by a Host alias in an ssh_config given to the run, its ProxyJump through the bastion: the run converges and changes nothing',
  (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-e2e-sshcfg-'));
    const client = resolve('.etcd-kvm/lab/hypervisor');
    writeFileSync(
      join(dir, 'config'),
      [
        'Host lab-hv-alias',
        '  HostName 192.168.160.1',
        '  User root',
        `  IdentityFile ${client}/client_key`,
        `  UserKnownHostsFile ${client}/known_hosts`,
        '  ProxyJump lab-edge-alias',
        'Host lab-edge-alias',
        '  HostName 127.0.0.1',
        '  Port 2223',
        '  User root',
        `  IdentityFile ${client}/client_key`,
        `  UserKnownHostsFile ${client}/known_hosts`,
        '',
      ].join('\n'),
    );
    const login =
      '    address: 127.0.0.1\n    port: 2222\n    user: root\n    private_key: ../.etcd-kvm/lab/hypervisor/client_key\n    known_hosts: ../.etcd-kvm/lab/hypervisor/known_hosts\n';
    const aliased = variant('ssh-config', (yaml) => {
      if (!yaml.includes(login)) throw new Error('the lab inventory no longer has the expected hypervisor login lines');
      return `${yaml.replace(login, '    address: lab-hv-alias\n')}\nssh_config: ${join(dir, 'config')}\n`;
    });
    try {
      const converged = deployed(t, ['-i', aliased]);
      t.is(converged.status, 0);
      t.deepEqual(changed(converged), []);
    } finally {
      rmSync(aliased, { force: true });
      rmSync(dir, { recursive: true, force: true });
    }
  },
);

// Guest convergence: what runs inside the members, converged on every run, restarts rolled.

/** An inventory beside the lab's (its relative paths still resolve), removed after the scenario. */
function variant(name: string, edit: (yaml: string) => string): string {
  const path = `inventories/.e2e-${name}.yaml`;
  const text = edit(readFileSync('inventories/lab.yaml', 'utf8'));
  if (text === readFileSync('inventories/lab.yaml', 'utf8')) throw new Error(`variant ${name} changes nothing`);
  writeFileSync(path, text);
  return path;
}

/** The value etcd's running process has, read from its environment (not from the file). */
const runningValue = (member: keyof typeof MEMBER_IPS, variable: string) =>
  memberSsh(member, `sudo cat /proc/$(pgrep -x etcd)/environ | tr '\\0' '\\n' | sed -n 's/^${variable}=//p'`).stdout.trim();

function leaderName(): string {
  const status = JSON.parse(etcdctl(ALL, rootIdentity, ['endpoint', 'status', '-w', 'json']).stdout) as {
    Endpoint: string;
    Status: { header: { member_id: number }; leader: number };
  }[];
  const leader = status.find((s) => s.Status.header.member_id === s.Status.leader);
  const ip = leader?.Endpoint.match(/\/\/([\d.]+):/)?.[1];
  const name = MEMBERS.find((m) => MEMBER_IPS[m] === ip);
  if (!name) throw new Error(`no leader in ${JSON.stringify(status)}`);
  return name;
}

/** The guest step's roll, in order: each member with its wave. */
const guestRoll = (result: DeployRun) =>
  (result.report.results as { step: string; host: string; status: string; rollPosition?: number }[])
    .filter((r) => r.step === 'guest' && r.rollPosition)
    .sort((a, b) => a.rollPosition! - b.rollPosition!)
    .map((r) => r.host);

/** Every file under the state directory with its content digest and modification time. */
function stateSnapshot(dir = LAB_STATE): string[] {
  const entries: string[] = [];
  const walk = (path: string) => {
    for (const name of readdirSync(path).sort()) {
      const full = join(path, name);
      const stat = statSync(full);
      if (stat.isDirectory()) walk(full);
      else entries.push(`${full} ${stat.mtimeMs} ${createHash('sha256').update(readFileSync(full)).digest('hex')}`);
    }
  };
  walk(dir);
  return entries;
}

scenario('a dry-run that plans changes in every step writes nothing anywhere in the state directory', (t) => {
  const changedSettings = variant('dry-run', (yaml) =>
    yaml.replace('space_quota: 536870912', 'space_quota: 536870912\n  auto_compaction_retention: "778"'),
  );
  try {
    const before = stateSnapshot();
    // The report goes elsewhere: the state directory is what is watched.
    const dry = deployed(
      t,
      ['-i', changedSettings, '--dry-run', '--detailed-exitcode'],
      join(mkdtempSync(join(tmpdir(), 'etcd-kvm-e2e-')), 'report.json'),
    );
    // --detailed-exitcode: changes pending are 3, never 0 (nothing to do) nor 2 (bad input).
    t.is(dry.status, 3);
    t.regex(changed(dry).join('\n'), /cloud-init: changed rewrite cloud-init ISO etcd-lab\/etcd-\d-cloud-init\.iso in place/);
    t.regex(changed(dry).join('\n'), /guest: changed update \/etc\/etcd\/etcd\.env; restart etcd\.service/);
    t.deepEqual(stateSnapshot(), before);
  } finally {
    rmSync(changedSettings, { force: true });
  }
});

scenario('two deploys started together on one state directory: one runs, the other exits 1 at once naming the holder', async (t) => {
  const lockFile = join(LAB_STATE, 'run.lock');
  const first = spawn(process.execPath, ['--import', 'tsx', 'tasks/deploy.ts', '-i', 'inventories/lab.yaml'], { stdio: 'ignore' });
  const firstDone = new Promise<number | null>((resolve) => first.once('exit', resolve));
  for (let waited = 0; !existsSync(lockFile) && waited < 30_000; waited += 100) await new Promise((resolve) => setTimeout(resolve, 100));
  // Held still while the second starts: a run with nothing to change ends in ~2 s, less than the
  // second one's start-up, which made "together" a race. Stopped, it is still alive and holds the lock.
  first.kill('SIGSTOP');
  try {
    t.true(existsSync(lockFile), 'the first run took the lock');
    const started = Date.now();
    const second = deploy([], join(mkdtempSync(join(tmpdir(), 'etcd-kvm-e2e-')), 'report.json'));
    t.is(second.status, 1);
    t.regex(second.stderr, new RegExp(`another run holds .*run\\.lock: PID ${first.pid} on `));
    t.true(Date.now() - started < 15_000, `the second run gave up at once (${Date.now() - started} ms)`);
  } finally {
    first.kill('SIGCONT');
  }
  t.is(await firstDone, 0);
  t.false(existsSync(lockFile), 'released at the end');
});

scenario(
  "two operators' clones of the state directory deploy one change at once: the cluster's lock in etcd lets exactly one change anything, the other is refused naming it before its first change",
  async (t) => {
    // Each clone: an inventory in its own directory (the hypervisor key paths resolve to the lab's), its own copy of the state directory.
    const clones = ['a', 'b'].map((name) => {
      const dir = join('inventories', `.e2e-clone-${name}`);
      rmSync(dir, { recursive: true, force: true });
      cpSync(LAB_STATE, join(dir, '.etcd-kvm', 'lab'), { recursive: true });
      rmSync(join(dir, '.etcd-kvm', 'lab', 'run.lock'), { force: true });
      // The hypervisor's client key and known_hosts are the lab's, named by absolute path from the clone's directory.
      const yaml = readFileSync(LAB_INVENTORY, 'utf8')
        .replace('      threshold: 1\n', '      threshold: 2\n')
        .replaceAll('../.etcd-kvm/lab/hypervisor/', `${resolve('.etcd-kvm/lab/hypervisor')}/`);
      writeFileSync(join(dir, 'lab.yaml'), yaml);
      return { dir, inventory: join(dir, 'lab.yaml'), state: join(dir, '.etcd-kvm', 'lab') };
    });
    try {
      // What the guests' files were read as (guest-files.json) is a cache any run may keep, a refused one too.
      const snapshot = (state: string) => stateSnapshot(state).filter((entry) => !entry.includes('guest-files.json'));
      const before = clones.map((clone) => snapshot(clone.state));
      const runs = await Promise.all(clones.map((clone) => deployInBackground(['-i', clone.inventory])));
      for (const [i, run] of runs.entries()) t.log(`clone ${i}: exit ${run.status}\n${run.output.trim().split('\n').slice(-6).join('\n')}`);
      const refused = runs.filter(
        (run) =>
          run.status === 1 &&
          // Refused when it takes the lock before its first change: held by the other, or taken (and let go) by it since this run looked.
          /another run (holds the cluster's run lock in etcd \(etcd-kvm\/run-lock\/lab\)|took the cluster's run lock in etcd \(etcd-kvm\/run-lock\/lab\) after this run read the cluster): deploy .* by PID \d+ on \S+ since /.test(
            run.output,
          ),
      );
      const ran = runs.filter((run) => run.status === 0);
      t.is(refused.length, 1, 'exactly one run is refused');
      t.is(ran.length, 1, 'exactly one run goes on');
      const loser = runs.indexOf(refused[0]!);
      t.deepEqual(snapshot(clones[loser]!.state), before[loser], "the refused run's state directory is untouched");
      t.notRegex(refused[0]!.output, /changed=[1-9]/, 'the refused run changed nothing');
      t.regex(ran[0]!.output, /restart chrony/);
      for (const member of MEMBERS) t.is(memberSsh(member, 'grep -c "^makestep 2 3$" /etc/chrony/chrony.conf').stdout.trim(), '1', member);
      t.is(
        etcdctl(ALL, rootIdentity, ['get', '--prefix', '--keys-only', 'etcd-kvm/run-lock/']).stdout.trim(),
        '',
        'the lock is released with the run',
      );
    } finally {
      for (const clone of clones) rmSync(clone.dir, { recursive: true, force: true });
    }
    // Back to the lab's own settings (the lab's state directory did not see the clone's run).
    t.is(deployed(t).status, 0);
    t.deepEqual(changed(deployed(t)), []);
  },
);

scenario('a changed guest setting reaches every running etcd in one run, rolled followers first, never below quorum', (t) => {
  const retention = variant('retention', (yaml) =>
    yaml.replace('space_quota: 536870912', 'space_quota: 536870912\n  auto_compaction_retention: "777"'),
  );
  try {
    for (let i = 0; i < 5; i++) t.is(etcdctl(ALL, rootIdentity, ['put', `e2e/roll/${i}`, `value ${i}`]).status, 0);
    const leader = leaderName();
    const sampled = sampledHealth(() => deployed(t, ['-i', retention]));
    const { result } = sampled;
    t.is(result.status, 0, endOf(result));
    quorumKept(t, sampled);
    const order = guestRoll(result);
    t.is(order.length, 3);
    t.is(order.at(-1), leader, `the leader (${leader}) restarts last: ${order.join(', ')}`);
    for (const member of MEMBERS) t.is(runningValue(member, 'ETCD_AUTO_COMPACTION_RETENTION'), '777', member);
    for (let i = 0; i < 5; i++)
      t.is(etcdctl([endpoint('etcd-2')], rootIdentity, ['get', '--print-value-only', `e2e/roll/${i}`]).stdout.trim(), `value ${i}`);
    t.deepEqual(changed(deployed(t, ['-i', retention])), []);
  } finally {
    rmSync(retention, { force: true });
    // Back to the lab's own settings, for the scenarios after this one.
    t.is(deployed(t).status, 0);
  }
  t.is(runningValue('etcd-1', 'ETCD_AUTO_COMPACTION_RETENTION'), '1000');
});

scenario(
  'a cluster deployed before the peer CA moves to it in one run, stage by stage, never below quorum; the next run changes nothing',
  (t) => {
    // As an earlier version left it: the peer port on the cluster CA and the server certificate, no peer CA in the state directory.
    const legacy = [
      "sed -i -e 's#^ETCD_PEER_CERT_FILE=.*#ETCD_PEER_CERT_FILE=/etc/etcd/tls/server.crt#' -e 's#^ETCD_PEER_KEY_FILE=.*#ETCD_PEER_KEY_FILE=/etc/etcd/tls/server.key#'",
      "-e 's#^ETCD_PEER_TRUSTED_CA_FILE=.*#ETCD_PEER_TRUSTED_CA_FILE=/etc/etcd/tls/ca.crt#' -e '/^ETCD_PEER_CERT_ALLOWED_CN=/d' /etc/etcd/etcd.env",
      '&& rm -f /etc/etcd/tls/peer-ca.crt /etc/etcd/tls/peer.crt /etc/etcd/tls/peer.key',
    ].join(' ');
    for (const member of MEMBERS) t.is(memberSsh(member, `sudo systemctl stop etcd && sudo sh -c "${legacy}"`).status, 0, member);
    for (const member of MEMBERS) t.is(memberSsh(member, 'sudo systemctl start --no-block etcd').status, 0, member);
    for (const path of ['pki/peer-ca.crt', 'pki/peer-ca.key', 'pki/peers', 'pki/peer-trust.json'])
      rmSync(join(LAB_STATE, path), { recursive: true, force: true });
    let health = etcdctl(ALL, rootIdentity, ['endpoint', 'health']);
    for (let waited = 0; (health.stdout + health.stderr).match(/is healthy/g)?.length !== 3 && waited < 120; waited += 2) {
      spawnSync('sleep', ['2']);
      health = etcdctl(ALL, rootIdentity, ['endpoint', 'health']);
    }
    t.is(runningValue('etcd-2', 'ETCD_PEER_TRUSTED_CA_FILE'), '/etc/etcd/tls/ca.crt', 'the legacy layout runs');
    t.is(
      peerPortAnswer('etcd-2', rootIdentity.cert!, rootIdentity.key!, rootIdentity.caCert).stdout,
      '200',
      "before the move, root's client certificate passes the peer port (the finding)",
    );
    for (let i = 0; i < 5; i++) t.is(etcdctl(ALL, rootIdentity, ['put', `e2e/peer/${i}`, `value ${i}`]).status, 0);
    const dry = deployed(t, ['--dry-run'], join(mkdtempSync(join(tmpdir(), 'etcd-kvm-e2e-')), 'report.json'));
    t.is(dry.status, 0);
    t.regex(
      dry.output,
      /peer trust: members run trust-both after this pass; the run then moves them on to present-peer, then peer-only, each rolled once every member runs the stage before/,
    );

    const sampled = sampledHealth(() => deployed(t));
    const { result } = sampled;
    t.is(result.status, 0, endOf(result));
    quorumKept(t, sampled);
    t.regex(
      result.output,
      /create the peer CA, which signs members' peer certificates only \(members deployed before move to it one stage at a time\)/,
    );
    t.regex(result.output, /peer trust: every member runs the stage before; now present-peer/);
    t.regex(result.output, /peer trust: every member runs the stage before; now peer-only/);
    t.deepEqual(JSON.parse(readFileSync(join(LAB_STATE, 'pki/peer-trust.json'), 'utf8')), { stage: 'peer-only' });
    for (const member of MEMBERS) {
      t.is(runningValue(member, 'ETCD_PEER_TRUSTED_CA_FILE'), '/etc/etcd/tls/peer-ca.crt', member);
      t.is(runningValue(member, 'ETCD_PEER_CERT_ALLOWED_CN'), 'etcd-kvm-peer', member);
      t.is(peerPortAnswer(member, rootIdentity.cert!, rootIdentity.key!).stdout, '000', member);
    }
    for (let i = 0; i < 5; i++)
      t.is(etcdctl([endpoint('etcd-3')], rootIdentity, ['get', '--print-value-only', `e2e/peer/${i}`]).stdout.trim(), `value ${i}`);
    t.deepEqual(changed(deployed(t)), []);
  },
);

scenario(
  'a mistyped volume_pool on two members destroys nothing: those members stop there, saying what libvirt answered; no member is removed or undefined',
  (t) => {
    const typo = variant('pool-typo', (yaml) => yaml.replace(/( {2}- name: etcd-[23]\n)/g, '$1    volume_pool: etcd-lab-typo\n'));
    try {
      const ids = () =>
        etcdctlJson<{ members: { ID: number; name: string; isLearner?: boolean }[] }>(['member', 'list'])
          .members.map((m) => `${m.name}:${m.ID}:${m.isLearner ? 'learner' : 'voting'}`)
          .sort();
      const before = ids();
      const domains = virsh(['list', '--all', '--uuid']).stdout.trim().split('\n').sort();
      const result = deployed(t, ['-i', typo]);
      t.is(result.status, 1);
      t.regex(result.output, /\[etcd-2\] volumes: .*no storage pool with matching name 'etcd-lab-typo'.*check volume_pool/);
      t.regex(result.output, /\[etcd-3\] volumes: .*no storage pool with matching name 'etcd-lab-typo'/);
      t.deepEqual(
        result.report.results.filter((r) => ['replace', 'leave'].includes(r.step)),
        [],
      );
      t.deepEqual(ids(), before, 'the same three voting members');
      t.deepEqual(virsh(['list', '--all', '--uuid']).stdout.trim().split('\n').sort(), domains, 'every domain is still defined');
      for (const member of MEMBERS) t.is(virsh(['domstate', member]).stdout.trim(), 'running', member);
    } finally {
      rmSync(typo, { force: true });
    }
    // The state directory recorded what the mistyped run rendered for etcd-2 and etcd-3; the lab's own inventory renders it back, nothing else.
    t.deepEqual(changed(deployed(t)), ['etcd-2/render: changed update domain.xml', 'etcd-3/render: changed update domain.xml']);
    t.deepEqual(changed(deployed(t)), []);
  },
);

scenario(
  'a reviewed plan: --plan-out writes it and changes nothing; --plan refuses it once the inventory changed or a member drifted, changing nothing, and runs it as planned once they are back',
  (t) => {
    const planned = variant('plan', (yaml) => yaml.replace('threshold: 1', 'threshold: 2'));
    const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-e2e-plan-'));
    const planFile = join(dir, 'plan.json');
    const chronyConf = () => memberSsh('etcd-2', 'grep ^makestep /etc/chrony/chrony.conf').stdout.trim();
    t.teardown(() => {
      memberSsh('etcd-2', 'sudo systemctl start chrony');
      rmSync(planned, { force: true });
      rmSync(dir, { recursive: true, force: true });
    });
    const reviewed = deployed(t, ['-i', planned, '--plan-out', planFile, '--detailed-exitcode']);
    t.is(reviewed.status, 3, endOf(reviewed));
    t.regex(reviewed.output, new RegExp(`plan written to ${planFile}: \\d+ steps to change on 3 hosts; deploy --plan ${planFile} runs it`));
    t.is(statSync(planFile).mode & 0o777, 0o600);
    const plan = JSON.parse(readFileSync(planFile, 'utf8')) as { changes: { host: string; step: string; summaries: string[] }[] };
    t.deepEqual(
      plan.changes.filter((change) => change.step === 'guest').map((change) => change.host),
      ['etcd-1', 'etcd-2', 'etcd-3'],
    );
    t.is(chronyConf(), 'makestep 1 3', 'the plan changed nothing');

    // The inventory edited after the review: refused before any host is asked.
    const edited = readFileSync(planned, 'utf8');
    writeFileSync(planned, edited.replace('threshold: 2', 'threshold: 3'));
    const stale = deployed(t, ['-i', planned, '--plan', planFile]);
    t.is(stale.status, 1, endOf(stale));
    t.regex(stale.output, new RegExp(`refused: the plan ${planFile} is stale: the inventory .*\\.e2e-plan\\.yaml changed since`));
    writeFileSync(planned, edited);

    // A member drifted after the review: a dry-run now plans another change there, and the run is refused.
    t.is(memberSsh('etcd-2', 'sudo systemctl stop chrony').status, 0);
    const moved = deployed(t, ['-i', planned, '--plan', planFile]);
    t.is(moved.status, 1, endOf(moved));
    t.regex(
      moved.output,
      /refused: the cluster moved since the plan .*; nothing was changed:\n {2}etcd-2 guest: the plan holds .*; now it plans .*chrony/,
    );
    t.is(chronyConf(), 'makestep 1 3', 'the refused plan changed nothing');

    t.is(memberSsh('etcd-2', 'sudo systemctl start chrony').status, 0);
    const applied = deployed(t, ['-i', planned, '--plan', planFile]);
    t.is(applied.status, 0, endOf(applied));
    t.regex(applied.output, /the plan holds: \d+ steps to change, as planned; running it/);
    t.is(chronyConf(), 'makestep 2 3');
    t.deepEqual(changed(deployed(t, ['-i', planned])), [], 'the plan brought the cluster to the planned inventory');
    // Back to the lab inventory, for the scenarios after this one.
    t.is(deployed(t).status, 0);
    t.is(chronyConf(), 'makestep 1 3');
  },
);

scenario('drift inside the members is repaired by one run, each with its exact change', (t) => {
  t.is(memberSsh('etcd-1', 'sudo systemctl stop etcd').status, 0);
  t.is(memberSsh('etcd-2', 'echo "# edited by hand" | sudo tee -a /etc/etcd/etcd.env >/dev/null').status, 0);
  t.is(memberSsh('etcd-3', 'sudo chmod 0644 /etc/etcd/tls/server.key && sudo rm /etc/etcd/tls/ca.crt').status, 0);
  const result = deployed(t, ['--diff']);
  t.is(result.status, 0, endOf(result));
  t.deepEqual(changed(result).sort(), [
    'etcd-1/guest: changed start etcd.service (was inactive/dead)',
    'etcd-2/guest: changed update /etc/etcd/etcd.env',
    'etcd-3/guest: changed create /etc/etcd/tls/ca.crt (0644 root:root); fix /etc/etcd/tls/server.key: mode 0644 → 0400; restart etcd.service (one member at a time): /etc/etcd/tls/ca.crt changes',
  ]);
  t.regex(result.output, /-# edited by hand/);
  t.is(memberSsh('etcd-1', 'systemctl is-active etcd').stdout.trim(), 'active');
  t.is(memberSsh('etcd-2', 'grep -c "edited by hand" /etc/etcd/etcd.env').stdout.trim(), '0');
  t.is(
    memberSsh('etcd-3', 'sudo stat -c %a:%U /etc/etcd/tls/server.key && test -s /etc/etcd/tls/ca.crt && echo ca').stdout.trim(),
    '400:etcd\nca',
  );
  const health = etcdctl(ALL, rootIdentity, ['endpoint', 'health']);
  t.is((health.stdout + health.stderr).match(/is healthy/g)?.length, 3);
  t.deepEqual(changed(deployed(t)), []);
});

scenario(
  'every etcd stopped at once (after a power cut): one run starts them again, members stay existing (the VMs the cluster formed on, from formed.json), nothing else changes',
  (t) => {
    const formed = JSON.parse(readFileSync(join(LAB_STATE, 'formed.json'), 'utf8')) as { domains: Record<string, string> };
    t.deepEqual(
      formed.domains,
      Object.fromEntries(MEMBERS.map((member) => [member, virsh(['domuuid', member]).stdout.trim()])),
      'formed.json names the domains the cluster runs on',
    );
    t.is(etcdctl(ALL, rootIdentity, ['put', 'e2e/outage', 'before']).status, 0);
    for (const member of MEMBERS) t.is(memberSsh(member, 'sudo systemctl stop etcd').status, 0);
    const result = deployed(t);
    t.is(result.status, 0, endOf(result));
    // Without the record, is_initializing: true made this run render `new` into every seed and etcd.env, then `existing` again.
    t.regex(
      result.output,
      /cluster: no member answers, but etcd-1, etcd-2, etcd-3 are VMs of the cluster recorded as formed on \d{4}-\d\d-\d\d \(formed\.json\): members stay existing/,
    );
    t.deepEqual(
      changed(result).sort(),
      MEMBERS.map((member) => `${member}/guest: changed start etcd.service (was inactive/dead)`),
    );
    for (const member of MEMBERS)
      t.is(
        memberSsh(member, 'grep ^ETCD_INITIAL_CLUSTER_STATE= /etc/etcd/etcd.env').stdout.trim(),
        'ETCD_INITIAL_CLUSTER_STATE=existing',
        member,
      );
    const health = etcdctl(ALL, rootIdentity, ['endpoint', 'health']);
    t.is((health.stdout + health.stderr).match(/is healthy/g)?.length, 3);
    t.is(etcdctl([endpoint('etcd-3')], rootIdentity, ['get', '--print-value-only', 'e2e/outage']).stdout.trim(), 'before');
    t.deepEqual(changed(deployed(t)), []);
  },
);

scenario('--renew-certs: every member serves a new certificate without losing quorum; the new root certificate works', (t) => {
  const served = () =>
    Object.fromEntries(
      MEMBERS.map((member) => {
        const handshake = inLab('sh', [
          '-c',
          `echo | openssl s_client -connect ${MEMBER_IPS[member]}:2379 -CAfile "$1" -cert "$2" -key "$3" 2>/dev/null | openssl x509 -noout -serial`,
          'sh',
          rootIdentity.caCert,
          rootIdentity.cert!,
          rootIdentity.key!,
        ]);
        return [member, handshake.stdout.trim()];
      }),
    );
  const before = served();
  for (const serial of Object.values(before)) t.regex(serial, /^serial=[0-9A-F]+$/);
  const rootBefore = readFileSync(rootIdentity.cert!, 'utf8');
  t.is(etcdctl([endpoint('etcd-1')], rootIdentity, ['put', 'e2e/renewal', 'written before the renewal']).status, 0);
  const sampled = sampledHealth(() => deployed(t, ['--renew-certs']));
  const { result } = sampled;
  t.is(result.status, 0, endOf(result));
  quorumKept(t, sampled);
  t.regex(changed(result).join('\n'), /localhost\/pki: changed issue certificate member\/etcd-1 \(renewal asked for/);
  const after = served();
  for (const member of MEMBERS) {
    t.not(after[member], before[member], member);
    t.is(
      after[member],
      run('openssl', ['x509', '-noout', '-serial', '-in', join(LAB_STATE, `pki/members/${member}.crt`)]).stdout.trim(),
      member,
    );
  }
  t.not(readFileSync(rootIdentity.cert!, 'utf8'), rootBefore);
  t.is(etcdctl(ALL, rootIdentity, ['get', '--print-value-only', 'e2e/renewal']).stdout.trim(), 'written before the renewal');
  t.deepEqual(changed(deployed(t)), []);
});

/** An application user's bundle as `etcd-kvm client` writes it, as the writer and the health sampler take an identity. */
const bundleIdentity = (dir: string, user: string) => ({
  caCert: join(dir, 'ca.crt'),
  cert: join(dir, `${user}.crt`),
  key: join(dir, `${user}.key`),
});

scenario(
  '--rotate-ca both under a writer through every member: both CAs trusted, client certificates of the new one, the pause for bundles, the new CAs presented, then trusted alone; the old refused on the client and peer ports, a run killed between stages finished by the next, nothing lost, the next run changes nothing',
  async (t) => {
    const app = variant(
      'rotation',
      (yaml) =>
        `${yaml}\nroles:\n  app1-rw:\n    permissions:\n      - prefix: /app1/\n        access: readwrite\nusers:\n  app1:\n    roles: [app1-rw]\n`,
    );
    const kept = mkdtempSync(join(tmpdir(), 'etcd-kvm-e2e-rotation-'));
    const [oldBundle, newBundle] = [join(kept, 'old'), join(kept, 'new')];
    const bundle = (dir: string) => t.is(etcdKvm('client', ['-i', app, '--user', 'app1', '--out', dir]).status, 0);
    const nothingLost = (prefix: string, acked: string[]) => {
      const stored = new Set(etcdctl(ALL, rootIdentity, ['get', '--prefix', prefix, '--print-value-only']).stdout.trim().split('\n'));
      t.true(acked.length > 5, `${acked.length} writes acknowledged`);
      t.deepEqual(
        acked.filter((n) => !stored.has(n)),
        [],
        'every acknowledged write is there',
      );
    };
    try {
      t.is(deployed(t, ['-i', app]).status, 0);
      bundle(oldBundle);
      // What a member held before: its peer certificate and key, and the peer CA.
      for (const file of ['pki/peers/etcd-1.crt', 'pki/peers/etcd-1.key', 'pki/peer-ca.crt'])
        cpSync(join(LAB_STATE, file), join(kept, file.replaceAll('/', '_')));
      const oldApp = bundleIdentity(oldBundle, 'app1');

      // The first run goes to the pause: members trust both CAs, clients hold certificates of the new one; the old bundle works throughout.
      let paused: DeployRun | undefined;
      const firstAcked = await withWriter(
        t,
        '/app1/rotation-1/',
        ALL,
        async () => {
          const sampled = sampledHealth(() => deployed(t, ['-i', app, '--rotate-ca', 'both']), oldApp);
          paused = sampled.result;
          quorumKept(t, sampled);
        },
        undefined,
        oldApp,
      );
      t.is(paused!.status, 0, endOf(paused!));
      t.regex(paused!.output, /the rotation of the cluster CA and the peer CA pauses here/);
      t.like(JSON.parse(readFileSync(join(LAB_STATE, 'pki/ca-rotation.json'), 'utf8')), { target: 'both', stage: 'clients-new' });
      nothingLost('/app1/rotation-1/', firstAcked);
      bundle(newBundle);
      t.is(certificatesIn(readFileSync(join(newBundle, 'ca.crt'), 'utf8')).length, 2, 'the bundle written at the pause trusts both CAs');
      // A plain run holds the stage and changes nothing.
      const held = deployed(t, ['-i', app]);
      t.deepEqual(changed(held), []);
      t.regex(held.output, /waits at clients-new: deploy --rotate-ca both goes on/);

      // The second run killed as its last stage begins; the third finishes. The new bundle works throughout both.
      const newApp = bundleIdentity(newBundle, 'app1');
      let finished: DeployRun | undefined;
      const secondAcked = await withWriter(
        t,
        '/app1/rotation-2/',
        ALL,
        async () => {
          const killed = await deployInBackground(['-i', app, '--rotate-ca', 'both'], (output, child) => {
            if (/ca rotation new-only/.test(output)) child.kill('SIGKILL');
          });
          outputs.push(killed.output);
          t.is(killed.signal, 'SIGKILL', killed.output.slice(-2000));
          t.true(existsSync(join(LAB_STATE, 'pki/ca-rotation.json')), 'killed before the end: the rotation is still recorded');
          const sampled = sampledHealth(() => deployed(t, ['-i', app, '--rotate-ca', 'both']), newApp);
          finished = sampled.result;
          quorumKept(t, sampled);
        },
        undefined,
        newApp,
      );
      t.is(finished!.status, 0, endOf(finished!));
      t.regex(finished!.output, /the rotation of the cluster CA and the peer CA ended/);
      t.regex(finished!.output, /consistency: the members agree/);
      nothingLost('/app1/rotation-2/', secondAcked);
      t.false(existsSync(join(LAB_STATE, 'pki/ca-rotation.json')));
      t.false(existsSync(join(LAB_STATE, 'pki/ca-next.crt')));
      t.deepEqual(
        certificatesIn(readFileSync(rootIdentity.caCert, 'utf8')),
        certificatesIn(readFileSync(newApp.caCert, 'utf8')).slice(1),
        "the new CA took the old one's place",
      );

      // The old CA's certificates are refused, on the client port and on the peer port; the new bundle and peer certificates work.
      t.is(asBundle(newBundle, ['put', '/app1/after-rotation', 'yes']).status, 0);
      t.not(asBundle(oldBundle, ['get', '/app1/after-rotation']).status, 0, 'the old bundle is refused');
      const oldCertNewCa = etcdctl([endpoint('etcd-1')], { caCert: rootIdentity.caCert, cert: oldApp.cert, key: oldApp.key }, [
        'get',
        '/app1/after-rotation',
      ]);
      t.not(oldCertNewCa.status, 0, 'a client certificate of the old CA is refused');
      const oldPeer = peerPortAnswer('etcd-1', join(kept, 'pki_peers_etcd-1.crt'), join(kept, 'pki_peers_etcd-1.key'));
      t.is(oldPeer.stdout, '000', 'a peer certificate of the old peer CA is refused');
      t.regex(oldPeer.stderr, /alert|certificate|SSL/i);
      // What the peer port presents, read as the handshake begins (a client from outside the members' addresses is
      // dropped once it shows its certificate: etcd matches a peer's certificate against where it connects from).
      const presented = inLab('sh', ['-c', `openssl s_client -connect ${MEMBER_IPS['etcd-1']}:2380 </dev/null 2>/dev/null | openssl x509`]);
      t.is(presented.status, 0, presented.stderr);
      t.true(isSignedBy(presented.stdout, readFileSync(join(LAB_STATE, 'pki/peer-ca.crt'), 'utf8')), 'etcd-1 presents the new peer CA');
      t.false(isSignedBy(presented.stdout, readFileSync(join(kept, 'pki_peer-ca.crt'), 'utf8')));
      const healthy = etcdctl(ALL, rootIdentity, ['endpoint', 'health']);
      t.is((healthy.stdout + healthy.stderr).match(/is healthy/g)?.length, 3, 'the members talk, with the new peer CA alone');

      t.deepEqual(changed(deployed(t, ['-i', app])), [], 'the next run changes nothing');
    } finally {
      // Back to the lab's own inventory: app1 and its role leave etcd.
      deployed(t);
      etcdctl(ALL, rootIdentity, ['del', '--prefix', '/app1/']);
      rmSync(app, { force: true });
      rmSync(kept, { recursive: true, force: true });
    }
  },
);

/** maintain.ts with its arguments; its output is kept with the deploys' (no key material in any of them). */
function maintained(t: ExecutionContext, args: string[]): { status: number; output: string } {
  const result = etcdKvm('maintain', ['-i', 'inventories/lab.yaml', ...args], {
    timeoutMs: 10 * 60_000,
  });
  const output = result.stdout + result.stderr;
  outputs.push(output);
  t.log(`maintain ${args.join(' ')}: exit ${result.status}\n${output.trim().split('\n').slice(-12).join('\n')}`);
  return { status: result.status, output };
}

const dbSizes = () =>
  new Map(
    etcdctlJson<{ Endpoint: string; Status: { dbSize: number } }[]>(['endpoint', 'status']).map((e) => [e.Endpoint, e.Status.dbSize]),
  );

scenario(
  'maintain --compact --defrag: after data written and deleted, every database shrinks, one member at a time, the leader last',
  (t) => {
    t.is(etcdctl([endpoint('etcd-1')], rootIdentity, ['put', 'e2e/kept', 'through maintenance']).status, 0);
    const value = 'x'.repeat(100 * 1024);
    for (let i = 0; i < 60; i++) t.is(etcdctl([endpoint('etcd-1')], rootIdentity, ['put', `e2e/fill/${i}`, value]).status, 0);
    t.is(etcdctl([endpoint('etcd-1')], rootIdentity, ['del', '--prefix', 'e2e/fill/']).status, 0);
    const before = dbSizes();
    for (const size of before.values()) t.true(size > 5 * 1024 * 1024, `${size}`);

    // The dry-run compacts nothing, so it plans the compaction and no defragmentation yet; it changes nothing.
    const dry = maintained(t, ['--compact', '--defrag', '--dry-run']);
    t.is(dry.status, 0);
    t.regex(dry.output, /localhost:\n {2}compact: would compact the key-value history up to revision \d+/);
    t.deepEqual(dbSizes(), before);

    const leader = leaderName();
    const real = maintained(t, ['--compact', '--defrag']);
    t.is(real.status, 0);
    const after = dbSizes();
    for (const [member, size] of after) t.true(size < before.get(member)! / 4, `${member}: ${before.get(member)} -> ${size}`);
    // Each member in a wave of its own, the leader in the last.
    const waves = [...real.output.matchAll(/^(etcd-\d):\n {2}defrag \(roll (\d) of 3\)/gm)].map((m) => [m[1]!, Number(m[2])] as const);
    t.deepEqual(waves.map(([, wave]) => wave).sort(), [1, 2, 3]);
    t.is(waves.find(([member]) => member === leader)?.[1], 3);
    t.regex(real.output, /database sizes \(before -> after\):\n( {2}etcd-\d: [\d.]+ MiB -> \d+ KiB \(in use \d+ KiB\)(; [^\n]+)?\n){3}/);
    // The leader handed its leadership to a follower before its own defragmentation (a defragmenting member takes
    // no write), and the report says to whom; the followers handed nothing.
    const handedTo = new RegExp(`^ {2}${leader}: .*; leadership handed to (etcd-\\d) first$`, 'm').exec(real.output)?.[1];
    t.truthy(handedTo, real.output);
    t.not(handedTo, leader);
    t.is([...real.output.matchAll(/; leadership (not )?handed to/g)].length, 1);
    // Nothing left to do: a second run changes nothing.
    t.regex(maintained(t, ['--compact', '--defrag']).output, /localhost\s+ok=2\s+changed=0[\s\S]*etcd-3\s+ok=1\s+changed=0/);
    t.is(etcdctl(ALL, rootIdentity, ['get', '--print-value-only', 'e2e/kept']).stdout.trim(), 'through maintenance');
  },
);

scenario('a NOSPACE alarm: status shows it and exits 1, writes are refused, maintain --disarm clears it and writes work again', (t) => {
  const raised = raiseNospace('etcd-2');
  t.is(raised.status, 0, raised.stderr);
  try {
    const degraded = status(t);
    t.is(degraded.status, 1);
    t.deepEqual(degraded.report.members.find((m) => m.name === 'etcd-2')?.alarms, ['NOSPACE']);
    t.regex(degraded.table, /problem: etcd-2: alarm NOSPACE/);
    const refused = etcdctl(ALL, rootIdentity, ['put', 'e2e/nospace', 'no']);
    t.not(refused.status, 0);
    t.regex(refused.stderr, /database space exceeded/);
    // The deploy says so too, and changes nothing for it.
    const seen = deployed(t);
    t.is(seen.status, 0);
    t.regex(seen.output, /health: WARNING: etcd reports an active NOSPACE alarm: the cluster refuses writes/);
    const dry = maintained(t, ['--disarm', '--dry-run']);
    t.regex(dry.output, /would disarm NOSPACE \(raised by etcd-2\)/);
    t.is(status(t).status, 1);
  } finally {
    const disarm = maintained(t, ['--disarm']);
    t.is(disarm.status, 0);
    t.regex(disarm.output, /disarm NOSPACE \(raised by etcd-2\): every database is under/);
  }
  t.is(status(t).status, 0);
  t.is(etcdctl(ALL, rootIdentity, ['put', 'e2e/nospace', 'written']).status, 0);
});

scenario('a roll that fails stops at that member, exits 1 naming it, and the members after it keep running their configuration', (t) => {
  const leader = leaderName();
  const victim = MEMBERS.find((member) => member !== leader)!;
  const quota = variant('failing-roll', (yaml) =>
    yaml
      .replace('space_quota: 536870912', 'space_quota: 402653184')
      .replace('is_initializing: true', 'is_initializing: true\n  health_timeout: 60'),
  );
  t.is(memberSsh(victim, 'sudo mv /usr/bin/etcd /usr/bin/etcd.off').status, 0);
  try {
    const result = deployed(t, ['-i', quota]);
    t.is(result.status, 1);
    const guest = (host: string) => result.report.results.find((r) => r.step === 'guest' && r.host === host)!;
    t.is(guest(victim).status, 'failed');
    t.regex(
      result.output,
      new RegExp(`\\[${victim}\\] guest: etcd on ${victim} did not come back after its restart: .*The roll stops here`),
    );
    for (const other of MEMBERS.filter((member) => member !== victim)) {
      t.is(guest(other).status, 'skipped', other);
      t.is(runningValue(other, 'ETCD_QUOTA_BACKEND_BYTES'), '536870912', `${other} still runs the old quota`);
    }
    const health = etcdctl(MEMBERS.filter((member) => member !== victim).map(endpoint), rootIdentity, ['endpoint', 'health']);
    t.is((health.stdout + health.stderr).match(/is healthy/g)?.length, 2);
  } finally {
    rmSync(quota, { force: true });
    memberSsh(victim, 'sudo mv /usr/bin/etcd.off /usr/bin/etcd');
  }
  // The operator's fix (the binary back) and a run with the lab's inventory: converged again.
  const repaired = deployed(t);
  t.is(repaired.status, 0);
  t.is(runningValue(victim, 'ETCD_QUOTA_BACKEND_BYTES'), '536870912');
  const health = etcdctl(ALL, rootIdentity, ['endpoint', 'health']);
  t.is((health.stdout + health.stderr).match(/is healthy/g)?.length, 3);
});

/** lab.yaml with a fourth member, as an operator grows the cluster: etcd-3's entry with the next address. */
function grownInventory(): string {
  const path = 'inventories/.e2e-grown.yaml';
  const lab = readFileSync('inventories/lab.yaml', 'utf8');
  const third = lab.slice(lab.indexOf('  - name: etcd-3'));
  writeFileSync(path, `${lab.trimEnd()}\n${third.replace('etcd-3', 'etcd-4').replace('192.168.150.13', '192.168.150.14').trimEnd()}\n`);
  return path;
}

/** A deploy in the background (the writer and the membership poller keep running meanwhile); resolves with its exit and output. */

scenario(
  'grow 3 → 4: a run killed (-9) right after adding the learner is finished by the next; learner, then voting; a writer never loses an acknowledged key',
  async (t) => {
    const grown = grownInventory();
    // What etcd says of etcd-4, once a second, for the whole operation.
    const seen: string[] = [];
    let polling = true;
    const poller = (async () => {
      while (polling) {
        const list = await new Promise<string>((resolve) => {
          const child = spawn(
            'ip',
            [
              'netns',
              'exec',
              NAMESPACE,
              'etcdctl',
              '--dial-timeout=3s',
              '--command-timeout=5s',
              `--endpoints=${ALL.join(',')}`,
              ...tlsArgs(rootIdentity),
              'member',
              'list',
              '-w',
              'json',
            ],
            { stdio: ['ignore', 'pipe', 'ignore'] },
          );
          let out = '';
          child.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
          child.on('close', () => resolve(out));
        });
        try {
          const fourth = (JSON.parse(list) as { members: { name?: string; peerURLs: string[]; isLearner?: boolean }[] }).members.find((m) =>
            m.peerURLs.includes('https://192.168.150.14:2380'),
          );
          const state = !fourth ? 'absent' : fourth.isLearner ? (fourth.name ? 'learner' : 'learner (not started)') : 'voting';
          if (seen.at(-1) !== state) seen.push(state);
        } catch {
          // A member list that could not be read (a member restarting): the next sample tells.
        }
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
    })();
    let acked: string[] = [];
    try {
      // The plan first: a dry-run names the join and changes nothing.
      const dry = deployed(t, ['-i', grown, '--dry-run']);
      t.is(dry.status, 0);
      t.regex(dry.output, /etcd-4:\n {2}add: would add etcd-4 to the cluster as a learner/);
      t.is(JSON.parse(etcdctl(ALL, rootIdentity, ['member', 'list', '-w', 'json']).stdout).members.length, 3);

      acked = await withWriter(t, 'e2e/grow/', ALL, async () => {
        // Killed the moment the learner is in: etcd has it, no VM runs it.
        const killed = await deployInBackground(['-i', grown], (output, child) => {
          if (/✔ join etcd-4: 1 changed/.test(output)) child.kill('SIGKILL');
        });
        outputs.push(killed.output);
        t.is(killed.signal, 'SIGKILL', killed.output.slice(-2000));
        const afterKill = JSON.parse(etcdctl(ALL, rootIdentity, ['member', 'list', '-w', 'json']).stdout) as {
          members: { name?: string; isLearner?: boolean; peerURLs: string[] }[];
        };
        t.like(
          afterKill.members.find((m) => m.peerURLs.includes('https://192.168.150.14:2380')),
          { isLearner: true },
        );

        // What the run will do, printed first; then the run does exactly that.
        const listed = listedPhases(t, ['-i', grown]);
        t.deepEqual(
          listed.filter((phase) => /^(join|promote|formed)/.test(phase)),
          ['join etcd-4', 'promote etcd-4', 'formed'],
        );
        const report = join(mkdtempSync(join(tmpdir(), 'etcd-kvm-e2e-')), 'report.json');
        const resumed = await deployInBackground(['-i', grown, '--json', report]);
        outputs.push(resumed.output);
        t.deepEqual(phasesRun(report), listed);
        t.log(resumed.output.slice(-3000));
        t.is(resumed.status, 0);
        t.regex(resumed.output, /to join one after another: etcd-4 \(added, resumed\)/);
        t.regex(resumed.output, /etcd-4:\n(?: {2}.*\n)* {2}promote: promote etcd-4 from learner to voting member/);
      });
    } finally {
      polling = false;
      await poller;
    }
    t.log(`etcd-4 as etcd listed it: ${seen.join(' → ')}`);
    t.is(seen.at(-1), 'voting');
    t.true(seen.includes('learner (not started)') && seen.indexOf('learner (not started)') < seen.indexOf('voting'), seen.join(' → '));

    const list = JSON.parse(etcdctl(ALL, rootIdentity, ['member', 'list', '-w', 'json']).stdout) as {
      members: { name: string; isLearner?: boolean }[];
    };
    t.deepEqual(list.members.map((m) => `${m.name}${m.isLearner ? ' (learner)' : ''}`).sort(), ['etcd-1', 'etcd-2', 'etcd-3', 'etcd-4']);
    const fourEndpoints = [...ALL, 'https://192.168.150.14:2379'];
    t.is((etcdctl(fourEndpoints, rootIdentity, ['endpoint', 'health']).stderr.match(/is healthy/g) ?? []).length, 4);
    // Every write the writer saw acknowledged is there, read through the new member.
    t.true(acked.length > 50, `${acked.length} writes acknowledged`);
    const stored = new Set(
      etcdctl(['https://192.168.150.14:2379'], rootIdentity, ['get', '--prefix', 'e2e/grow/', '--print-value-only'])
        .stdout.trim()
        .split('\n'),
    );
    t.deepEqual(
      acked.filter((n) => !stored.has(n)),
      [],
    );

    // Converged: the same inventory again changes nothing.
    const again = deployed(t, ['-i', grown]);
    t.is(again.status, 0);
    t.deepEqual(changed(again), []);
  },
);

scenario(
  'shrink 4 → 3 removing the current leader: leadership moved first, the member removed, its VM undefined and its volumes kept; a writer loses nothing',
  async (t) => {
    const fourth = 'https://192.168.150.14:2379';
    const list = () =>
      JSON.parse(etcdctl(ALL, rootIdentity, ['member', 'list', '-w', 'json']).stdout.replace(/"ID":(\d+)/g, '"ID":"$1"')) as {
        members: { ID: string; name: string; isLearner?: boolean }[];
      };
    const id4 = list().members.find((m) => m.name === 'etcd-4')!.ID;
    // etcd-4 leads: moved there by etcdctl (which finds the current leader among the endpoints), unless it already does.
    const leaderId = () =>
      (
        JSON.parse(
          etcdctl([fourth], rootIdentity, ['endpoint', 'status', '-w', 'json']).stdout.replace(/"(member_id|leader)":(\d+)/g, '"$1":"$2"'),
        ) as { Status: { leader: string } }[]
      )[0]!.Status.leader;
    if (leaderId() !== id4) {
      const moved = etcdctl([...ALL, fourth], rootIdentity, ['move-leader', BigInt(id4).toString(16)]);
      t.is(moved.status, 0, moved.stderr);
    }
    const leaderNow = JSON.parse(
      etcdctl([fourth], rootIdentity, ['endpoint', 'status', '-w', 'json']).stdout.replace(/"(member_id|leader)":(\d+)/g, '"$1":"$2"'),
    ) as { Status: { leader: string } }[];
    t.is(leaderNow[0]!.Status.leader, id4);

    const path = 'inventories/.e2e-shrunk.yaml';
    writeFileSync(path, readFileSync(grownInventory(), 'utf8').replace(/(- name: etcd-4\n)/, '$1    state: absent\n'));
    // The plan, in order, and nothing done.
    const dry = deployed(t, ['-i', path, '--dry-run']);
    t.is(dry.status, 0);
    t.regex(
      dry.output,
      /etcd-4:\n {2}leave: would move leadership from etcd-4 to etcd-\d first\n {2}leave: would remove etcd-4 from the cluster \(member ID [0-9a-f]+\)\n {2}leave: would stop and undefine VM etcd-4 on lab/,
    );
    t.is(list().members.length, 4);
    t.is(leaderId(), id4);
    const listed = listedPhases(t, ['-i', path]);
    t.deepEqual(listed.slice(0, 2), ['pki', 'leave etcd-4']);
    const report = join(mkdtempSync(join(tmpdir(), 'etcd-kvm-e2e-')), 'report.json');
    let result: Awaited<ReturnType<typeof deployInBackground>> | undefined;
    const acked = await withWriter(t, 'e2e/shrink/', ALL, async () => {
      result = await deployInBackground(['-i', path, '--json', report]);
    });
    outputs.push(result!.output);
    t.deepEqual(phasesRun(report), listed);
    t.log(result!.output.slice(-2500));
    t.is(result!.status, 0);
    t.regex(
      result!.output,
      /etcd-4:\n {2}leave: move leadership from etcd-4 to etcd-\d first\n {2}leave: remove etcd-4 from the cluster \(member ID [0-9a-f]+\)\n {2}leave: stop and undefine VM etcd-4 on lab; its volumes stay \(etcd-lab\/etcd-4-data\.qcow2, etcd-lab\/etcd-4-os\.qcow2: virsh vol-delete removes them\)/,
    );
    t.deepEqual(
      list()
        .members.map((m) => m.name)
        .sort(),
      ['etcd-1', 'etcd-2', 'etcd-3'],
    );
    t.not(virsh(['dominfo', 'etcd-4']).status, 0);
    t.is(virsh(['vol-info', '--pool', 'etcd-lab', 'etcd-4-data.qcow2']).status, 0);
    t.is((etcdctl(ALL, rootIdentity, ['endpoint', 'health']).stderr.match(/is healthy/g) ?? []).length, 3);
    t.true(acked.length > 10, `${acked.length}`);
    const stored = new Set(etcdctl(ALL, rootIdentity, ['get', '--prefix', 'e2e/shrink/', '--print-value-only']).stdout.trim().split('\n'));
    t.deepEqual(
      acked.filter((n) => !stored.has(n)),
      [],
    );

    // Back to the lab's own inventory (etcd-4's entry gone): converged, nothing to change.
    const again = deployed(t);
    t.is(again.status, 0);
    t.deepEqual(changed(again), []);
    rmSync(path, { force: true });
    rmSync('inventories/.e2e-grown.yaml', { force: true });
    for (const volume of ['etcd-4-os.qcow2', 'etcd-4-data.qcow2', 'etcd-4-cloud-init.iso'])
      virsh(['vol-delete', '--pool', 'etcd-lab', volume]);
  },
);

scenario(
  'replace: etcd-2 destroyed and its OS and data volumes deleted with virsh; one run brings back three healthy voting members, its data from the cluster',
  async (t) => {
    t.is(etcdctl(ALL, rootIdentity, ['put', 'e2e/before-replace', 'kept']).status, 0);
    t.is(virsh(['destroy', 'etcd-2']).status, 0);
    for (const volume of ['etcd-2-os.qcow2', 'etcd-2-data.qcow2']) t.is(virsh(['vol-delete', '--pool', 'etcd-lab', volume]).status, 0);
    const dry = deployed(t, ['--dry-run']);
    t.regex(
      dry.output,
      /etcd-2:\n {2}replace: would mark domain etcd-2 as being replaced[^\n]*\n {2}replace: would remove etcd-2 from the cluster \(member ID [0-9a-f]+\); it joins again empty and takes its data from the cluster\n {2}replace: would undefine VM etcd-2 on lab/,
    );
    const listed = listedPhases(t, []);
    t.deepEqual(
      listed.filter((phase) => /^(replace|join|promote|formed)/.test(phase)),
      ['replace etcd-2', 'join etcd-2', 'promote etcd-2', 'formed'],
    );
    const report = join(mkdtempSync(join(tmpdir(), 'etcd-kvm-e2e-')), 'report.json');
    let result: Awaited<ReturnType<typeof deployInBackground>> | undefined;
    const healthy = ALL.filter((e) => e !== endpoint('etcd-2'));
    const acked = await withWriter(t, 'e2e/replace/', healthy, async () => {
      result = await deployInBackground(['-i', 'inventories/lab.yaml', '--json', report]);
    });
    outputs.push(result!.output);
    t.deepEqual(phasesRun(report), listed);
    t.log(result!.output.slice(-3000));
    t.is(result!.status, 0);
    t.regex(result!.output, /cluster: formed \(leader etcd-\d\): members join as existing; to join one after another: etcd-2/);
    t.regex(result!.output, /promote: promote etcd-2 from learner to voting member/);
    const list = JSON.parse(etcdctl(ALL, rootIdentity, ['member', 'list', '-w', 'json']).stdout) as {
      members: { name: string; isLearner?: boolean }[];
    };
    t.deepEqual(list.members.map((m) => `${m.name}${m.isLearner ? ' (learner)' : ''}`).sort(), ['etcd-1', 'etcd-2', 'etcd-3']);
    t.is((etcdctl(ALL, rootIdentity, ['endpoint', 'health']).stderr.match(/is healthy/g) ?? []).length, 3);
    // Its data came from the cluster: what was written before and during, read through etcd-2 itself.
    t.is(etcdctl([endpoint('etcd-2')], rootIdentity, ['get', '--print-value-only', 'e2e/before-replace']).stdout.trim(), 'kept');
    const stored = new Set(
      etcdctl([endpoint('etcd-2')], rootIdentity, ['get', '--prefix', 'e2e/replace/', '--print-value-only'])
        .stdout.trim()
        .split('\n'),
    );
    t.deepEqual(
      acked.filter((n) => !stored.has(n)),
      [],
    );
    const again = deployed(t);
    t.is(again.status, 0);
    t.deepEqual(changed(again), []);
  },
);

// Last of the scenarios that change the cluster: it leaves etcd-2 with more memory than the lab inventory gives it.
scenario('drift: more memory in the inventory redefines the domain and restarts the member, then waits for health', (t) => {
  // A copy beside the original, so its relative paths (hypervisor key, state directory) still resolve.
  const resized = 'inventories/.e2e-resized.yaml';
  writeFileSync(resized, readFileSync('inventories/lab.yaml', 'utf8').replace('memory: 1024', 'memory: 1152'));
  const dataDisk = () => memberSsh('etcd-2', 'findmnt -n -o SOURCE,UUID /var/lib/etcd').stdout.trim();
  const before = dataDisk();
  t.regex(before, /^\/dev\/vdb [0-9a-f-]{36}$/);
  // Its own key, so that what it reads after the restart does not depend on the scenarios before it.
  t.is(etcdctl([endpoint('etcd-1')], rootIdentity, ['put', 'e2e/before-resize', 'kept']).status, 0);
  try {
    const result = deployed(t, ['-i', resized, '--limit', 'etcd-2']);
    t.is(result.status, 0, endOf(result));
    t.deepEqual(
      changed(result).map((line) => line.replace(/: changed .*/, '')),
      ['etcd-2/render', 'etcd-2/domain'],
    );
    t.regex(changed(result).join('\n'), /redefine domain etcd-2; restart etcd-2 to apply its new definition/);
    t.regex(virsh(['dominfo', 'etcd-2']).stdout, /Max memory:\s+1179648 KiB/);
    t.regex(virsh(['domstate', 'etcd-2']).stdout, /running/);
    t.is(etcdctl(ALL, rootIdentity, ['endpoint', 'health']).status, 0);
    t.is(etcdctl([endpoint('etcd-2')], rootIdentity, ['get', '--print-value-only', 'e2e/before-resize']).stdout.trim(), 'kept');
    // The same file system, not a fresh one: the redefined member kept its data disk as it was.
    t.is(dataDisk(), before);
  } finally {
    rmSync(resized, { force: true });
  }
});

scenario('no run printed private key material or a key file line, and keys are 0600', (t) => {
  const all = outputs.join('\n');
  t.false(all.includes('PRIVATE KEY'));
  const keysIn = (dir: string) =>
    readdirSync(join(LAB_STATE, dir))
      .filter((f) => f.endsWith('.key'))
      .map((f) => `${dir}/${f}`);
  const keyFiles = [
    'pki/ca.key',
    'pki/peer-ca.key',
    'pki/clients/root.key',
    'ssh/admin.key',
    ...keysIn('pki/members'),
    ...keysIn('pki/peers'),
    ...keysIn('ssh/hosts'),
  ];
  for (const file of keyFiles) {
    const path = join(LAB_STATE, file);
    t.true(existsSync(path), file);
    t.is(statSync(path).mode & 0o777, 0o600, file);
    const lines = readFileSync(path, 'utf8')
      .split('\n')
      .filter((line) => line.length > 20 && !line.startsWith('-----'));
    t.false(
      lines.some((line) => all.includes(line)),
      `a line of ${file} was printed`,
    );
  }
});
