import type { CallContext, Etcd3 } from 'etcd3';
import { createHash } from 'node:crypto';
import { MiB } from '../core/limits.ts';
import { revealSecret, type Secret } from '../core/secret.ts';
import type { Member } from '../inventory/model.ts';
import type { HypervisorConnections } from '../remote/hypervisors.ts';
import { Tunnel } from '../remote/tunnel.ts';

/**
 * etcd's own gRPC API, reached through each member's hypervisor (a forwarded channel on the SSH
 * connection the run already holds) or directly. Asking etcd itself costs one round trip; spawning
 * etcdctl inside an emulated guest costs over a second.
 */

// etcd3 and gRPC take 0.1-0.2 s of the main thread to load: started as the run starts.
let etcd3Module: Promise<typeof import('./etcd3.ts')> | undefined;
export const preloadEtcdClient = () => (etcd3Module ??= import('./etcd3.ts'));

export interface ClientIdentity {
  /** Names the identity in the client cache. */
  label: string;
  caCert: string;
  /** A client certificate (certificate mode). */
  cert?: string;
  key?: Secret;
  /** A user and password (password mode, once auth is enabled). */
  user?: { name: string; password: Secret };
}

/**
 * How long one gRPC call may take. Every call has a deadline, so that a member that stops answering
 * half-way (or on purpose) cannot hold the run. A call can pass a longer one itself: defragmentation
 * and physical compaction do (10 min, steps/maintenance.ts).
 */
export interface CallDeadlines {
  /** A question (status, member list, alarms, users): answered in milliseconds by a live member; the callers poll and retry. */
  unaryMs: number;
  /**
   * A stream: the only one the tool opens is a snapshot, up to etcd's largest quota (8 GiB). An hour
   * lets it through at 2.3 MiB/s, far below what a forwarded SSH channel carries.
   */
  streamMs: number;
}

export const CALL_DEADLINES: CallDeadlines = { unaryMs: 5_000, streamMs: 60 * 60_000 };

/**
 * The largest single gRPC message taken from a member (grpc-js's default, said here so that it stays
 * a choice): the tool's questions are answered in a few KiB, a snapshot comes in 32 KiB messages.
 */
export const MAX_RECEIVE_MESSAGE_BYTES = 4 * MiB;

/** Each call's options: its deadline, from when it starts. */
export const callOptions =
  (deadlines: CallDeadlines) =>
  (context: CallContext): { deadline: number } => ({ deadline: Date.now() + (context.isStream ? deadlines.streamMs : deadlines.unaryMs) });

/** Asked of the run's clients after close(): nothing opened then would ever be closed. */
export class EtcdClientsClosed extends Error {}

/**
 * What code that asks members questions takes of EtcdClients: a member's client or endpoint, and why its
 * hypervisor cannot be reached (the run's clients; a test's stand-in).
 */
export type MemberClients = Pick<EtcdClients, 'for' | 'endpoint' | 'unreachable'>;

/** What the clients ask of the run's hypervisor connections: a connection to tunnel through, and which cannot be reached. */
export type TunnelConnections = Pick<HypervisorConnections, 'get' | 'unreachable'>;

const credentialsDigest = (identity: ClientIdentity): string =>
  createHash('sha256')
    .update(`${identity.caCert}\0${identity.cert ?? ''}`)
    .digest('hex')
    .slice(0, 16);

export class EtcdClients {
  readonly #clients = new Map<string, Promise<Etcd3>>();
  readonly #tunnels: Tunnel[] = [];
  /**
   * Set by close(). A client still opening then (a connection warmed for a step the run skipped) has
   * its tunnel and channel closed as it comes: a listening tunnel, or a gRPC channel retrying, would
   * keep the process alive after its run has ended (seen: `deploy --tags domain` never exited).
   */
  #closed = false;

  constructor(
    readonly connections: TunnelConnections,
    readonly clientPort: number,
    readonly identity: () => ClientIdentity,
    readonly deadlines: CallDeadlines = CALL_DEADLINES,
  ) {}

