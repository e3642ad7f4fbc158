import type { SshConnection } from './ssh.ts';

/** What the pool asks of a connection: to hear when the other end closed it, and to close it. */
export interface Pooled {
  readonly client: { once(event: 'close', listener: () => void): unknown };
  close(): void;
}

/** Asked for a connection after the run's end (facts asked ahead that were still on their way). */
export class PoolClosed extends Error {}

/**
 * SSH connections opened on first use and shared for the whole run (concurrent callers wait for
 * the same one), closed together at the end.
 */
export class ConnectionPool<Connection extends Pooled = SshConnection> {
  readonly #opening = new Map<string, Promise<Connection>>();
  /** Set by closeAll: work still in flight then (facts asked ahead) must not open a connection nobody would close. */
  #closed = false;

  /** forgetFailures: a failed attempt is not kept, so the next get tries again (a host still booting). */
  constructor(readonly options: { forgetFailures: boolean }) {}

  get(key: string, open: () => Promise<Connection>): Promise<Connection> {
    // An open connection keeps the process alive: after the run's end none may be made.
    if (this.#closed) return Promise.reject(new PoolClosed(`${key}: not connecting, the run has ended`));
    let connection = this.#opening.get(key);
    if (!connection) {
      const opening = open();
      connection = opening;
      this.#opening.set(key, opening);
      if (this.options.forgetFailures) opening.catch(() => this.forget(key, opening));
      // A connection the other end closed (a member rebooting) is never handed out again.
      opening.then((ssh) => ssh.client.once('close', () => this.forget(key, opening))).catch(() => undefined);
    }
    return connection;
  }

  /** Drops the connection under `key` (only that one, if given), closing it: the next get opens a new one. */
  forget(key: string, only?: Promise<Connection>): void {
    const current = this.#opening.get(key);
    if (!current || (only && current !== only)) return;
    this.#opening.delete(key);
    current.then((ssh) => ssh.close()).catch(() => undefined);
  }

  async closeAll(): Promise<void> {
    this.#closed = true;
    const opened = await Promise.allSettled(this.#opening.values());
    for (const result of opened) if (result.status === 'fulfilled') result.value.close();
    this.#opening.clear();
  }
}
