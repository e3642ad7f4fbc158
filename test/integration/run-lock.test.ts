import test from 'ava';
import { processScope } from '../../tasks/core/lock.ts';
import { spawnSync } from 'node:child_process';
import { hostname } from 'node:os';
import type { ChildProcess } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Etcd3 } from 'etcd3';
import { Secret } from '../../tasks/core/secret.ts';
import { silenceKnownWarnings } from '../../tasks/core/warnings.ts';
import { EtcdClients, type ClientIdentity } from '../../tasks/etcd/client.ts';
import { waitForHealth } from '../../tasks/etcd/health.ts';
import { clientIdentities } from '../../tasks/etcd/identities.ts';
import { holderRecord, type RunLockHolder } from '../../tasks/etcd/run-lock-decision.ts';
import {
  acquireClusterRunLock,
  lookAtClusterRunLock,
  type Acquisition,
  type ClusterRunLockOptions,
  type HeldRunLock,
} from '../../tasks/etcd/run-lock-lease.ts';
import { runLockKey } from '../../tasks/inventory/lock-keys.ts';
import { DEFRAG_LOCK_KEY } from '../../tasks/inventory/lock-keys.ts';
import type { Inventory } from '../../tasks/inventory/model.ts';
import { PkiStore } from '../../tasks/pki/store.ts';
import { HypervisorConnections } from '../../tasks/remote/hypervisors.ts';
import { run } from '../helpers/exec.ts';
import { baseDocument, load, writeInventory, type Doc } from '../helpers/inventory.ts';
import { Processes } from '../helpers/processes.ts';
import { renderWithPki } from '../helpers/render.ts';
import { startRenderedMembers } from '../helpers/loopback-etcd.ts';
import { Runner } from '../../tasks/core/runner.ts';
import { compactStep } from '../../tasks/steps/maintenance.ts';

/**
 * The cluster's run lock against a real 3-member etcd 3.4 on 127.0.0.1-3 (certificate mode, root by
 * its client certificate), started as etcd-cluster.test.ts starts one: two runs at once, exactly one
 * holds it; a killed run's lock goes with its lease; a lease lost from under a run is reported; the
 * keep-alive goes on through another member while one is stopped. Each test locks its own cluster
 * name, so none sees another's key.
 */

const IPS = ['127.0.0.1', '127.0.0.2', '127.0.0.3'];
const CLIENT_PORT = 25379;

silenceKnownWarnings();

const processes = new Processes();
test.after.always(() => processes.stopAll());

function loopbackDocument(): Doc {
  const doc = baseDocument();
  doc.hypervisors = { hv: { address: '127.0.0.254' } };
  doc.etcd = { client_port: CLIENT_PORT, peer_port: CLIENT_PORT + 1, listen_localhost: false, client_cert_auth: true };
  // Ports of its own beside the other loopback clusters', the metrics listener's too.
  doc.monitoring = { metrics_port: CLIENT_PORT + 2 };
  doc.members.forEach((member, i) => {
    member.libvirt_networks = [{ network_name: 'net', ip: IPS[i], prefix_length: 8 }];
    member.reach_via = 'direct';
  });
  return doc;
}

/** One etcd per member from its rendered user-data, file locations moved out of guest paths (as etcd-cluster.test.ts). */
async function startCluster(): Promise<{ inventory: Inventory; members: Map<string, ChildProcess> }> {
  const { inventory, rendered } = await renderWithPki(load(loopbackDocument()));
  const { members } = startRenderedMembers(inventory, rendered, processes);
  return { inventory, members: new Map([...members].map(([name, member]) => [name, member.process])) };
}

const cluster = startCluster().then(async (started) => {
  const root = clientIdentities(started.inventory, new PkiStore(started.inventory.stateDir)).root;
  // The test's own view of etcd, as an operator's etcdctl would have it.
  const clients = new EtcdClients(new HypervisorConnections(), CLIENT_PORT, root);
  for (const member of started.inventory.members) await waitForHealth(started.inventory, clients, member, 60_000);
  return { ...started, root, clients };
});
test.after.always(async () => (await cluster).clients.close());

