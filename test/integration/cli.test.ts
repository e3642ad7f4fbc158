import test from 'ava';
import { spawn } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { createServer, type Socket } from 'node:net';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { run } from '../helpers/exec.ts';
import type { DeployTiming } from '../../tasks/core/timing.ts';

/**
 * The CLI as an operator runs it, on a copy of inventories/lab.yaml whose hypervisor is unreachable
 * (a closed port): the local steps run for real, the remote ones fail per host with a clear message.
 * The real hypervisor path is proven by test/e2e against the lab.
 */

const ADMIN_PASSWORD = 'console-only-Pa55word';
/** Port 1 (tcpmux): nothing listens there, so connecting is refused at once. */
const UNREACHABLE_PORT = 1;
const UNREACHABLE = /\[etcd-1\] owner: hypervisor lab \(root@127\.0\.0\.1:1\): cannot connect/;

function labCopy(): { dir: string; inventory: string } {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-cli-'));
  const doc = parse(readFileSync('inventories/lab.yaml', 'utf8')) as {
    defaults: Record<string, unknown>;
    hypervisors: { lab: Record<string, unknown> };
  };
  doc.defaults.admin_user_password = ADMIN_PASSWORD;
  doc.hypervisors.lab.port = UNREACHABLE_PORT;
  // A key of its own: the lab's is there only while the lab is up (a key that cannot be read is bad input, exit 2).
  const { privateKey } = generateKeyPairSync('rsa', {
    modulusLength: 2048,
    publicKeyEncoding: { type: 'pkcs1', format: 'pem' },
    privateKeyEncoding: { type: 'pkcs1', format: 'pem' },
  });
  writeFileSync(join(dir, 'client_key'), privateKey, { mode: 0o600 });
  doc.hypervisors.lab.private_key = 'client_key';
  const inventory = join(dir, 'lab.yaml');
  writeFileSync(inventory, stringify(doc));
  return { dir, inventory };
}

const deploy = (args: string[]) => run(process.execPath, ['--import', 'tsx', 'tasks/deploy.ts', ...args]);

function assertNoSecrets(t: { false: (value: boolean, message?: string) => void }, output: string, stateDir: string) {
  t.false(output.includes('PRIVATE KEY'), 'no PEM private key header');
  t.false(output.includes(ADMIN_PASSWORD), 'no password');
  for (const keyFile of ['pki/ca.key', 'pki/members/etcd-1.key', 'pki/clients/root.key', 'ssh/admin.key']) {
    const path = join(stateDir, keyFile);
    if (!existsSync(path)) continue;
    const body = readFileSync(path, 'utf8')
      .split('\n')
      .filter((line) => line && !line.startsWith('-----'));
    t.false(
      body.some((line) => output.includes(line)),
      `no line of ${keyFile}`,
    );
  }
}

test('--help explains the CLI and exits 0', (t) => {
  const result = deploy(['--help']);
  t.is(result.status, 0);
  t.regex(result.stdout, /Usage: etcd-kvm deploy -i INVENTORY/);
  t.regex(result.stdout, /--dry-run/);
  t.regex(result.stdout, /--render-only DIR/);
});

test('a dry-run on a fresh lab inventory shows per-host plans, a line a change, then with --diff their diffs; changes nothing and prints no secret', (t) => {
  const { dir, inventory } = labCopy();
  // Without --diff: the plan in lines, and how many diffs it leaves out.
  const plain = deploy(['-i', inventory, '--check']);
  t.is(plain.status, 1);
  t.regex(plain.stdout, /etcd-1:\n {2}render: would create domain\.xml/);
  t.false(plain.stdout.includes('+++ '), 'no diff without --diff');
  t.regex(plain.stdout, /^\(\d+ of these changes have a diff: --diff shows them\)$/m);
  const result = deploy(['-i', inventory, '--check', '--diff']);
  t.is(result.status, 1, 'the unreachable hypervisor fails the remote steps');
  const output = result.stdout + result.stderr;
  t.regex(output, UNREACHABLE);
  t.regex(output, /localhost:\n {2}pki: would create cluster CA/);
  for (const member of ['etcd-1', 'etcd-2', 'etcd-3']) {
    t.regex(output, new RegExp(`${member}:\\n  render: would create domain\\.xml`));
    t.regex(output, new RegExp(`\\+\\+\\+ ${member}/user-data \\(wanted\\)`));
  }
  t.regex(output, /\+ {6}ETCD_INITIAL_CLUSTER_STATE=new/);
  t.regex(output, /password: <redacted>/);
  t.regex(output, /RECAP \(dry-run: nothing was changed\) in [\d.]+ s\n(.*\n)*etcd-1 +ok=0 {2}changed=1 {2}failed=1 {2}skipped=7/);
  t.false(existsSync(join(dir, '.etcd-kvm')), 'dry-run created no state');
  assertNoSecrets(t, output, join(dir, '.etcd-kvm', 'lab'));
});

