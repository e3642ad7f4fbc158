import test from 'ava';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { batched, fileBatch, FILE_BATCH_SCRIPT, SERVICE_FAILED_EXIT, type FileAction } from '../../tasks/guest/file-batch.ts';
import type { GuestAction } from '../../tasks/guest/plan.ts';
import { guestReleaseOf } from '../../tasks/render/etcd-release.ts';
import type { ManagedFile } from '../../tasks/render/guest/desired.ts';

/** The batch script run for real by the host's sh (as the guest's, without sudo), in a directory of its own. */

const gid = spawnSync('id', ['-gn'], { encoding: 'utf8' }).stdout.trim();
const owner = `${userInfo().username}:${gid}`;

const file = (path: string, content: string, mode: number, secret = false): ManagedFile => ({
  path,
  mode,
  owner,
  content,
  display: secret ? '(secret)' : content,
  secret,
});

function run(actions: FileAction[], previous: string, stdin?: Buffer) {
  const batch = fileBatch(actions, previous);
  const result = spawnSync('sh', ['-c', FILE_BATCH_SCRIPT, 'sh', ...batch.args], { input: stdin ?? batch.stdin, encoding: 'utf8' });
  return { ...result, batch };
}

const modeOf = (path: string) => statSync(path).mode & 0o7777;

test('a roll turn in one command: the environment kept, then it and a new file written (UTF-8 too), modes set; no content in argv', (t) => {
  const root = mkdtempSync(join(tmpdir(), 'file-batch-'));
  const env = join(root, 'etc/etcd/etcd.env');
  const key = join(root, 'etc/etcd/tls/server.key');
  spawnSync('mkdir', ['-p', join(root, 'etc/etcd')]);
  writeFileSync(env, 'ETCDKVM_BINARY=/old\n', { mode: 0o640 });
  const actions: FileAction[] = [
    { kind: 'keep-previous', paths: [env] },
    { kind: 'write', file: file(env, 'ETCDKVM_BINARY=/new\nNAME=ètcd\n', 0o644) },
    { kind: 'write', file: file(key, 'PRIVATE KEY\n', 0o400, true) },
  ];
  const { status, stderr, batch } = run(actions, join(root, 'previous'));
  t.is(status, 0, stderr);
  t.is(readFileSync(env, 'utf8'), 'ETCDKVM_BINARY=/new\nNAME=ètcd\n');
  t.is(modeOf(env), 0o644);
  t.is(readFileSync(key, 'utf8'), 'PRIVATE KEY\n');
  t.is(modeOf(key), 0o400);
  // The kept copy is the file as it was, mode included: what a rollback puts back.
  t.is(readFileSync(join(root, 'previous', env), 'utf8'), 'ETCDKVM_BINARY=/old\n');
  t.is(modeOf(join(root, 'previous', env)), 0o640);
  t.false(batch.args.some((arg) => arg.includes('PRIVATE') || arg.includes('/new')));
  t.is(batch.describe, `keep ${env}; write ${env}; write ${key}`);
});

test("directories a write needs are made as cloud-init makes them (0755), so a feature turned on later is readable by its service's user; kept copies' stay private", (t) => {
  const root = mkdtempSync(join(tmpdir(), 'file-batch-'));
  const config = join(root, 'etc/etcd-kvm/agent/backup.json');
  const key = join(root, 'etc/etcd-kvm/agent/agent.key');
  spawnSync('mkdir', ['-p', join(root, 'etc/etcd')]);
  const env = join(root, 'etc/etcd/etcd.env');
  writeFileSync(env, 'OLD\n', { mode: 0o640 });
  const { status, stderr } = run(
    [
      { kind: 'keep-previous', paths: [env] },
      { kind: 'write', file: file(config, '{}\n', 0o644) },
      { kind: 'write', file: file(key, 'PRIVATE KEY\n', 0o400, true) },
    ],
    join(root, 'previous'),
  );
  t.is(status, 0, stderr);
  // Under the batch's umask 077 these were 0700: the agent (user etcd) could not enter them and failed every tick.
  t.is(modeOf(join(root, 'etc/etcd-kvm')), 0o755);
  t.is(modeOf(join(root, 'etc/etcd-kvm/agent')), 0o755);
  t.is(modeOf(config), 0o644);
  t.is(modeOf(key), 0o400);
  t.is(modeOf(join(root, 'previous')), 0o700);
  t.is(modeOf(join(root, 'previous', root, 'etc/etcd')), 0o700);
});

