import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * A new directory for a test's files, inside one directory per test process that is removed when the process exits.
 * The unit tests write thousands of inventories and state directories in a run; left behind, they filled /tmp.
 */
let processRoot: string | undefined;
export function scratchDir(prefix: string): string {
  if (!processRoot) {
    const root = mkdtempSync(join(tmpdir(), 'etcd-kvm-test-'));
    process.once('exit', () => rmSync(root, { recursive: true, force: true }));
    processRoot = root;
  }
  return mkdtempSync(join(processRoot, `${prefix}-`));
}
