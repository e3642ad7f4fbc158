/**
 * Upstream releases installed when install_dependencies is true (etcd's comes from the inventory).
 * Pinned so every member of a cluster runs the same bits; bump deliberately.
 */
export const UPSTREAM = {
  nodeExporter: '1.8.2',
  fluentBit: '3.1.9',
  vault: '1.17.6',
  /** The fluent-bit dynamic configuration updaters, at the seed module's versions. */
  configurationsAutoUpdater: '0.5.0',
  gitsync: '0.1.0',
} as const;
