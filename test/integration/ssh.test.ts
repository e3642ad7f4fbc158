import test from 'ava';
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { userInfo } from 'node:os';
import { Readable } from 'node:stream';
import { connect } from 'node:net';
import { MiB, SSH_STDERR_CAP, SSH_STDOUT_CAP } from '../../tasks/core/limits.ts';
import { CommandTimes } from '../../tasks/remote/command-times.ts';
import { CONNECT_COMMAND, SshConnection, type SshTarget } from '../../tasks/remote/ssh.ts';
import { Tunnel } from '../../tasks/remote/tunnel.ts';
import { HypervisorConnections } from '../../tasks/remote/hypervisors.ts';
import { baseDocument, load } from '../helpers/inventory.ts';
import { run } from '../helpers/exec.ts';
import { Processes } from '../helpers/processes.ts';
import { startSshd, type TestSshd } from '../helpers/sshd.ts';

/** The SSH transport against a real OpenSSH server on loopback. */

const processes = new Processes();
let sshd: TestSshd;

test.before(async () => {
  sshd = await startSshd(processes, 22222);
});
test.after.always(() => processes.stopAll());

function target(knownHosts: string, trustOnFirstUse = false): SshTarget {
  return {
    label: 'hypervisor test',
    host: '127.0.0.1',
    port: sshd.port,
    user: userInfo().username,
    privateKeyPath: sshd.clientKey,
    knownHostsPath: knownHosts,
    trustOnFirstUse,
  };
}

function knownHostsFile(name: string, content: string): string {
  const path = join(sshd.dir, name);
  writeFileSync(path, content);
  return path;
}

test('each command is timed, start to exit, under what its caller says it does: the slowest first (--profile)', async (t) => {
  const commandTimes = new CommandTimes();
  const connection = await SshConnection.open({ ...target(knownHostsFile('known_hosts_timed', sshd.knownHostsLine)), commandTimes });
  try {
    await connection.run(['sleep', '0.4'], { describe: 'systemctl daemon-reload' });
    await connection.run(['true']);
    t.is((await connection.exec(['sh', '-c', 'exit 3'])).code, 3);
    const times = commandTimes.slowest(10);
    t.deepEqual(times.map((time) => time.command).sort(), ["sh -c 'exit 3'", 'systemctl daemon-reload', 'true']);
    t.true(times.every((time) => time.host === 'hypervisor test'));
    const reload = times.find((time) => time.command === 'systemctl daemon-reload')!;
    t.true(reload.ms >= 400, `${reload.ms} ms`);
    t.deepEqual(
      times.map((time) => time.ms),
      times.map((time) => time.ms).sort((a, b) => b - a),
      'slowest first',
    );
    t.is(commandTimes.slowest(1).length, 1);
  } finally {
    connection.close();
  }
});

test('runs commands from argument arrays, passes stdin, reports exit codes, on one reused connection', async (t) => {
  const connection = await SshConnection.open(target(knownHostsFile('known_hosts_ok', sshd.knownHostsLine)));
  try {
    const nasty = ["it's", '$(id)', 'a b', '*', ''];
    const echoed = await connection.run(['printf', '%s\\n', ...nasty]);
    t.deepEqual(echoed.split('\n').slice(0, -1), nasty);
    t.is(await connection.run(['cat'], { stdin: 'secret via stdin' }), 'secret via stdin');
    // A stream (a snapshot) goes through whole, piped with backpressure; a failing stream fails the command.
    const upload = randomBytes(8 * 1024 * 1024 + 3);
    const streamed = await connection.run(['sha256sum'], {
      stdin: Readable.from(
        (async function* () {
          for (let offset = 0; offset < upload.length; offset += 100_000) yield upload.subarray(offset, offset + 100_000);
        })(),
      ),
    });
    t.is(streamed.split(' ')[0], createHash('sha256').update(upload).digest('hex'));
    const broken = Readable.from(
      (async function* () {
        yield Buffer.from('part of it');
        throw new Error('disk read error');
      })(),
    );
    await t.throwsAsync(connection.run(['cat'], { stdin: broken }), {
      message: 'hypervisor test: the input of cat failed: disk read error',
    });
    const failed = await connection.exec(['sh', '-c', 'echo oops >&2; exit 3']);
    t.is(failed.code, 3);
    t.is(failed.stderr, 'oops\n');
    await t.throwsAsync(connection.run(['sh', '-c', 'echo first line >&2; exit 4']), {
      message: 'hypervisor test: sh failed (exit 4): first line',
    });
    // More commands than channels at once: the connection queues them rather than failing.
    const many = await Promise.all(Array.from({ length: 25 }, (_, i) => connection.run(['echo', String(i)])));
    t.deepEqual(
      many.map((out) => Number(out.trim())),
      Array.from({ length: 25 }, (_, i) => i),
    );
    const started = performance.now();
    for (let i = 0; i < 20; i++) await connection.run(['true']);
    t.log(`sequential round-trip on the open connection: ${((performance.now() - started) / 20).toFixed(1)} ms per command`);
  } finally {
    connection.close();
  }
});

