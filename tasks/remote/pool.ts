import type { SshConnection } from './ssh.ts';

/**
 * SSH connections opened on first use and shared for the whole run (concurrent callers wait for
 * the same one), closed together at the end.
 */
export class ConnectionPool {
  readonly #opening = new Map<string, Promise<SshConnection>>();

  /** forgetFailures: a failed attempt is not kept, so the next get tries again (a host still booting). */
  constructor(readonly options: { forgetFailures: boolean }) {}

  get(key: string, open: () => Promise<SshConnection>): Promise<SshConnection> {
    let connection = this.#opening.get(key);
    if (!connection) {
      connection = open();
      this.#opening.set(key, connection);
      if (this.options.forgetFailures) connection.catch(() => this.#opening.delete(key));
    }
    return connection;
  }

  async closeAll(): Promise<void> {
    const opened = await Promise.allSettled(this.#opening.values());
    for (const result of opened) if (result.status === 'fulfilled') result.value.close();
    this.#opening.clear();
  }
}
