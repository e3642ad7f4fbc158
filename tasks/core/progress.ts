import { forDisplay } from './display.ts';

/**
 * What each host waits on during a long step (a first boot, etcd coming up), for the run's progress:
 * the runner shows the summary under the running phase on a terminal, and prints a timestamped line
 * whenever a host's state changes otherwise. Steps only say what they wait on; showing it is here,
 * so what a state carries from a guest (etcd's or the agent's words) is made safe to print here too.
 */
export class Progress {
  readonly #states = new Map<string, { what: string; since: number }>();
  readonly #listeners = new Set<(host: string, what: string) => void>();

  constructor(readonly now: () => number = Date.now) {}

  /** The host waits on `what` now; the same state again keeps its start time. */
  update(host: string, said: string): void {
    const what = forDisplay(said);
    if (this.#states.get(host)?.what === what) return;
    this.#states.set(host, { what, since: this.now() });
    for (const listener of this.#listeners) listener(host, what);
  }

  /** The host waits on nothing any more. */
  done(host: string): void {
    this.#states.delete(host);
  }

  /** One line: every waiting host, what it waits on and for how long. Empty when nobody waits. */
  summary(): string {
    const now = this.now();
    return [...this.#states].map(([host, { what, since }]) => `${host}: ${what} (${Math.round((now - since) / 1000)} s)`).join(' · ');
  }

  onChange(listener: (host: string, what: string) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  clear(): void {
    this.#states.clear();
  }
}