const holderOf = (host: string, pid: number): RunLockHolder => ({
  host,
  pid,
  since: new Date().toISOString(),
  command: `deploy -i ${host}.yaml`,
});

async function acquire(name: string, holder: RunLockHolder, options: Partial<ClusterRunLockOptions> = {}): Promise<Acquisition> {
  const { inventory, root } = await cluster;
  return acquireClusterRunLock({
    connections: new HypervisorConnections(),
    clientPort: CLIENT_PORT,
    identity: root,
    members: inventory.members,
    cluster: name,
    holder,
    onLost: () => undefined,
    ...options,
  });
}

/** The lock, if acquired; otherwise the test fails, showing what came instead. */
function held(acquisition: Acquisition): HeldRunLock {
  if (acquisition.kind !== 'acquired') throw new Error(`expected the lock, got ${JSON.stringify(acquisition)}`);
  return acquisition.lock;
}

function refusal(acquisition: Acquisition): Extract<Acquisition, { kind: 'refused' }> {
  if (acquisition.kind !== 'refused') throw new Error(`expected a refusal, got ${acquisition.kind}`);
  return acquisition;
}

function localOnly(acquisition: Acquisition): string {
  if (acquisition.kind !== 'local-only') throw new Error(`expected the local lock only, got ${acquisition.kind}`);
  return acquisition.why;
}

async function anyClient(): Promise<Etcd3> {
  const { inventory, clients } = await cluster;
  return clients.for(inventory.members[0]!);
}

/** The lock's key as etcd has it: its record and lease, or undefined when there is none. */
async function keyOf(name: string): Promise<{ value: string; lease: string } | undefined> {
  const response = await (await anyClient()).kv.range({ key: Buffer.from(runLockKey(name)) });
  const kv = response.kvs[0];
  return kv && { value: kv.value.toString(), lease: kv.lease };
}

test.serial(
  "a member's scheduled defragmentation holds its lock: the run's lock is not taken meanwhile, and is once it ends",
  async (t) => {
    const client = await anyClient();
    await client.kv.put({ key: Buffer.from(DEFRAG_LOCK_KEY), value: Buffer.from('etcd-2') });
    try {
      const busy = await acquire('defragmenting', holderOf('operator-a.example', 3333));
      t.deepEqual(busy, { kind: 'busy', why: 'etcd-2 is defragmenting its database on its schedule (it holds etcd-kvm/defrag/lock)' });
      t.is(await keyOf('defragmenting'), undefined, 'nothing put');
    } finally {
      await client.kv.deleteRange({ key: Buffer.from(DEFRAG_LOCK_KEY) });
    }
    const lock = held(await acquire('defragmenting', holderOf('operator-a.example', 3333)));
    t.is(await lock.release(), undefined);
  },
);

test('two runs at once: exactly one holds the lock, the other is refused naming its host and PID; after release the other takes it', async (t) => {
  const a = holderOf('operator-a.example', 1111);
  const b = holderOf('operator-b.example', 2222);
  const both = await Promise.all([acquire('two-runs', a), acquire('two-runs', b)]);
  t.deepEqual(both.map((result) => result.kind).sort(), ['acquired', 'refused']);
  const winner = both.findIndex((result) => result.kind === 'acquired');
  const [won, lost] = [[a, b][winner]!, [a, b][1 - winner]!];
  const lock = held(both[winner]!);
  const refused = refusal(both[1 - winner]!);
  t.deepEqual(refused.holder, won);
  t.true(refused.message.includes(`by PID ${won.pid} on ${won.host} since ${won.since}`), refused.message);
  t.regex(refused.message, /if that run is gone, the lock expires by itself within 30 s\./);

  const stored = await keyOf('two-runs');
  t.is(stored?.value, holderRecord(won));
  t.is(stored?.lease, lock.leaseId);

  t.is(await lock.release(), undefined);
  t.is(await keyOf('two-runs'), undefined, 'release revokes the lease, and the key goes with it');
  const next = held(await acquire('two-runs', lost));
  t.is((await keyOf('two-runs'))?.value, holderRecord(lost));
  t.is(await next.release(), undefined);
});