test('an interactive command answers each line as it comes, and gives its channel back when it ends', async (t) => {
  const connection = await SshConnection.open(target(knownHostsFile('known_hosts_interactive', sshd.knownHostsLine)));
  try {
    // A line-by-line shell loop: what it answers arrives before its input ends.
    const channel = await connection.interactive(['sh', '-c', 'while IFS= read -r line; do printf "got %s\\n" "$line"; done']);
    const answer = (line: string) =>
      new Promise<string>((resolve) => {
        channel.once('data', (chunk: Buffer) => resolve(chunk.toString('utf8')));
        channel.write(`${line}\n`);
      });
    t.is(await answer("it's one"), "got it's one\n");
    t.is(await answer('two'), 'got two\n');
    // All the connection's channels but the interactive one's still run commands; once it ends, all do.
    t.deepEqual((await Promise.all(Array.from({ length: 10 }, (_, i) => connection.run(['echo', String(i)])))).length, 10);
    channel.end();
    await new Promise((resolve) => channel.once('close', resolve));
    t.is(await connection.run(['echo', 'after']), 'after\n');
  } finally {
    connection.close();
  }
});

test('a command printing past a cap fails at once, naming the command and the cap; up to the cap is read whole, and the connection goes on', async (t) => {
  const connection = await SshConnection.open(target(knownHostsFile('known_hosts_caps', sshd.knownHostsLine)));
  try {
    t.is(SSH_STDOUT_CAP.bytes, 16 * MiB);
    // The command goes on after its output, reading an input that never ends: the cap does not wait for it
    // (left to its timeout, it would fail saying so). Closing the channel ends its input, and so the command.
    const endless = new Readable({ read() {} });
    const flood = connection.exec(['sh', '-c', `head -c ${SSH_STDOUT_CAP.bytes + 1} /dev/zero; cat`], {
      stdin: endless,
      timeoutMs: 90_000,
    });
    await t.throwsAsync(flood, {
      message: "hypervisor test: ssh exec `sh -c 'head -c 16777217 /dev/zero; cat'`: stdout exceeded 16 MiB (cap ssh-stdout)",
    });
    endless.destroy();
    await t.throwsAsync(connection.run(['sh', '-c', `head -c ${SSH_STDERR_CAP.bytes + 1} /dev/zero >&2; exit 1`]), {
      message: "hypervisor test: ssh exec `sh -c 'head -c 1048577 /dev/zero >&2; exit 1'`: stderr exceeded 1 MiB (cap ssh-stderr)",
    });
    const full = await connection.exec(['head', '-c', String(SSH_STDOUT_CAP.bytes), '/dev/zero']);
    t.is(full.stdout.length, SSH_STDOUT_CAP.bytes);
    t.is(await connection.run(['echo', 'still here']), 'still here\n');
  } finally {
    connection.close();
  }
});

