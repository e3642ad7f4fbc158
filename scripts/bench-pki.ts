/**
 * Measures the PKI step on a fresh state directory: CA + one certificate per member of the inventory
 * + root client certificate + the tool's SSH key. Prints the median of several runs.
 * Usage: npx tsx scripts/bench-pki.ts [-i inventories/lab.yaml] [--runs 7]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Runner } from '../tasks/core/runner.ts';
import { loadInventory } from '../tasks/inventory/load.ts';
import { PkiStore } from '../tasks/pki/store.ts';
import { pkiStep } from '../tasks/steps/pki.ts';

const { values } = parseArgs({
  options: { inventory: { type: 'string', short: 'i', default: 'inventories/lab.yaml' }, runs: { type: 'string', default: '7' } },
});
const inventory = loadInventory(values.inventory!);
const timings: number[] = [];
for (let i = 0; i < Number(values.runs); i++) {
  const stateDir = mkdtempSync(join(tmpdir(), 'etcd-kvm-bench-pki-'));
  const started = performance.now();
  const [result] = await new Runner({ dryRun: false, renderer: 'silent' }).runStep(
    pkiStep({ inventory: { ...inventory, stateDir }, store: new PkiStore(stateDir) }),
  );
  timings.push(performance.now() - started);
  if (result?.status !== 'changed') throw new Error(`unexpected PKI result: ${result?.status} ${result?.error ?? ''}`);
  rmSync(stateDir, { recursive: true });
}
timings.sort((a, b) => a - b);
const median = timings[Math.floor(timings.length / 2)]!;
console.log(
  `pki cold (${inventory.members.length} members, RSA ${inventory.pki.keyLength}): median ${median.toFixed(0)} ms, min ${timings[0]!.toFixed(0)} ms, max ${timings.at(-1)!.toFixed(0)} ms over ${timings.length} runs`,
);
