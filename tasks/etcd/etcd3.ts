/**
 * etcd's client and the retry policy the tool gives it, one module loaded when a run first asks etcd
 * (etcd/client.ts): a chunk of its own in the installed command's bundle, whose named exports are
 * those of the CommonJS packages behind it (a dynamic import of etcd3 itself would give the bundle
 * only a default export). cockatiel's policy must come from the instance etcd3 uses: here, the same.
 */
export { Etcd3 } from 'etcd3';
export { noop } from 'cockatiel';