test('--render-only writes every file (secrets 0600), then a dry-run sees no change, and --json reports it', (t) => {
  const { dir, inventory } = labCopy();
  const out = join(dir, 'rendered');
  const rendered = deploy(['-i', inventory, '--render-only', out]);
  t.is(rendered.status, 0, rendered.stderr);
  t.deepEqual(readdirSync(out).sort(), ['etcd-1', 'etcd-2', 'etcd-3']);
  for (const member of ['etcd-1', 'etcd-2', 'etcd-3']) {
    t.deepEqual(readdirSync(join(out, member)).sort(), ['domain.xml', 'meta-data', 'network-config', 'user-data']);
    t.is(statSync(join(out, member, 'user-data')).mode & 0o777, 0o600);
    t.true(readFileSync(join(out, member, 'user-data'), 'utf8').includes('BEGIN RSA PRIVATE KEY'), 'the real file carries the key');
  }
  const stateDir = join(dir, '.etcd-kvm', 'lab');
  assertNoSecrets(t, rendered.stdout + rendered.stderr, stateDir);

  // --render-only records nothing for the render step, so a dry-run still plans the records, but the PKI is settled;
  // no formed.json, so the cluster, which nothing answers for, has not formed (pki and formation ok on localhost).
  const apply = deploy(['-i', inventory, '--dry-run', '--json', join(dir, 'report.json')]);
  t.is(apply.status, 1, 'the unreachable hypervisor fails the remote steps');
  t.regex(apply.stdout, /localhost +ok=2 {2}changed=0/);
  t.regex(apply.stdout, /cluster: not formed yet: members start as new/);
  assertNoSecrets(t, apply.stdout + apply.stderr, stateDir);
  const report = JSON.parse(readFileSync(join(dir, 'report.json'), 'utf8')) as {
    dryRun: boolean;
    results: { step: string; host: string; status: string }[];
    timing: DeployTiming;
  };
  t.true(report.dryRun);
  // The process's own CPU beside its wall-clock times: loading its modules alone uses some.
  t.true(report.timing.cpuMs > 0 && report.timing.workMs > 0, JSON.stringify(report.timing));
  // Every millisecond of the work is in a phase, a named part outside them, or the rest, which is said.
  const { phases, outside, unaccountedMs, workMs } = report.timing;
  t.deepEqual(
    outside.map(({ name }) => name),
    ["inventory and the state directory's lock", 'open the state directory', 'close connections'],
  );
  const named = [...phases.map(({ ms }) => ms), ...outside.map(({ ms }) => ms)].reduce((sum, ms) => sum + ms, 0);
  t.true(Math.abs(named + unaccountedMs - workMs) <= phases.length + outside.length + 1, JSON.stringify(report.timing));
  t.true(unaccountedMs >= 0, JSON.stringify(report.timing));
  t.deepEqual(report.results.find((r) => r.step === 'pki')?.status, 'ok');
  t.is(report.results.filter((r) => r.step === 'render' && r.status === 'changed').length, 3);
  assertNoSecrets(t, readFileSync(join(dir, 'report.json'), 'utf8'), stateDir);
});

