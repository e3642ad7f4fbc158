import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { inventoryJsonSchema, inventoryReference } from './inventory.ts';
import { stepsReference } from './steps.ts';

/**
 * The generated documentation, from the code it describes:
 *   docs/inventory.md              the inventory reference, from tasks/inventory/schema.ts's descriptions
 *   schema/inventory.schema.json   the inventory's JSON Schema, for editors (yaml-language-server)
 *   docs/steps.md                  the deploy's steps, from DEPLOY_STEPS in tasks/steps/registry.ts
 *
 *   npm run docs:generate          (writes them; test/unit/docs.test.ts fails while one is stale)
 */

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Each generated file, by its path from the repository's root, with what it must hold. */
export function generatedFiles(): { path: string; content: string }[] {
  return [
    { path: 'docs/inventory.md', content: inventoryReference() },
    { path: 'schema/inventory.schema.json', content: inventoryJsonSchema() },
    { path: 'docs/steps.md', content: stepsReference() },
  ];
}

/** The generated files whose content on disk is not what generating them now gives. */
export function staleFiles(root = ROOT): string[] {
  return generatedFiles()
    .filter(({ path, content }) => {
      try {
        return readFileSync(join(root, path), 'utf8') !== content;
      } catch {
        return true;
      }
    })
    .map(({ path }) => path);
}

function main(): void {
  for (const { path, content } of generatedFiles()) {
    const file = join(ROOT, path);
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, content);
    console.log(`wrote ${path}`);
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) main();