test('a look writes nothing and finds the lock free with its epoch, or held; an acquisition against the epoch seen succeeds unless another run took the lock in between, even one already gone', async (t) => {
  const { inventory, root } = await cluster;
  const look = () =>
    lookAtClusterRunLock({
      connections: new HypervisorConnections(),
      clientPort: CLIENT_PORT,
      identity: root,
      members: inventory.members,
      cluster: 'epoch',
    });
  const revisionNow = async () => (await (await anyClient()).maintenance.status({})).header.revision;

  const before = await revisionNow();
  const first = await look();
  t.deepEqual(first, { kind: 'free', epoch: '0' }, 'never taken: no epoch yet');
  t.is(await revisionNow(), before, 'the look wrote nothing');

  // This run looked; another one takes the lock, changes things, and is gone before this run's first change.
  const other = holderOf('operator-o.example', 1212);
  await held(await acquire('epoch', other)).release();
  const overtaken = refusal(await acquire('epoch', holderOf('operator-s.example', 1313), { epoch: '0' }));
  t.deepEqual(overtaken.holder, other);
  t.regex(
    overtaken.message,
    /^another run took the cluster's run lock in etcd \(etcd-kvm\/run-lock\/epoch\) after this run read the cluster: .* by PID 1212 on operator-o\.example since /,
  );
  t.is(await keyOf('epoch'), undefined, 'the refused run left no key');

  // Looked again after that run: its epoch; taken against it.
  const second = await look();
  if (second.kind !== 'free') throw new Error(`expected the lock free, got ${JSON.stringify(second)}`);
  t.not(second.epoch, '0');
  const mine = held(await acquire('epoch', holderOf('operator-s.example', 1313), { epoch: second.epoch }));
  const whileHeld = await look();
  t.is(whileHeld.kind, 'refused');
  t.regex(
    whileHeld.kind === 'refused' ? whileHeld.message : '',
    /^another run holds the cluster's run lock in etcd \(etcd-kvm\/run-lock\/epoch\): .* by PID 1313 on /,
  );
  await mine.release();
});

test("a killed run's lock (a lease nobody keeps alive) is refused while it lasts, then expires with its lease and is taken", async (t) => {
  const client = await anyClient();
  // What a killed run leaves: its record on a 2 s lease that no one renews.
  const killed = holderOf('operator-k.example', 3333);
  const lease = await client.leaseClient.leaseGrant({ TTL: 2 });
  await client.kv.put({ key: Buffer.from(runLockKey('killed')), value: Buffer.from(holderRecord(killed)), lease: lease.ID });
  const granted = Date.now();

  t.deepEqual(refusal(await acquire('killed', holderOf('operator-n.example', 4444))).holder, killed);
  let taken: Acquisition = { kind: 'local-only', why: 'not asked yet' };
  while (Date.now() - granted < 15_000) {
    taken = await acquire('killed', holderOf('operator-n.example', 4444));
    if (taken.kind === 'acquired') break;
    await sleep(250);
  }
  const lock = held(taken);
  // etcd checks expiries every 500 ms; the lease's TTL is the grant's answer (etcd may raise a small one).
  t.true(Date.now() - granted < Number(lease.TTL) * 1000 + 3_000, `taken over after ${Date.now() - granted} ms, TTL ${lease.TTL} s`);
  t.is(JSON.parse((await keyOf('killed'))!.value).pid, 4444);
  await lock.release();
});

test('the keep-alive holds the lock past its TTL; a lease revoked from under the run is reported once as lost', async (t) => {
  const lost: string[] = [];
  const lock = held(await acquire('kept', holderOf('operator-a.example', 5555), { ttlS: 2, onLost: (why) => lost.push(why) }));
  await sleep(5_000);
  t.deepEqual(lost, []);
  t.is(refusal(await acquire('kept', holderOf('operator-b.example', 6666))).holder?.pid, 5555);

  // Someone revokes the run's lease (or etcd expired it during an outage).
  await (await anyClient()).leaseClient.leaseRevoke({ ID: lock.leaseId });
  const revoked = Date.now();
  while (lost.length === 0 && Date.now() - revoked < 5_000) await sleep(100);
  t.deepEqual(lost, ["lost the cluster's run lock (etcd-kvm/run-lock/kept): etcd says its lease expired or was revoked"]);
  t.true(lock.lost);
  t.is(await lock.release(), undefined, 'a lease already gone is released');
  await sleep(1_000);
  t.is(lost.length, 1, 'reported once');
});