test('--json -: standard output is the report alone, as JSON; what is said for people goes to standard error; no file named -', (t) => {
  const { dir, inventory } = labCopy();
  // Run from the inventory's directory, where a file named - would land: tsx named by where it is.
  const tsx = import.meta.resolve('tsx');
  const result = run(process.execPath, ['--import', tsx, join(process.cwd(), 'tasks/deploy.ts'), '-i', inventory, '-C', '--json', '-'], {
    cwd: dir,
  });
  t.is(result.status, 1, 'the unreachable hypervisor fails the remote steps');
  const report = JSON.parse(result.stdout) as { dryRun: boolean; inventory: string; results: { step: string; status: string }[] };
  t.true(report.dryRun);
  t.is(report.inventory, inventory);
  t.is(report.results.filter((r) => r.step === 'render' && r.status === 'changed').length, 3);
  t.regex(result.stderr, /RECAP \(dry-run: nothing was changed\)/);
  t.regex(result.stderr, UNREACHABLE);
  t.regex(result.stderr, /✔ pki/);
  t.false(existsSync(join(dir, '-')));
});

test('pki/peer-trust.json lost from a state directory whose peer CA exists: exit 2 naming it and what to do, no stage guessed, nothing written', (t) => {
  const { dir, inventory } = labCopy();
  t.is(deploy(['-i', inventory, '--render-only', join(dir, 'rendered')]).status, 0);
  const record = join(dir, '.etcd-kvm', 'lab', 'pki', 'peer-trust.json');
  rmSync(record);
  const refused = deploy(['-i', inventory, '-C']);
  t.is(refused.status, 2, refused.stdout + refused.stderr);
  t.regex(refused.stderr, /^error: \S+\/pki\/peer-trust\.json is missing, though the peer CA was made: .* none is guessed/m);
  t.regex(refused.stderr, /write \{"stage":"peer-only"\} into it/);
  t.false(refused.stderr.includes('    at '), 'no stack trace');
  t.false(existsSync(record));
});

test('encrypted state: --encrypt seals every key, later runs work only with the passphrase, a wrong one is exit 2 with nothing changed, --decrypt gives back the same keys', (t) => {
  const { dir, inventory } = labCopy();
  const stateDir = join(dir, '.etcd-kvm', 'lab');
  const withPassphrase = (passphrase?: string) => {
    const env = { ...process.env };
    delete env.ETCD_KVM_PASSPHRASE;
    delete env.ETCD_KVM_PASSPHRASE_FILE;
    return passphrase === undefined ? env : { ...env, ETCD_KVM_PASSPHRASE: passphrase };
  };
  const tool = (script: string, args: string[], passphrase?: string) =>
    run(process.execPath, ['--import', 'tsx', `tasks/commands/${script}.ts`, '-i', inventory, ...args], {
      env: withPassphrase(passphrase),
    });
  t.is(tool('deploy', ['--render-only', join(dir, 'rendered')]).status, 0);
  const keyFiles = () =>
    [['pki'], ['pki', 'members'], ['pki', 'peers'], ['pki', 'clients'], ['ssh'], ['ssh', 'hosts']].flatMap((sub) =>
      readdirSync(join(stateDir, ...sub))
        .filter((f) => f.endsWith('.key'))
        .map((f) => join(...sub, f)),
    );
  const snapshot = () => new Map(keyFiles().map((file) => [file, readFileSync(join(stateDir, file), 'utf8')]));
  const plain = snapshot();
  // CA, peer CA, 3 members, 3 members' peer keys, root, the tool's SSH key, 3 host keys.
  t.is(plain.size, 13);

  const encrypted = tool('state', ['--encrypt'], 'state-pass-1');
  t.is(encrypted.status, 0, encrypted.stderr);
  t.regex(encrypted.stdout, /encrypted 13 private key file\(s\)/);
  const grep = run('grep', ['-rl', 'PRIVATE KEY', stateDir]);
  t.is(grep.stdout, '', 'no private key in the clear anywhere in the state directory');
  t.is(statSync(join(stateDir, 'state-encryption.json')).mode & 0o777, 0o600);

  const sealed = snapshot();
  const wrong = tool('deploy', ['--render-only', join(dir, 'rendered-again')], 'not-the-passphrase');
  t.is(wrong.status, 2);
  t.regex(wrong.stderr, /wrong passphrase for the state directory .*; nothing was read or changed/);
  t.false(existsSync(join(dir, 'rendered-again')));
  const missing = tool('client', ['--user', 'root', '--out', join(dir, 'bundle')]);
  t.is(missing.status, 2);
  t.regex(
    missing.stderr,
    /is encrypted: give its passphrase in ETCD_KVM_PASSPHRASE, a file named by ETCD_KVM_PASSPHRASE_FILE, or a terminal/,
  );
  t.deepEqual(snapshot(), sealed, 'nothing changed');

  // With the passphrase: the PKI is settled (nothing re-issued), the bundle carries the key in the clear for its user.
  const rendered = tool('deploy', ['--render-only', join(dir, 'rendered-again')], 'state-pass-1');
  t.is(rendered.status, 0, rendered.stderr);
  t.regex(rendered.stdout, /localhost +ok=1 {2}changed=0/);
  t.true(readFileSync(join(dir, 'rendered-again', 'etcd-1', 'user-data'), 'utf8').includes('BEGIN RSA PRIVATE KEY'));
  t.is(tool('client', ['--user', 'root', '--out', join(dir, 'bundle')], 'state-pass-1').status, 0);
  t.is(readFileSync(join(dir, 'bundle', 'root.key'), 'utf8'), plain.get('pki/clients/root.key') ?? 'missing');
  t.deepEqual(snapshot(), sealed);

  const decrypted = tool('state', ['--decrypt'], 'state-pass-1');
  t.is(decrypted.status, 0, decrypted.stderr);
  t.deepEqual(snapshot(), plain);
  t.false(existsSync(join(stateDir, 'state-encryption.json')));
});

