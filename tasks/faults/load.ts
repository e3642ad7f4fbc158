import { briefError } from '../core/errors.ts';
import type { EtcdClients } from '../etcd/client.ts';
import type { Member } from '../inventory/model.ts';
import type { FinalWrites, Operation } from './history.ts';

/**
 * The drill's clients: one writer and one reader, each a client that fails over (every operation goes to
 * the next member in turn, so a member that is down costs one operation's deadline, not the run). Every
 * operation is recorded as history.ts reads it. The writer's transaction creates `w/<n>` (only if it is not
 * there: a write applied twice would show) and sets `reg` to n; the reader reads `reg` linearizably.
 */
export class DrillLoad {
  readonly ops: Operation[] = [];
  #stopped = false;
  #running: Promise<void>[] = [];

  constructor(
    readonly clients: EtcdClients,
    readonly members: readonly Member[],
    /** Under the tool's own prefix, one per drill; removed at the end (run.ts). */
    readonly prefix: string,
    readonly clock: () => number,
  ) {}

  start(): void {
    this.#running = [this.#writes(), this.#reads()];
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    await Promise.all(this.#running);
  }

  async #timed(kind: Operation['kind'], member: Member, value: number | undefined, call: () => Promise<number | undefined>) {
    const invokedMs = this.clock();
    try {
      const answer = await call();
      const seen = kind === 'read' ? answer : value;
      this.ops.push({
        kind,
        ...(seen === undefined ? {} : { value: seen }),
        member: member.name,
        invokedMs,
        returnedMs: this.clock(),
        ok: true,
      });
    } catch (error) {
      this.ops.push({
        kind,
        ...(value === undefined ? {} : { value }),
        member: member.name,
        invokedMs,
        returnedMs: this.clock(),
        ok: false,
        error: briefError(error),
      });
      // A member that refuses at once (its tunnel gone) must not spin the loop.
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  async #writes(): Promise<void> {
    for (let n = 1; !this.#stopped; n++) {
      const member = this.members[n % this.members.length]!;
      await this.#timed('write', member, n, async () => {
        const client = await this.clients.for(member);
        const key = `${this.prefix}w/${n}`;
        const done = await client
          .if(key, 'Create', '==', 0)
          .then(client.put(key).value(String(n)), client.put(`${this.prefix}reg`).value(String(n)))
          .commit();
        if (!done.succeeded) throw new Error(`${key} was already there: a write applied twice`);
        return n;
      });
    }
  }

  async #reads(): Promise<void> {
    for (let turn = 0; !this.#stopped; turn++) {
      const member = this.members[turn % this.members.length]!;
      await this.#timed('read', member, undefined, async () => {
        const value = await (await this.clients.for(member)).get(`${this.prefix}reg`).string();
        return value === null ? 0 : Number(value);
      });
    }
  }
}

/** The writer's keys as they are at the end, read through the first member that answers. */
export async function finalWrites(clients: EtcdClients, members: readonly Member[], prefix: string): Promise<FinalWrites> {
  const failures: string[] = [];
  for (const member of members) {
    try {
      const kvs = await (await clients.for(member)).getAll().prefix(`${prefix}w/`).strings();
      return new Map(Object.entries(kvs).map(([key, value]) => [Number(key.slice(`${prefix}w/`.length)), value]));
    } catch (error) {
      failures.push(`${member.name}: ${briefError(error)}`);
    }
  }
  throw new Error(`the drill's writes could not be read back: ${failures.join('; ')}`);
}