test('the keep-alive goes on through another member while the one it used is stopped (a roll restarts each member once)', async (t) => {
  const { members } = await cluster;
  const lost: string[] = [];
  const lock = held(
    // A TTL with room for an election: the stopped member may be the leader, and the other two take
    // seconds to elect one on a loaded machine (CI saw "no member renewed its lease for 3 s" once with 3 s).
    await acquire('roll', holderOf('operator-a.example', 7777), { ttlS: 5, answerMs: 1_000, onLost: (why) => lost.push(why) }),
  );
  // Let a renewal pass first: the first one names the member it went through.
  await sleep(1_000);
  const first = lock.renewingThrough;
  const child = members.get(first)!;
  // Frozen, not ended: its connections hang, as a member whose VM restarts does.
  child.kill('SIGSTOP');
  t.teardown(() => child.kill('SIGCONT'));
  // Longer than the TTL: the lock is kept only if its lease was renewed through another member meanwhile.
  await sleep(7_000);
  child.kill('SIGCONT');
  t.deepEqual(lost, []);
  t.not(lock.renewingThrough, first);
  t.is(refusal(await acquire('roll', holderOf('operator-b.example', 8888))).holder?.pid, 7777);
  t.is(await lock.release(), undefined);
});

test('etcd not answering, or root unable to log in yet: the local lock only, said why', async (t) => {
  const { inventory, root } = await cluster;
  const started = Date.now();
  const nobody = await acquireClusterRunLock({
    connections: new HypervisorConnections(),
    clientPort: CLIENT_PORT + 10,
    identity: root,
    members: inventory.members,
    cluster: 'nobody',
    holder: holderOf('a', 1),
    onLost: () => undefined,
    answerMs: 2_000,
  });
  t.regex(localOnly(nobody), /^etcd does not answer \(.*(ECONNREFUSED|no answer within)/);
  t.true(Date.now() - started < 4_000);

  // Password mode before the auth step: root by password while etcd has no authentication (etcd's own answer).
  const byPassword = (): ClientIdentity => ({ ...root(), label: 'root password', user: { name: 'root', password: new Secret('not-yet') } });
  const beforeAuth = await acquire('before-auth', holderOf('a', 1), { identity: byPassword });
  t.deepEqual(beforeAuth, { kind: 'local-only', why: 'etcd has no authentication enabled yet, so root cannot take its lock' });
  t.is(await keyOf('before-auth'), undefined);
});

test('deploy and maintain from another copy of the state directory are refused at once while a run holds the cluster lock, changing nothing; once it is released maintain runs and releases it', async (t) => {
  const { inventory } = await cluster;
  // Another clone of the same state directory: its own lock file, the same cluster.
  const clone = mkdtempSync(join(tmpdir(), 'etcd-kvm-clone-'));
  cpSync(inventory.stateDir, clone, { recursive: true });
  const doc = loopbackDocument();
  (doc.cluster as Record<string, unknown>).state_dir = clone;
  const path = writeInventory(doc);
  const tool = (script: string, args: string[]) =>
    run(process.execPath, ['--import', 'tsx', `tasks/commands/${script}.ts`, '-i', path, ...args]);
  const before = readdirSync(clone, { recursive: true }).sort();

  const other = holderOf('operator-a.example', 9999);
  const lock = held(await acquire(inventory.cluster.name, other));
  const refusal = `another run holds the cluster's run lock in etcd (etcd-kvm/run-lock/test): deploy -i operator-a.example.yaml by PID 9999 on operator-a.example since ${other.since}. Wait for it to finish; if that run is gone, the lock expires by itself within 30 s.`;
  const lines = (text: string) => text.split('\n');
  const deployed = tool('deploy', []);
  t.is(deployed.status, 1, deployed.stdout + deployed.stderr);
  t.true(lines(deployed.stderr).includes(`error: ${refusal}`), deployed.stderr);
  const maintained = tool('maintain', ['--compact']);
  t.is(maintained.status, 1, maintained.stdout + maintained.stderr);
  t.true(lines(maintained.stderr).includes(`error: maintenance failed: ${refusal}`), maintained.stderr);
  t.deepEqual(
    readdirSync(clone, { recursive: true }).sort(),
    before,
    'nothing written to the state directory: the refusal comes before the pki step',
  );
  t.is(JSON.parse((await keyOf(inventory.cluster.name))!.value).pid, 9999, 'the holder keeps its lock');

  t.is(await lock.release(), undefined);
  const afterRelease = tool('maintain', ['--compact']);
  t.is(afterRelease.status, 0, afterRelease.stdout + afterRelease.stderr);
  t.notRegex(afterRelease.stdout + afterRelease.stderr, /run lock|lock:/);
  t.is(await keyOf(inventory.cluster.name), undefined, 'maintain released its lock when it ended');
});

test("maintain's compaction is done once: the runs' own locks (a put and a delete each) are no history to compact", async (t) => {
  const { inventory, clients } = await cluster;
  const client = await clients.for(inventory.members[0]!);
  for (let i = 0; i < 5; i++) await client.put(`compaction/${i}`).value('x');
  await client.delete().prefix('compaction/');
  const runner = new Runner({ dryRun: false, renderer: 'silent' });
  // As maintain runs it: the lock held around the step.
  const compactUnderLock = async () => {
    const lock = held(await acquire('compaction', holderOf('operator-a.example', 8888)));
    try {
      const [result] = await runner.runStep(compactStep({ inventory, clients }));
      return result!;
    } finally {
      await lock.release();
    }
  };
  const first = await compactUnderLock();
  t.is(first.status, 'changed', first.error);
  t.regex(first.changes[0]!.summary, /^compact the key-value history up to revision \d+/);
  for (let run = 0; run < 3; run++) t.is((await compactUnderLock()).status, 'ok', `run ${run + 2}: only locks since the compaction`);
  await client.put('compaction/after').value('y');
  t.is((await compactUnderLock()).status, 'changed', 'a key written since: compacted again');
});

test("a lock held by a run of this machine whose process is gone (killed -9) is taken over at once, as the lock file is; another machine's is not, even of the same host name", async (t) => {
  const gone = spawnSync('true').pid!;
  const scope = processScope()!;
  const lost: string[] = [];
  const killed = held(
    await acquire(
      'killed-here',
      { host: hostname(), pid: gone, since: new Date().toISOString(), command: 'deploy (killed)', scope },
      { onLost: (why) => lost.push(why) },
    ),
  );
  const next = held(await acquire('killed-here', holderOf(hostname(), process.pid)));
  t.is(await next.release(), undefined);
  await killed.release();
  const elsewhere = held(
    await acquire('killed-elsewhere', { host: 'operator-b.example', pid: gone, since: new Date().toISOString(), command: 'deploy' }),
  );
  const refused = await acquire('killed-elsewhere', holderOf(hostname(), process.pid));
  t.is(refused.kind, 'refused');
  await elsewhere.release();
  // A CI runner or container of this very host name, in another kernel's boot: its PID says nothing here.
  const namesake = held(
    await acquire('killed-namesake', {
      host: hostname(),
      pid: gone,
      since: new Date().toISOString(),
      command: 'deploy',
      scope: 'another-boot pid:[4026531836]',
    }),
  );
  t.is((await acquire('killed-namesake', holderOf(hostname(), process.pid))).kind, 'refused');
  await namesake.release();
});

test("with the run's own clients the lock opens no connection of its own, and its release leaves them open for the run", async (t) => {
  const { inventory, root } = await cluster;
  const shared = new EtcdClients(new HypervisorConnections(), CLIENT_PORT, root);
  t.teardown(() => shared.close());
  const member = inventory.members[0]!;
  const lock = held(await acquire('shared-clients', holderOf(hostname(), process.pid), { clients: shared }));
  t.is(await lock.release(), undefined);
  // The run's client is the one the lock used, still open: it answers after the release.
  const client = await shared.for(member, root());
  t.truthy((await client.maintenance.status({})).version);
  t.is(await keyOf('shared-clients'), undefined, 'released: the key went with its lease');
});
