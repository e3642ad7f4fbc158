import test from 'ava';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { EtcdAuthenticationFailedError, EtcdError, GRPCDeadlineExceededError, GRPCUnavailableError } from 'etcd3';
import { LockHeldError } from '../../tasks/core/lock.ts';
import { Runner } from '../../tasks/core/runner.ts';
import { runDeploy, type PipelineOptions } from '../../tasks/deploy/pipeline.ts';
import { acquireAfterLook, ClusterRunLockHeldError, unlessBusy } from '../../tasks/etcd/run-lock.ts';
import {
  decideLock,
  holderRecord,
  parseHolderRecord,
  thisRun,
  type LockAnswer,
  type LockDecision,
} from '../../tasks/etcd/run-lock-decision.ts';
import { acquireClusterRunLock, type Acquisition, type HeldRunLock } from '../../tasks/etcd/run-lock-lease.ts';
import { runLockKey } from '../../tasks/inventory/lock-keys.ts';
import { HypervisorConnections } from '../../tasks/remote/hypervisors.ts';
import { baseDocument, load } from '../helpers/inventory.ts';
import { silentMember } from '../helpers/silent-etcd.ts';

/**
 * The cluster's run lock (etcd/run-lock.ts): what a run does with etcd's answer to the lock's
 * transaction. Held when the key was created; refused, naming the holder, when it exists; only the
 * state directory's lock when etcd did not answer or would not take it.
 */

const KEY = runLockKey('lab');
/** A held lock as acquireAfterLook sees it: passed on, never used. */
type HeldLock = Pick<HeldRunLock, 'key'>;
const holder = { host: 'operator-b.example', pid: 4242, since: '2026-03-01T10:00:00.000Z', command: 'deploy -i inventories/lab.yaml' };

/** The decision, if it is of `kind`; otherwise the test fails, showing what it was. */
function expectKind<K extends LockDecision['kind']>(decision: LockDecision, kind: K): Extract<LockDecision, { kind: K }> {
  if (decision.kind !== kind) throw new Error(`expected ${kind}, got ${JSON.stringify(decision)}`);
  return decision as Extract<LockDecision, { kind: K }>;
}

const refusedBy = (answer: LockAnswer, ttlS?: number) => expectKind(decideLock(answer, KEY, ttlS), 'refused');

test('the key created by this run: the lock is held', (t) => {
  t.deepEqual(decideLock({ created: true }, KEY), { kind: 'acquired' });
});

test("the key exists on a lease: refused, naming the holder's command, host, PID and start, and saying it expires by itself within the TTL", (t) => {
  const decision = refusedBy({ created: false, value: holderRecord(holder), lease: '7587883712541961219' }, 30);
  t.deepEqual(decision.holder, holder);
  t.is(
    decision.message,
    "another run holds the cluster's run lock in etcd (etcd-kvm/run-lock/lab): deploy -i inventories/lab.yaml by PID 4242 on operator-b.example since 2026-03-01T10:00:00.000Z. " +
      'Wait for it to finish; if that run is gone, the lock expires by itself within 30 s.',
  );
});

test('the key is free but its epoch moved since the run looked: refused, naming the run that took it, saying nothing was changed', (t) => {
  const decision = refusedBy({ created: false, overtakenBy: holderRecord(holder) });
  t.deepEqual(decision.holder, holder);
  t.is(
    decision.message,
    "another run took the cluster's run lock in etcd (etcd-kvm/run-lock/lab) after this run read the cluster: deploy -i inventories/lab.yaml by PID 4242 on operator-b.example since 2026-03-01T10:00:00.000Z. " +
      'It may have changed what this run read, so this run changed nothing; run it again.',
  );
});

test('a key without a lease (put by hand) never expires: the refusal says how to remove it', (t) => {
  t.regex(
    refusedBy({ created: false, value: holderRecord(holder), lease: '0' }).message,
    /PID 4242 on operator-b\.example.*the key has no lease and never expires: if no run is going, remove it \(etcdctl del etcd-kvm\/run-lock\/lab\)/,
  );
});

test("a value that names no run still refuses, showing it without the terminal's control sequences", (t) => {
  const decision = refusedBy({ created: false, value: 'held by \u001b[31mmallory\u001b[0m', lease: '42' });
  t.is(decision.holder, undefined);
  t.regex(decision.message, /a holder this version cannot read \(held by mallory\)/);
});

test("a holder's fields are shown without control sequences: the record comes from etcd, printed on another operator's terminal", (t) => {
  const decision = refusedBy({
    created: false,
    value: holderRecord({ ...holder, host: 'evil\u001b]0;pwned\u0007host', command: 'deploy\r\u001b[2K' }),
    lease: '42',
  });
  t.regex(decision.message, /: deploy by PID 4242 on evilhost since /);
});

