import { readFileSync } from 'node:fs';
import { connect as tcpConnect, type Socket } from 'node:net';
import { Readable, type Duplex } from 'node:stream';
import { Client, type ClientChannel, type ConnectConfig } from 'ssh2';
import type { CommandTimes } from './command-times.ts';
import { type CapExceededError, CappedChunks, commandInBrief, SSH_STDERR_CAP, SSH_STDOUT_CAP } from '../core/limits.ts';
import { commandLine } from '../core/shell.ts';
import { verifyHostKey } from './known-hosts.ts';

/**
 * One SSH connection per host, opened once and shared by every step: commands run as channels on it,
 * at most MAX_CHANNELS at a time (OpenSSH's MaxSessions is 10 by default).
 */

export const MAX_CHANNELS = 8;

/**
 * No remote command runs unbounded: a hung libvirtd or guest would hold a channel and the run
 * forever. Ten minutes is far above anything measured under emulation (a domain definition took
 * ~88 s at worst, a first boot ~3 min, which the callers that wait for it bound themselves).
 */
export const DEFAULT_COMMAND_TIMEOUT_MS = 600_000;

export interface SshTarget {
  /** Who this is, for messages: "hypervisor lab". */
  label: string;
  host: string;
  port: number;
  user: string;
  /** A private key file; without one, the ssh-agent in SSH_AUTH_SOCK. */
  privateKeyPath?: string;
  /** The private key itself, asked for when connecting (one the tool keeps, maybe decrypted in memory only). */
  privateKey?: () => string;
  knownHostsPath: string;
  trustOnFirstUse: boolean;
  connectTimeoutMs?: number;
  /** A stream to speak SSH over instead of a TCP connection (a channel forwarded by another host). */
  via?: () => Promise<Duplex>;
  /** Where each command's time is recorded (--profile lists the slowest). */
  commandTimes?: CommandTimes;
  /** Where the connection's own time is recorded, from the first hop's socket to the login (--profile). */
  connectTimes?: CommandTimes;
}

/** What a command reads on stdin: text or bytes, or a stream for uploads too large to hold. */
export type Stdin = string | Buffer | Readable;

export interface ExecResult {
  command: string;
  code: number;
  stdout: string;
  stderr: string;
}

export class SshError extends Error {}

/** How a connection's own time is named among the commands' (--profile). */
export const CONNECT_COMMAND = 'SSH connection: handshake and login (its hops included)';

/** How a connection names its host in every message: "hypervisor lab (root@127.0.0.1:2222)". */
export const whereOf = (target: Pick<SshTarget, 'label' | 'user' | 'host' | 'port'>): string =>
  `${target.label} (${target.user}@${target.host}:${target.port})`;

/** A counting semaphore: bounds concurrent channels on one connection. */
class Slots {
  #free: number;
  readonly #waiting: (() => void)[] = [];

  constructor(count: number) {
    this.#free = count;
  }

