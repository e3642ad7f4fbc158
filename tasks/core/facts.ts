import type { Target } from './step.ts';

/**
 * The run's one fact cache: answers asked ahead of the steps that take them (libvirt's on each
 * hypervisor, the guests' own, etcd's users and roles), keyed by target, kind and question. The
 * runner drops a target's facts of the kinds a step's change makes stale (steps/registry.ts) as soon
 * as that step has changed the target — before its re-check, which therefore always asks again.
 */
export class FactCache {
  /** By target, then by `kind` + question: the answer, arrived or on its way. */
  readonly #entries = new Map<Target, Map<string, { kind: string; answer: Promise<unknown> }>>();
  /** Who holds something else a change of a kind makes stale (an SSH connection into a VM that restarted). */
  readonly #holders: { kind: string; drop: (target: Target) => void }[] = [];

  /** `drop` is told of every change of this kind on a target, so it lets go of what it holds there. */
  onStale(kind: string, drop: (target: Target) => void): void {
    this.#holders.push({ kind, drop });
  }

  /** Does the target have answers of this kind (asked, or on their way)? */
  has(target: Target, kind: string): boolean {
    return [...(this.#entries.get(target)?.values() ?? [])].some((entry) => entry.kind === kind);
  }

  put(target: Target, kind: string, question: string, answer: Promise<unknown>): void {
    const entries = this.#entries.get(target) ?? new Map<string, { kind: string; answer: Promise<unknown> }>();
    entries.set(`${kind}\0${question}`, { kind, answer });
    this.#entries.set(target, entries);
  }

  /** The answer, if one is kept; it stays for whoever asks next. */
  get<T>(target: Target, kind: string, question: string): Promise<T> | undefined {
    return this.#entries.get(target)?.get(`${kind}\0${question}`)?.answer as Promise<T> | undefined;
  }

  /** The answer, if one is kept, for one use: a fact the step that takes it changes by looking (a guest's state), or asks once. */
  take<T>(target: Target, kind: string, question: string): Promise<T> | undefined {
    const answer = this.get<T>(target, kind, question);
    this.#entries.get(target)?.delete(`${kind}\0${question}`);
    return answer;
  }

  /** Every answer of these kinds about the target is stale: a change there. */
  invalidate(target: Target, kinds: readonly string[]): void {
    for (const holder of this.#holders) if (kinds.includes(holder.kind)) holder.drop(target);
    const entries = this.#entries.get(target);
    if (!entries) return;
    for (const [key, entry] of entries) if (kinds.includes(entry.kind)) entries.delete(key);
  }

  /** Every answer kept, on its way or arrived: for a caller that waits until the batch is in. */
  answersOf(target: Target, kind: string): Promise<unknown>[] {
    return [...(this.#entries.get(target)?.values() ?? [])].filter((entry) => entry.kind === kind).map((entry) => entry.answer);
  }
}