const localOnly: [string, unknown, RegExp][] = [
  [
    'no member answers (each member refused the connection)',
    new AggregateError([
      new GRPCUnavailableError('14 UNAVAILABLE: No connection established. Last error: connect ECONNREFUSED 127.0.0.1:2379'),
    ]),
    /^etcd does not answer \(14 UNAVAILABLE: No connection established.*ECONNREFUSED/,
  ],
  ['no member answers in time', new Error('etcd: no answer within 5 s'), /^etcd does not answer \(etcd: no answer within 5 s\)$/],
  [
    'the transaction timed out',
    new GRPCDeadlineExceededError('4 DEADLINE_EXCEEDED: Deadline exceeded'),
    /^etcd does not answer \(4 DEADLINE_EXCEEDED/,
  ],
  [
    'password mode before the auth step: root cannot log in yet',
    new AggregateError([
      new EtcdError('3 INVALID_ARGUMENT: etcdserver: authentication is not enabled'),
      new GRPCUnavailableError('14 UNAVAILABLE'),
    ]),
    /^etcd has no authentication enabled yet, so root cannot take its lock$/,
  ],
  [
    "root's password is refused",
    new EtcdAuthenticationFailedError('etcdserver: authentication failed, invalid user ID or password'),
    /^etcd answers but would not take the lock \(etcdserver: authentication failed, invalid user ID or password\)$/,
  ],
];

for (const [title, error, why] of localOnly) {
  test(`local lock only: ${title}`, (t) => {
    t.regex(expectKind(decideLock({ failed: error }, KEY), 'local-only').why, why);
  });
}

test("the holder record is this run's host, PID, start and command, and reads back", (t) => {
  const mine = thisRun('maintain --defrag');
  t.is(mine.host, hostname());
  t.is(mine.pid, process.pid);
  t.true(Math.abs(Date.parse(mine.since) - Date.now()) < 5_000);
  t.deepEqual(parseHolderRecord(holderRecord(mine)), mine);
  t.is(parseHolderRecord('{"host":"h","pid":"1"}'), undefined);
  t.is(parseHolderRecord('not json'), undefined);
});

test('after an answered look the lock is asked again while etcd does not answer, never given up for the local lock alone: held, refused at once, or refused at the deadline', async (t) => {
  const lock: HeldLock = { key: 'held' };
  const unanswered: Acquisition = { kind: 'local-only', why: 'etcd does not answer (etcdserver: leader changed)' };
  let asked = 0;
  const answers: Acquisition<HeldLock>[] = [unanswered, unanswered, { kind: 'acquired', lock }];
  t.is(await acquireAfterLook(async () => answers[asked++]!, { patienceMs: 5_000, pauseMs: 1 }), lock);
  t.is(asked, 3);

  asked = 0;
  const held: Acquisition = { kind: 'refused', holder: undefined, message: "another run holds the cluster's run lock" };
  await t.throwsAsync(
    acquireAfterLook(
      async () => {
        asked++;
        return held;
      },
      { patienceMs: 5_000, pauseMs: 1 },
    ),
    { instanceOf: ClusterRunLockHeldError, message: "another run holds the cluster's run lock" },
  );
  t.is(asked, 1, 'a refusal is not asked again');

  const refused = await t.throwsAsync(
    acquireAfterLook(async () => unanswered, { patienceMs: 30, pauseMs: 5 }),
    {
      instanceOf: ClusterRunLockHeldError,
    },
  );
  t.is(
    refused?.message,
    "etcd answered this run's look at the cluster's run lock but not its acquisition for 0 s (etcd does not answer (etcdserver: leader changed)); another run may be changing the cluster, so this run changed nothing: run it again",
  );
});

test("a member's scheduled defragmentation under way: not now, naming the member and its lock; waited for, said once, refused at the deadline", async (t) => {
  const busy = expectKind(decideLock({ created: false, defragBy: 'etcd-2' }, KEY), 'busy');
  t.is(busy.why, 'etcd-2 is defragmenting its database on its schedule (it holds etcd-kvm/defrag/lock)');
  // Its value comes from etcd: shown without a terminal's control sequences.
  t.false(expectKind(decideLock({ created: false, defragBy: 'etcd-2\u001b[2J' }, KEY), 'busy').why.includes('\u001b'));

  const lock: HeldLock = { key: 'held' };
  const said: string[] = [];
  let asked = 0;
  const answers: Acquisition<HeldLock>[] = [busy, busy, { kind: 'acquired', lock }];
  t.is(
    await acquireAfterLook(async () => answers[asked++]!, {
      patienceMs: 5_000,
      pauseMs: 1,
      busy: { pauseMs: 1, say: (line) => said.push(line) },
    }),
    lock,
  );
  t.is(asked, 3);
  t.deepEqual(said, ['lock: waiting: etcd-2 is defragmenting its database on its schedule (it holds etcd-kvm/defrag/lock)']);

  const refused = await t.throwsAsync(
    unlessBusy(async () => busy, { patienceMs: 30, pauseMs: 5 }),
    { instanceOf: ClusterRunLockHeldError },
  );
  t.is(
    refused?.message,
    'etcd-2 is defragmenting its database on its schedule (it holds etcd-kvm/defrag/lock), still after 0 s: this run changed nothing; run it again once it has ended',
  );
  // Whatever else comes is the caller's: a refusal or the local lock alone, at once.
  const unanswered: Acquisition = { kind: 'local-only', why: 'etcd does not answer' };
  t.is(await unlessBusy(async () => unanswered), unanswered);
});

test('a refusal is a LockHeldError: the CLIs exit 1 with its message, as for the lock file', (t) => {
  t.true(new ClusterRunLockHeldError('held') instanceof LockHeldError);
});

// Serial (before the concurrent tests): the pki step of the runDeploy test below would hold the event loop past the time bounds.
test.serial('a member that takes calls and never answers leaves the run to its local lock after the answer time', async (t) => {
  const { server, port, caCert, dir } = await silentMember();
  t.teardown(() => {
    server.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const member = { ...load(baseDocument()).members[0]!, reach: 'direct' as const, etcdIp: '127.0.0.1' };
  const started = performance.now();
  const acquired = await acquireClusterRunLock({
    connections: new HypervisorConnections(),
    clientPort: port,
    identity: () => ({ label: 'anonymous', caCert }),
    members: [member],
    cluster: 'lab',
    holder,
    answerMs: 1_000,
    onLost: () => t.fail('nothing was held'),
  });
  const took = performance.now() - started;
  t.deepEqual(acquired, { kind: 'local-only', why: 'etcd does not answer (etcd: no answer within 1 s)' });
  t.true(took < 3_000, `took ${Math.round(took)} ms`);
});

test.serial(
  'a first deploy (no CA or root certificate yet) is the local lock only at once, without reaching for a hypervisor',
  async (t) => {
    const connections = new HypervisorConnections();
    const started = performance.now();
    const acquired = await acquireClusterRunLock({
      connections,
      clientPort: 2379,
      identity: () => ({ label: 'root certificate', caCert: '', cert: '' }),
      members: load(baseDocument()).members,
      cluster: 'lab',
      holder,
      onLost: () => t.fail('nothing was held'),
    });
    t.deepEqual(acquired, {
      kind: 'local-only',
      why: 'no CA or root certificate in the state directory yet (a first deploy): etcd cannot be asked',
    });
    t.true(performance.now() - started < 1_000);
    t.is(connections.unreachable.size, 0);
  },
);

test('runDeploy looks at the lock before its first phase and takes it before its first change: refused at the look, nothing runs; refused at the change, nothing changes; a run with no change never takes it', async (t) => {
  const stateDir = mkdtempSync(join(tmpdir(), 'etcd-kvm-hold-'));
  const out = mkdtempSync(join(tmpdir(), 'etcd-kvm-hold-out-'));
  t.teardown(() => {
    for (const dir of [stateDir, out]) rmSync(dir, { recursive: true, force: true });
  });
  const inventory = { ...load(baseDocument()), stateDir };
  // --render-only: the pki and render phases, nothing remote; the pki step is the run's first change.
  const options = { dryRun: false, renderOnly: out };

  const refused = new ClusterRunLockHeldError("another run holds the cluster's run lock");
  const stopped = new Runner({ dryRun: false, renderer: 'silent' });
  await t.throwsAsync(runDeploy(inventory, stopped, { ...options, hold: async () => Promise.reject(refused) }), { is: refused });
  t.deepEqual(stopped.results, []);
  t.false(existsSync(join(stateDir, 'pki')), 'no certificate made');

  const overtaken = new ClusterRunLockHeldError("another run took the cluster's run lock in etcd after this run read the cluster");
  const gated = new Runner({ dryRun: false, renderer: 'silent' });
  await runDeploy(inventory, gated, {
    ...options,
    hold: async () => ({ beforeFirstChange: () => Promise.reject(overtaken), release: async () => undefined }),
  });
  t.deepEqual(
    gated.results.map(({ step, status, error }) => ({ step, status, error })),
    [{ step: 'pki', status: 'failed', error: overtaken.message }],
  );
  t.false(existsSync(join(stateDir, 'pki')), 'no certificate made');

  const events: string[] = [];
  const gate =
    (runner: Runner): PipelineOptions['hold'] =>
    async ({ identities }) => {
      events.push(`looked after ${runner.results.length} results, root as ${identities.root().label}`);
      return {
        beforeFirstChange: async () =>
          void events.push(`taken after ${runner.results.length} results, pki: ${existsSync(join(stateDir, 'pki'))}`),
        release: async () => void events.push(`released after ${runner.results.length} results`),
      };
    };
  const first = new Runner({ dryRun: false, renderer: 'silent' });
  await runDeploy(inventory, first, { ...options, hold: gate(first) });
  t.false(first.failed);
  t.deepEqual(events, [
    'looked after 0 results, root as root certificate',
    'taken after 0 results, pki: false',
    `released after ${first.results.length} results`,
  ]);

  events.length = 0;
  const again = new Runner({ dryRun: false, renderer: 'silent' });
  await runDeploy(inventory, again, { ...options, hold: gate(again) });
  t.deepEqual(
    again.results.filter((result) => result.status !== 'ok'),
    [],
    'nothing to change the second time',
  );
  t.deepEqual(events, ['looked after 0 results, root as root certificate', `released after ${again.results.length} results`]);
});