test('attributes alone: owner and mode fixed, the content untouched', (t) => {
  const root = mkdtempSync(join(tmpdir(), 'file-batch-'));
  const path = join(root, 'ca.crt');
  writeFileSync(path, 'CA\n', { mode: 0o600 });
  const { status, stderr } = run([{ kind: 'attributes', file: file(path, 'ignored', 0o644) }], join(root, 'previous'));
  t.is(status, 0, stderr);
  t.is(readFileSync(path, 'utf8'), 'CA\n');
  t.is(modeOf(path), 0o644);
});

test('input that ends too early: the batch fails naming the file, which keeps its content; no temporary file is left', (t) => {
  const root = mkdtempSync(join(tmpdir(), 'file-batch-'));
  const path = join(root, 'etcd.env');
  writeFileSync(path, 'OLD\n');
  const { status, stderr } = run([{ kind: 'write', file: file(path, 'NEW CONTENT\n', 0o644) }], join(root, 'previous'), Buffer.from('NEW'));
  t.is(status, 1);
  t.regex(stderr, new RegExp(`${path}: the input ended before its 12 bytes`));
  t.is(readFileSync(path, 'utf8'), 'OLD\n');
  t.false(spawnSync('ls', [`${path}.etcd-kvm-new`]).status === 0);
});

test('retired files are removed, a dangling enable link and one already gone too; the units are stopped first', (t) => {
  const root = mkdtempSync(join(tmpdir(), 'file-batch-'));
  const key = join(root, 's3-secret-key');
  const link = join(root, 'etcd-kvm-backup.timer');
  writeFileSync(key, 'SECRET\n', { mode: 0o400 });
  spawnSync('ln', ['-s', join(root, 'gone.timer'), link]);
  const actions: FileAction[] = [
    { kind: 'remove', path: key },
    { kind: 'remove', path: link },
    { kind: 'remove', path: join(root, 'never-there') },
  ];
  const { status, stderr } = run(actions, join(root, 'previous'));
  t.is(status, 0, stderr);
  t.deepEqual(spawnSync('ls', ['-A', root], { encoding: 'utf8' }).stdout, '');
  const stop = fileBatch([
    { kind: 'stop', units: ['a.timer', 'a.service'] },
    { kind: 'remove', path: '/etc/systemd/system/a.timer' },
  ]);
  t.deepEqual(stop.args.slice(1), ['stop', 'a.timer', 'stop', 'a.service', 'remove', '/etc/systemd/system/a.timer']);
  t.is(stop.describe, 'systemctl stop a.timer a.service; rm /etc/systemd/system/a.timer');
});

