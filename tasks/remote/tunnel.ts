import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import type { SshConnection } from './ssh.ts';

/**
 * A local port forward through a hypervisor (ssh -L): a listener on 127.0.0.1 whose connections are
 * carried as direct-tcpip channels on the existing SSH connection to `host:port` as the hypervisor sees
 * it. Lets an ordinary client (gRPC over TLS) reach a member VM on a network that exists only there.
 */
export class Tunnel {
  readonly #server: Server = createServer();
  readonly #sockets = new Set<Socket>();

  private constructor(
    readonly connection: SshConnection,
    readonly host: string,
    readonly port: number,
  ) {
    this.#server.on('connection', (socket) => this.#carry(socket));
  }

  static async open(connection: SshConnection, host: string, port: number): Promise<Tunnel> {
    const tunnel = new Tunnel(connection, host, port);
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
    this.connection.client.forwardOut('127.0.0.1', 0, this.host, this.port, (error, channel) => {
      if (error) {
        socket.destroy();
        return;
      }
      socket.on('error', () => channel.close());
      channel.on('close', () => socket.destroy());
      socket.pipe(channel).pipe(socket);
      socket.resume();
    });
  }

  close(): void {
    for (const socket of this.#sockets) socket.destroy();
    this.#server.close();
  }
}