  /** A client bound to one member's endpoint only, so an answer is that member's own. */
  for(member: Member, identity: ClientIdentity = this.identity()): Promise<Etcd3> {
    if (this.#closed) return Promise.reject(this.#closedError());
    // The credentials are part of the key: a certificate or CA bundle issued in this run (a CA rotation's stage)
    // opens a new channel, a gRPC channel keeping the credentials it was made with.
    const key = `${member.name}\0${identity.label}\0${credentialsDigest(identity)}`;
    let client = this.#clients.get(key);
    if (!client) {
      client = this.#open(member, identity);
      this.#clients.set(key, client);
      client.catch(() => this.#clients.delete(key));
    }
    return client;
  }

  /**
   * Where this process reaches a member's client port: the member itself, or the local end of a
   * tunnel through its hypervisor (one per call: gRPC and a plain TLS probe each hold their own).
   */
  async endpoint(member: Member): Promise<{ host: string; port: number }> {
    if (this.#closed) throw this.#closedError();
    if (member.reach !== 'hypervisor') return { host: member.etcdIp, port: this.clientPort };
    // Connected first: a hypervisor that cannot be reached fails here, with its own error.
    await this.connections.get(member.hypervisor);
    const tunnel = await Tunnel.open(() => this.connections.get(member.hypervisor), member.etcdIp, this.clientPort);
    if (this.#closed) {
      tunnel.close();
      throw this.#closedError();
    }
    this.#tunnels.push(tunnel);
    // Certificates carry 127.0.0.1 as a SAN, so TLS verifies the member through the local end too.
    return { host: '127.0.0.1', port: tunnel.localPort };
  }

  async #open(member: Member, identity: ClientIdentity): Promise<Etcd3> {
    const endpoint = await this.endpoint(member);
    await preloadEtcdClient();
    // The tunnel above, if any, is closed with the others; a direct endpoint has none.
    if (this.#closed) throw this.#closedError();
    return etcd3At(endpoint, member.name, identity, this.deadlines);
  }

  /** Why the member's hypervisor cannot be reached in this run, if it cannot: waiting on its etcd is pointless. */
  unreachable(member: Member): string | undefined {
    return member.reach === 'hypervisor' ? this.connections.unreachable.get(member.hypervisor.name)?.reason : undefined;
  }

  #closedError(): EtcdClientsClosed {
    return new EtcdClientsClosed("not connecting to etcd: the run's clients are closed");
  }

  close(): void {
    this.#closed = true;
    for (const client of this.#clients.values()) client.then((c) => c.close()).catch(() => {});
    for (const tunnel of this.#tunnels) tunnel.close();
    this.#clients.clear();
  }
}

/**
 * A client of the etcd at `host:port` (a member, or the local end of a tunnel to one), whose TLS
 * certificate names `serverName`: a member's name, a DNS SAN of the certificates the tool issues.
 */
export async function etcd3At(
  { host, port }: { host: string; port: number },
  serverName: string,
  identity: ClientIdentity,
  deadlines: CallDeadlines = CALL_DEADLINES,
): Promise<Etcd3> {
  const { Etcd3, noop } = await preloadEtcdClient();
  return new Etcd3({
    hosts: [`https://${host}:${port}`],
    credentials: {
      rootCertificate: Buffer.from(identity.caCert),
      ...(identity.cert && identity.key
        ? { certChain: Buffer.from(identity.cert), privateKey: Buffer.from(revealSecret(identity.key)) }
        : {}),
    },
    ...(identity.user ? { auth: { username: identity.user.name, password: revealSecret(identity.user.password) } } : {}),
    // The callers poll and decide themselves; the library's retries and circuit breaker would hide the last error.
    faultHandling: { host: () => noop, global: noop },
    dialTimeout: 5_000,
    defaultCallOptions: callOptions(deadlines),
    // TLS names the member (a DNS SAN of its certificate), not the IP: Node warns on IP server names.
    // grpc-js backs off reconnects exponentially up to 120 s: while a VM boots that would hide the
    // moment etcd comes up by tens of seconds. Polling wants a quick, flat retry instead.
    grpcOptions: {
      'grpc.enable_http_proxy': 0,
      'grpc.ssl_target_name_override': serverName,
      'grpc.default_authority': serverName,
      'grpc.initial_reconnect_backoff_ms': 500,
      'grpc.max_reconnect_backoff_ms': 2_000,
      'grpc.max_receive_message_length': MAX_RECEIVE_MESSAGE_BYTES,
    },
  });
}

/** Asks the members in order until one answers: for cluster-wide questions and calls any member can take. */
export async function firstAnswering<T>(
  clients: Pick<MemberClients, 'for'>,
  members: readonly Member[],
  ask: (client: Etcd3, member: Member) => Promise<T>,
): Promise<{ member: Member; client: Etcd3; answer: T }> {
  const failures: string[] = [];
  for (const member of members) {
    try {
      const client = await clients.for(member);
      return { member, client, answer: await ask(client, member) };
    } catch (error) {
      failures.push(`${member.name}: ${(error as Error).message.split('\n')[0]}`);
    }
  }
  throw new Error(`no member answers: ${failures.join('; ')}`);
}