test('a command asked of a connection that has gone is an error naming the host and the command, for exec and interactive alike', async (t) => {
  const connection = await SshConnection.open(target(knownHostsFile('known_hosts_gone', sshd.knownHostsLine)));
  const closed = new Promise((resolve) => connection.client.once('close', () => resolve(undefined)));
  connection.close();
  await closed;
  // ssh2 throws "Not connected" synchronously here; both ways of starting a command say it the same way.
  await t.throwsAsync(connection.exec(['echo', 'late']), { message: /^hypervisor test: cannot start echo: Not connected/ });
  await t.throwsAsync(connection.interactive(['virsh']), { message: /^hypervisor test: cannot start virsh: Not connected/ });
});

test.serial(
  'a connection cut under a running command (its sshd session killed) is an error naming the host, and the next connection works',
  async (t) => {
    const connection = await SshConnection.open(target(knownHostsFile('known_hosts_cut', sshd.knownHostsLine)));
    try {
      const running = connection.run(['sleep', '30']);
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      // The listening sshd's children are the sessions: this test's connection, the only one open now.
      const master = readFileSync(join(sshd.dir, 'sshd.pid'), 'utf8').trim();
      t.is(run('pkill', ['-KILL', '-P', master]).status, 0);
      await t.throwsAsync(running, {
        message: /^hypervisor test: the SSH connection was lost while sleep ran; the command may or may not have finished/,
      });
    } finally {
      connection.close();
    }
    const again = await SshConnection.open(target(knownHostsFile('known_hosts_cut', sshd.knownHostsLine)));
    t.is(await again.run(['echo', 'back']), 'back\n');
    again.close();
  },
);

test('a way in that closes during the handshake (a hop whose own connection went) fails the connection, naming the host, instead of waiting for ever', async (t) => {
  t.timeout(15_000);
  // Carries the server's banner, then ends: no error, only a close, as a forwarded channel does when its host's connection is cut.
  const closingHop = async () => {
    const socket = connect({ host: '127.0.0.1', port: sshd.port });
    socket.once('data', () => socket.end());
    return socket;
  };
  await t.throwsAsync(SshConnection.open({ ...target(knownHostsFile('known_hosts_hop', sshd.knownHostsLine)), via: closingHop }), {
    message: /^hypervisor test \(.*\): cannot connect: the connection closed during the SSH handshake$/,
  });
});

test('a tunnel asks for its connection for every socket: after the connection dropped, the next socket goes through a new one; none to be had closes the socket', async (t) => {
  const knownHosts = knownHostsFile('known_hosts_tunnel', sshd.knownHostsLine);
  let current: Promise<SshConnection> = SshConnection.open(target(knownHosts));
  // Through the tunnel to the sshd's own port: what comes back first is its banner.
  const tunnel = await Tunnel.open(() => current, '127.0.0.1', sshd.port);
  const firstLine = () =>
    new Promise<string>((resolve) => {
      const socket = connect({ host: '127.0.0.1', port: tunnel.localPort });
      socket.once('data', (data) => {
        socket.destroy();
        resolve(data.toString().split('\r\n')[0]!);
      });
      socket.once('close', () => resolve('(closed)'));
      socket.once('error', () => resolve('(error)'));
    });
  try {
    t.regex(await firstLine(), /^SSH-2\.0-OpenSSH/);
    (await current).close();
    current = SshConnection.open(target(knownHosts));
    t.regex(await firstLine(), /^SSH-2\.0-OpenSSH/, 'a new connection carries the next socket');
    (await current).close();
    current = Promise.reject(new Error('hypervisor test: cannot connect'));
    current.catch(() => undefined);
    t.is(await firstLine(), '(closed)');
  } finally {
    tunnel.close();
  }
});