  async use<T>(work: () => Promise<T>): Promise<T> {
    if (this.#free > 0) this.#free--;
    else await new Promise<void>((resolve) => this.#waiting.push(resolve));
    try {
      return await work();
    } finally {
      const next = this.#waiting.shift();
      if (next) next();
      else this.#free++;
    }
  }
}

export class SshConnection {
  readonly #slots = new Slots(MAX_CHANNELS);

  private constructor(
    readonly target: SshTarget,
    readonly client: Client,
  ) {}

  static async open(target: SshTarget): Promise<SshConnection> {
    const started = performance.now();
    const where = whereOf(target);
    let refusal: string | undefined;
    const config: ConnectConfig = {
      username: target.user,
      readyTimeout: target.connectTimeoutMs ?? 20_000,
      keepaliveInterval: 15_000,
      hostVerifier: (key: Buffer) => {
        const verdict = verifyHostKey(target.knownHostsPath, target.host, target.port, key, target.trustOnFirstUse);
        if (!verdict.ok) refusal = verdict.reason;
        return verdict.ok;
      },
    };
    if (target.privateKey) {
      config.privateKey = target.privateKey();
    } else if (target.privateKeyPath) {
      try {
        config.privateKey = readFileSync(target.privateKeyPath);
      } catch (error) {
        throw new SshError(`${where}: cannot read private key ${target.privateKeyPath}: ${(error as NodeJS.ErrnoException).code ?? error}`);
      }
    } else if (process.env.SSH_AUTH_SOCK) {
      config.agent = process.env.SSH_AUTH_SOCK;
    } else {
      throw new SshError(`${where}: no private_key set and no ssh-agent (SSH_AUTH_SOCK) to ask`);
    }
    // ssh2 leaves Nagle on: every request/response then stalls ~40 ms even on loopback.
    // The socket is opened only now, after every local check that can fail, so it always has its listeners.
    let socket: Duplex;
    if (target.via) {
      socket = await target.via().catch((error: Error) => {
        // The hop's own failure (its host unreachable) is passed on as it is: it says which host.
        throw error instanceof SshError ? error : new SshError(`${where}: cannot connect: ${error.message}`);
      });
    } else {
      const tcp: Socket = tcpConnect({ host: target.host, port: target.port });
      tcp.setNoDelay(true);
      socket = tcp;
    }
    config.sock = socket as Socket;
    const client = new Client();
    await new Promise<void>((resolve, reject) => {
      client.once('ready', resolve);
      // Every error, not only the first: ssh2 emits more after a failed handshake or a reset connection
      // (a second 'protocol' error once the socket closes), and an 'error' without a listener ends the
      // process. After the first the promise is settled; commands in flight learn of it from their channels.
      client.on('error', (error: Error) => {
        socket.destroy();
        reject(new SshError(`${where}: ${refusal ? `refusing to connect: ${refusal}` : `cannot connect: ${error.message}`}`));
      });
      socket.once('error', (error) => reject(new SshError(`${where}: cannot connect: ${error.message}`)));
      // A connection closed without an error before the handshake ends (the hop's forwarded channel gone
      // with its host's connection) only says 'close': without this the open would wait forever.
      client.once('close', () => reject(new SshError(`${where}: cannot connect: the connection closed during the SSH handshake`)));
      client.connect(config);
    });
    target.connectTimes?.record({ host: target.label, command: CONNECT_COMMAND, ms: performance.now() - started });
    return new SshConnection(target, client);
  }

  /** A channel from this host to host:port (ssh -W): the way to a member, or to the next hop of a jump chain. */
  forward(host: string, port: number): Promise<Duplex> {
    return new Promise((resolve, reject) => {
      const failed = (error: Error) => reject(new SshError(`${this.target.label} cannot reach ${host}:${port}: ${error.message}`));
      try {
        this.client.forwardOut('127.0.0.1', 0, host, port, (error, channel) => (error ? failed(error) : resolve(channel)));
      } catch (error) {
        // ssh2 throws "Not connected" when the connection has already gone.
        failed(error as Error);
      }
    });
  }

  /** Runs a command built from an argument array; `stdin` carries secrets and uploads, never argv. */
  exec(argv: readonly string[], options: { stdin?: Stdin; timeoutMs?: number; describe?: string } = {}): Promise<ExecResult> {
    const started = performance.now();
    const running = this.#run(argv, options);
    const times = this.target.commandTimes;
    if (times) {
      const command = options.describe ?? commandInBrief(argv);
      void running.then(
        () => times.record({ host: this.target.label, command, ms: performance.now() - started }),
        () => undefined,
      );
    }
    return running;
  }

  #run(argv: readonly string[], options: { stdin?: Stdin; timeoutMs?: number }): Promise<ExecResult> {
    const command = commandLine(argv);
    return this.#slots.use(
      () =>
        new Promise<ExecResult>((resolve, reject) => {
          // From the request on: a connection that died without ssh2 noticing never answers the channel request.
          const timeoutMs = options.timeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS;
          let opened: ClientChannel | undefined;
          let timedOut = false;
          const timer = setTimeout(() => {
            timedOut = true;
            opened?.close();
            reject(new SshError(`${this.target.label}: ${argv[0]} did not finish within ${Math.round(timeoutMs / 1000)} s`));
          }, timeoutMs);
          const notStarted = (error: SshError) => {
            clearTimeout(timer);
            reject(error);
          };
          this.#start(
            argv,
            (channel) => {
              // Opened only after the timeout: nobody waits for it any more.
              if (timedOut) return channel.close();
              opened = channel;
              // Bounded: a compromised host could print without end, and all of it would be held here.
              const what = (stream: string) => `${this.target.label}: ssh exec \`${commandInBrief(argv)}\`: ${stream}`;
              const stdout = new CappedChunks(what('stdout'), SSH_STDOUT_CAP);
              const stderr = new CappedChunks(what('stderr'), SSH_STDERR_CAP);
              let overflowed = false;
              const collect = (into: CappedChunks) => (chunk: Buffer) => {
                if (overflowed) return;
                try {
                  into.push(chunk);
                } catch (error) {
                  // The command is not waited for: closing the channel stops its output at once.
                  overflowed = true;
                  clearTimeout(timer);
                  if (options.stdin instanceof Readable) options.stdin.unpipe(channel);
                  channel.close();
                  reject(error as CapExceededError);
                }
              };
              channel.on('data', collect(stdout));
              channel.stderr.on('data', collect(stderr));
              channel.once('close', (code?: number | null, signal?: string) => {
                clearTimeout(timer);
                if (overflowed) return;
                // No exit status and no signal: the connection went away under the command (sshd killed,
                // the network cut). Said as such, naming the host, rather than as a failed command.
                if ((code === undefined || code === null) && !signal) {
                  const lost =
                    `${this.target.label}: the SSH connection was lost while ${argv[0]} ran; ` +
                    `the command may or may not have finished (the next run checks again)`;
                  reject(new SshError(lost));
                  return;
                }
                resolve({
                  command,
                  code: code ?? -1,
                  stdout: stdout.toBuffer().toString('utf8'),
                  stderr: stderr.toBuffer().toString('utf8'),
                });
              });
              // A stream (a snapshot of gigabytes) is piped with backpressure; its error fails the command.
              if (options.stdin instanceof Readable) {
                options.stdin.once('error', (streamError: Error) => {
                  clearTimeout(timer);
                  channel.close();
                  reject(new SshError(`${this.target.label}: the input of ${argv[0]} failed: ${streamError.message}`));
                });
                options.stdin.pipe(channel);
              } else channel.end(options.stdin ?? undefined);
            },
            notStarted,
          );
        }),
    );
  }

  /**
   * A command that keeps running, talked to through its stdin and stdout as they go (one virsh for a
   * whole run). It holds one of the connection's channels until it ends; the caller ends it. Nothing
   * is buffered here: the caller reads the output as it comes, and must bound what it keeps of it
   * (the virsh session caps each answer).
   */
  interactive(argv: readonly string[]): Promise<ClientChannel> {
    return new Promise((resolve, reject) => {
      void this.#slots
        .use(
          () =>
            new Promise<void>((released) => {
              this.#start(
                argv,
                (channel) => {
                  channel.once('close', () => released());
                  resolve(channel);
                },
                (error) => {
                  released();
                  reject(error);
                },
              );
            }),
        )
        .catch(reject);
    });
  }

  /** A login shell on a pseudo-terminal of this size (`etcd-kvm ssh`): the caller wires it to its own terminal. */
  shell(window: { rows: number; cols: number; term: string }): Promise<ClientChannel> {
    return new Promise((resolve, reject) => {
      const refused = (error: Error) => reject(new SshError(`${this.target.label}: cannot start a shell: ${error.message}`));
      try {
        this.client.shell(window, (error: Error | undefined, channel: ClientChannel) => (error ? refused(error) : resolve(channel)));
      } catch (error) {
        refused(error as Error);
      }
    });
  }

  /** Asks for a channel running argv; a refusal, or the connection already gone, is an error naming the command. */
  #start(argv: readonly string[], started: (channel: ClientChannel) => void, notStarted: (error: SshError) => void): void {
    const refused = (error: Error) => notStarted(new SshError(`${this.target.label}: cannot start ${argv[0]}: ${error.message}`));
    try {
      this.client.exec(commandLine(argv), (error: Error | undefined, channel: ClientChannel) =>
        error ? refused(error) : started(channel),
      );
    } catch (error) {
      // ssh2 throws "Not connected" when the connection has already gone.
      refused(error as Error);
    }
  }

  /** Like exec, but a non-zero exit is an error naming the command, its exit code and its first stderr line. */
  async run(argv: readonly string[], options: { stdin?: Stdin; timeoutMs?: number; describe?: string } = {}): Promise<string> {
    const result = await this.exec(argv, options);
    if (result.code !== 0) {
      // virsh explains itself on the second line ("error: Failed to start domain" / "error: <why>").
      const reason = result.stderr.trim().split('\n').slice(0, 3).join(' ') || '(no stderr)';
      throw new SshError(`${this.target.label}: ${options.describe ?? argv[0]} failed (exit ${result.code}): ${reason}`);
    }
    return result.stdout;
  }

  close(): void {
    this.client.end();
  }
}
