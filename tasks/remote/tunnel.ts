import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import type { SshConnection } from './ssh.ts';

/**
 * A local port forward through a hypervisor (ssh -L): a listener on 127.0.0.1 whose connections are
 * carried as direct-tcpip channels on the run's SSH connection to `host:port` as the hypervisor sees
 * it. Lets an ordinary client (gRPC over TLS) reach a member VM on a network that exists only there.
 * The connection is asked for again for every socket: one that dropped (its sshd session killed) is
 * replaced by the pool, and a hypervisor that cannot be reached any more fails the socket at once.
 */
export class Tunnel {
  readonly #server: Server = createServer();
  readonly #sockets = new Set<Socket>();

  private constructor(
    readonly currentConnection: () => Promise<SshConnection>,
    readonly host: string,
    readonly port: number,
  ) {
    this.#server.on('connection', (socket) => this.#carry(socket));
  }

  static async open(currentConnection: () => Promise<SshConnection>, host: string, port: number): Promise<Tunnel> {
    const tunnel = new Tunnel(currentConnection, host, port);
    await new Promise<void>((resolve, reject) => {
      tunnel.#server.once('error', reject);
      tunnel.#server.listen(0, '127.0.0.1', resolve);
    });
    return tunnel;
  }

  get localPort(): number {
    return (this.#server.address() as AddressInfo).port;
  }

  #carry(socket: Socket): void {
    this.#sockets.add(socket);
    socket.once('close', () => this.#sockets.delete(socket));
    socket.setNoDelay(true);
    socket.pause();
    this.currentConnection()
      .then((ssh) => ssh.forward(this.host, this.port))
      .then(
        (channel) => {
          socket.on('error', () => channel.destroy());
          channel.on('close', () => socket.destroy());
          socket.pipe(channel).pipe(socket);
          socket.resume();
        },
        // The client sees a closed connection and says so (its own error, with its own retries).
        () => socket.destroy(),
      );
  }

  close(): void {
    for (const socket of this.#sockets) socket.destroy();
    this.#server.close();
  }
}