test('bad input exits 2 with every problem listed and no stack trace; nothing is created', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-cli-'));
  const inventory = join(dir, 'bad.yaml');
  copyFileSync('inventories/lab.yaml', inventory);
  writeFileSync(
    inventory,
    readFileSync(inventory, 'utf8').replace('vcpus: 1', 'vcpu: 1').replace('ip: 192.168.150.13', 'ip: 192.168.150.12'),
  );
  const result = deploy(['-i', inventory, '--dry-run']);
  t.is(result.status, 2);
  t.regex(result.stderr, /has 2 problems; nothing was changed/);
  t.regex(result.stderr, /defaults\.vcpu: unknown key — did you mean 'vcpus'\?/);
  t.regex(result.stderr, /members\[2\]\.libvirt_networks\[0\]\.ip \(member etcd-3\): IP 192\.168\.150\.12 is already used/);
  t.false(/\n\s+at /.test(result.stderr), 'no stack trace');
  t.false(existsSync(join(dir, '.etcd-kvm')));

  t.is(deploy(['--dry-run']).status, 2);
  t.is(deploy(['-i', inventory, '--bogus']).status, 2);
  const missing = deploy(['-i', join(dir, 'nope.yaml'), '--dry-run']);
  t.is(missing.status, 2);
  t.regex(missing.stderr, /cannot read inventory .*nope\.yaml: no such file/);
});

test('a login key that cannot be read is bad input before any host is asked: exit 2 at its field, nothing written', (t) => {
  const { dir, inventory } = labCopy();
  rmSync(join(dir, 'client_key'));
  for (const args of [['--dry-run'], [], ['--list-phases']]) {
    const result = deploy(['-i', inventory, ...args]);
    t.is(result.status, 2, args.join(' '));
    t.regex(result.stderr, /hypervisors\.lab\.private_key: cannot read the private key \S+client_key \(no such file\)/);
  }
  t.false(existsSync(join(dir, '.etcd-kvm')));
  t.is(run(process.execPath, ['--import', 'tsx', 'tasks/commands/status.ts', '-i', inventory]).status, 2);
});