test('an unknown host key is refused with a hint; trust on first use records it', async (t) => {
  const empty = knownHostsFile('known_hosts_empty', '');
  await t.throwsAsync(SshConnection.open(target(empty)), {
    message: /refusing to connect: \[127\.0\.0\.1\]:22222 is not in .*known_hosts_empty; add its key \(ssh-keyscan/,
  });
  const connection = await SshConnection.open(target(empty, true));
  connection.close();
  t.is(readFileSync(empty, 'utf8'), sshd.knownHostsLine);
});

test('a changed host key is refused even with trust on first use', async (t) => {
  const other = 'AAAAC3NzaC1lZDI1NTE5AAAAIOJw4WxdS3DqW3ZkM5U3kvpnGw0aKk1n8w5aQ1y3N6pX';
  const wrong = knownHostsFile('known_hosts_wrong', `[127.0.0.1]:${sshd.port} ssh-ed25519 ${other}\n`);
  await t.throwsAsync(SshConnection.open(target(wrong, true)), {
    message: /refusing to connect: the host key of \[127\.0\.0\.1\]:22222 CHANGED/,
  });
});

test('a hashed known_hosts entry is matched', async (t) => {
  const hashed = knownHostsFile('known_hosts_hashed', sshd.knownHostsLine);
  t.is(run('ssh-keygen', ['-H', '-f', hashed]).status, 0);
  t.true(readFileSync(hashed, 'utf8').startsWith('|1|'));
  const connection = await SshConnection.open(target(hashed));
  connection.close();
  t.pass();
});

test('a hypervisor behind a bastion (ssh -J): commands run through the chain; each hop is checked against its own known_hosts and named when it fails', async (t) => {
  const bastion = await startSshd(processes, 22223);
  const inventory = (bastionKnownHosts: string, hypervisorKnownHosts: string) => {
    const doc = baseDocument();
    doc.bastions = {
      edge: {
        address: '127.0.0.1',
        port: bastion.port,
        user: userInfo().username,
        private_key: bastion.clientKey,
        known_hosts: bastionKnownHosts,
      },
    };
    doc.hypervisors = {
      hv: {
        address: '127.0.0.1',
        port: sshd.port,
        user: userInfo().username,
        private_key: sshd.clientKey,
        known_hosts: hypervisorKnownHosts,
        jump: ['edge'],
      },
    };
    return load(doc).hypervisors[0]!;
  };
  const good = inventory(knownHostsFile('kh_bastion', bastion.knownHostsLine), knownHostsFile('kh_hv', sshd.knownHostsLine));
  const connectTimes = new CommandTimes();
  const connections = new HypervisorConnections(connectTimes);
  try {
    t.is(await (await connections.get(good)).run(['echo', 'through the bastion']), 'through the bastion\n');
    // Each hop's connection timed (--profile), the hypervisor's through the bastion's; the command not (virsh's are many).
    const timed = connectTimes.slowest(10);
    t.deepEqual(timed.map(({ host, command }) => `${host}: ${command}`).sort(), [
      `bastion edge: ${CONNECT_COMMAND}`,
      `hypervisor hv: ${CONNECT_COMMAND}`,
    ]);
    // The bastion's sshd saw the forwarded channel to the hypervisor's port.
    t.regex(readFileSync(join(bastion.dir, 'sshd.log'), 'utf8'), new RegExp(`Accepted publickey for ${userInfo().username}`));
  } finally {
    await connections.closeAll();
  }
  // The bastion's key pinned as the hypervisor's (and the other way round): each hop refuses.
  const wrongBastion = new HypervisorConnections();
  await t.throwsAsync(
    wrongBastion.get(
      inventory(
        knownHostsFile('kh_bastion_wrong', sshd.knownHostsLine.replace(String(sshd.port), String(bastion.port))),
        knownHostsFile('kh_hv2', sshd.knownHostsLine),
      ),
    ),
    { message: /bastion edge/ },
  );
  await wrongBastion.closeAll();
  const wrongHypervisor = new HypervisorConnections();
  await t.throwsAsync(
    wrongHypervisor.get(
      inventory(
        knownHostsFile('kh_bastion2', bastion.knownHostsLine),
        knownHostsFile('kh_hv_wrong', bastion.knownHostsLine.replace(String(bastion.port), String(sshd.port))),
      ),
    ),
    { message: /hypervisor hv/ },
  );
  await wrongHypervisor.closeAll();
});
