import { Secret } from '../core/secret.ts';

/**
 * The inventory's fields as the code reads them: the file's snake_case keys (the seed module's variable
 * names, which operators port across) become camelCase at the loader's edge, so nothing past it reads a
 * raw field. The mapping is one rule, applied to the type and to the value alike.
 */

/** `space_quota` → `spaceQuota`, `v2_store` → `v2Store`. */
export type CamelCase<S extends string> = S extends `${infer Head}_${infer Tail}` ? `${Head}${Capitalize<CamelCase<Tail>>}` : S;

type Leaf = string | number | boolean | bigint | symbol | null | undefined | Secret;

/** A parsed block with every object key camelCased, all the way down (a Secret and other leaves as they are). */
export type Camelized<T> = T extends Leaf
  ? T
  : T extends readonly (infer E)[]
    ? Camelized<E>[]
    : { [K in keyof T as K extends string ? CamelCase<K> : K]: Camelized<T[K]> };

export const camelCase = <S extends string>(key: S): CamelCase<S> =>
  key.replace(/_([a-z0-9])/g, (_, next: string) => next.toUpperCase()) as CamelCase<S>;

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !(value instanceof Secret) && Object.getPrototypeOf(value) === Object.prototype;

/**
 * A parsed block of the schema's (every key one of its fields, never a name the operator chose: a record by
 * name, like `users`, is camelized value by value) with its keys camelCased.
 */
export function camelized<T>(value: T): Camelized<T> {
  if (Array.isArray(value)) return value.map((item: unknown) => camelized(item)) as Camelized<T>;
  if (!isPlainObject(value)) return value as Camelized<T>;
  return Object.fromEntries(Object.entries(value).map(([key, field]) => [camelCase(key), camelized(field)])) as Camelized<T>;
}

/** A record by name (users, roles), its names kept and each value camelized. */
export const camelizedByName = <T>(byName: Record<string, T>): Record<string, Camelized<T>> =>
  Object.fromEntries(Object.entries(byName).map(([name, value]) => [name, camelized(value)]));