test('a real apply against an unreachable hypervisor fails every member with the reason, exits 1, and creates only local state', (t) => {
  const { dir, inventory } = labCopy();
  const result = deploy(['-i', inventory]);
  t.is(result.status, 1);
  const output = result.stdout + result.stderr;
  t.regex(output, UNREACHABLE);
  for (const member of ['etcd-1', 'etcd-2', 'etcd-3'])
    t.regex(output, new RegExp(`${member} +ok=0 {2}changed=1 {2}failed=1 {2}skipped=[57]`));
  // The recap names the host that could not be reached and the members it failed; the placement is warned about first.
  t.regex(
    output,
    /\nUNREACHABLE \(their members failed; the others went on\)\nhypervisor lab at root@127\.0\.0\.1:1 \(etcd-1, etcd-2, etcd-3\): cannot (connect|read private key)/,
  );
  t.regex(output, /^warning: 3 of 3 members are on hypervisor lab \(etcd-1, etcd-2, etcd-3\): losing that host loses quorum/m);
  t.false(/\n\s+at /.test(output), 'no stack trace');
  t.deepEqual(readdirSync(join(dir, '.etcd-kvm', 'lab')).sort(), ['cluster-id.json', 'pki', 'rendered', 'ssh']);
});

test('--limit acts on the named members only and rejects unknown names', (t) => {
  const { inventory } = labCopy();
  const limited = deploy(['-i', inventory, '--dry-run', '--limit', 'etcd-2']);
  t.is(limited.status, 1);
  t.regex(limited.stdout, /etcd-2 +ok=0 {2}changed=1 {2}failed=1/);
  t.false(/^etcd-1 /m.test(limited.stdout));
  const unknown = deploy(['-i', inventory, '--dry-run', '--limit', 'etcd-9']);
  t.is(unknown.status, 2);
  t.regex(unknown.stderr, /--limit names unknown members: etcd-9/);
});

/**
 * One deploy against a "hypervisor" that accepts connections and never answers, so the run waits in its SSH handshake
 * (20 s), sent SIGINT half a second after its cluster phase began. Late when the signal reached it only after its owner
 * step had ended (or after it exited): beside the e2e at nice 19 this test's own process can be starved that long.
 */
async function interruptedWhileWaiting(): Promise<{ code: number | null; output: string; late: boolean }> {
  const sockets: Socket[] = [];
  const silent = createServer((socket) => sockets.push(socket));
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  try {
    const { inventory } = labCopy();
    const doc = parse(readFileSync(inventory, 'utf8')) as { hypervisors: { lab: Record<string, unknown> } };
    doc.hypervisors.lab.port = (silent.address() as { port: number }).port;
    writeFileSync(inventory, stringify(doc));
    const child = spawn(process.execPath, ['--import', 'tsx', 'tasks/deploy.ts', '-i', inventory], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    let signalled = false;
    const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
    const take = (chunk: Buffer) => {
      output += chunk.toString();
      if (!signalled && /❯ cluster/.test(output)) {
        signalled = true;
        setTimeout(() => child.kill('SIGINT'), 500);
      }
    };
    child.stdout!.on('data', take);
    child.stderr!.on('data', take);
    const code = await exited;
    const handled = output.indexOf('SIGINT: finishing');
    const ownerEnded = output.search(/✖ owner:/);
    return { code, output, late: handled < 0 || (ownerEnded >= 0 && ownerEnded < handled) };
  } finally {
    for (const socket of sockets) socket.destroy();
    silent.close();
  }
}

test("SIGINT while a step waits: nothing after it starts, the recap is printed, exit 130 (not listr's 127, not a crash)", async (t) => {
  let run = await interruptedWhileWaiting();
  for (let attempt = 2; attempt <= 3 && run.late; attempt++) {
    t.log(`attempt ${attempt - 1}: the signal came after the owner step had ended (this process was starved); again`);
    run = await interruptedWhileWaiting();
  }
  const { code, output, late } = run;
  t.false(late, `the signal reached the run while it waited, in one of 3 attempts:\n${output}`);
  t.is(code, 130, output);
  t.regex(output, /SIGINT: finishing the change in flight, starting no other/);
  t.regex(output, /owner: skipped, interrupted \(SIGINT\)/);
  t.regex(output, /RECAP in [\d.]+ s/);
  t.false(/\n\s+at /.test(output), 'no stack trace');
});