test("a roll's turn: its files, then the service restarted, last, in the same command; a failure says which part failed", (t) => {
  const root = mkdtempSync(join(tmpdir(), 'file-batch-'));
  const env = file(join(root, 'etcd.env'), 'ETCDKVM_BINARY=/new\n', 0o644);
  const turn = (systemctlExit: number, envFile = env) => {
    writeFileSync(join(root, 'asked'), '');
    writeFileSync(env.path, 'ETCDKVM_BINARY=/old\n');
    // systemctl stood in for by a script that says what it was asked and what the file held by then.
    writeFileSync(join(root, 'systemctl'), `#!/bin/sh\necho "$* $(cat ${env.path})" >> ${root}/asked\nexit ${systemctlExit}\n`, {
      mode: 0o755,
    });
    const batch = fileBatch(
      [
        { kind: 'keep-previous', paths: [env.path] },
        { kind: 'write', file: envFile },
      ],
      join(root, 'previous'),
      {
        verb: 'restart',
        unit: 'etcd.service',
      },
    );
    const result = spawnSync('sh', ['-c', FILE_BATCH_SCRIPT, 'sh', ...batch.args], {
      input: batch.stdin,
      encoding: 'utf8',
      env: { ...process.env, PATH: `${root}:${process.env.PATH}` },
    });
    return { status: result.status, stderr: result.stderr, asked: readFileSync(join(root, 'asked'), 'utf8'), batch };
  };
  const ok = turn(0);
  t.is(ok.status, 0, ok.stderr);
  t.is(ok.asked, 'restart -- etcd.service ETCDKVM_BINARY=/new\n');
  t.is(readFileSync(join(root, 'previous', env.path), 'utf8'), 'ETCDKVM_BINARY=/old\n');
  t.is(ok.batch.describe, `keep ${env.path}; write ${env.path}; systemctl restart etcd.service`);
  // The service failed, the files done: the one exit a roll rolls back on.
  t.is(turn(1).status, SERVICE_FAILED_EXIT);
  // A file that could not be written (its directory is a file): another exit, and systemctl never asked.
  const blocked = turn(0, file(join(root, 'etcd.env', 'inside'), 'X\n', 0o644));
  t.not(blocked.status, 0);
  t.not(blocked.status, SERVICE_FAILED_EXIT);
  t.is(blocked.asked, '');
});

test('runs of file actions are gathered, in order; an install or a restart stays on its own', (t) => {
  const write: GuestAction = { kind: 'write', file: file('/a', 'a', 0o644) };
  const reload: GuestAction = { kind: 'daemon-reload' };
  const install: GuestAction = { kind: 'install-release', release: guestReleaseOf({ major: 3, minor: 5, patch: 16 }) };
  const restart: GuestAction = { kind: 'restart', service: { unit: 'etcd.service', onChange: 'restart' }, why: 'its files changed' };
  const keep: GuestAction = { kind: 'keep-previous', paths: ['/a'] };
  t.deepEqual(batched<GuestAction>([install, keep, write, reload, restart]), [install, [keep, write, reload], restart]);
  t.deepEqual(batched<GuestAction>([write, restart, reload]), [[write], restart, [reload]]);
  t.deepEqual(batched<GuestAction>([]), []);
});

test("a unit enabled by a batch: without Debian's SysV sync and without enable's own reload (the batch reloads when files changed)", (t) => {
  const root = mkdtempSync(join(tmpdir(), 'file-batch-'));
  writeFileSync(join(root, 'systemctl'), `#!/bin/sh\necho "SYSTEMCTL_SKIP_SYSV=\${SYSTEMCTL_SKIP_SYSV:-} $*" >> ${root}/asked\n`, {
    mode: 0o755,
  });
  const batch = fileBatch([{ kind: 'daemon-reload' }, { kind: 'enable', unit: 'etcd-kvm-backup.timer' }], join(root, 'previous'));
  const result = spawnSync('sh', ['-c', FILE_BATCH_SCRIPT, 'sh', ...batch.args], {
    input: batch.stdin,
    encoding: 'utf8',
    env: { ...process.env, PATH: `${root}:${process.env.PATH}` },
  });
  t.is(result.status, 0, result.stderr);
  t.is(
    readFileSync(join(root, 'asked'), 'utf8'),
    'SYSTEMCTL_SKIP_SYSV= daemon-reload\nSYSTEMCTL_SKIP_SYSV=1 enable --no-reload -- etcd-kvm-backup.timer\n',
  );
  t.is(batch.describe, 'systemctl daemon-reload; systemctl enable etcd-kvm-backup.timer');
  rmSync(root, { recursive: true, force: true });
});
