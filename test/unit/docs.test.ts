import test from 'ava';
import { readFileSync } from 'node:fs';
import { generatedFiles } from '../../scripts/docs/generate.ts';
import { inventorySections, undescribedFields } from '../../scripts/docs/inventory.ts';

/** The generated docs are what the code says now: each is generated again in memory and compared with the file. */
for (const { path, content } of generatedFiles()) {
  test(`${path} is up to date (npm run docs:generate writes it)`, (t) => {
    let onDisk: string | undefined;
    try {
      onDisk = readFileSync(new URL(`../../${path}`, import.meta.url), 'utf8');
    } catch {
      onDisk = undefined;
    }
    t.true(onDisk === content, `${path} is stale: run npm run docs:generate and commit the result`);
  });
}

test('every field of the inventory schema has a description', (t) => {
  t.deepEqual(undescribedFields(), [], 'add .describe(…) to these fields in tasks/inventory/schema.ts');
});

test('the reference covers the nested objects: a member field deep down is there, with its type and default', (t) => {
  const rows = inventorySections().flatMap((section) => section.rows);
  const row = rows.find((candidate) => candidate.path === 'members[].fluentbit_dynamic_config.git.auth.client_ssh_key');
  t.like(row, { type: 'string (secret)', default: '`""`' });
  const prefixLength = rows.find((candidate) => candidate.path === 'members[].libvirt_networks[].prefix_length');
  t.like(prefixLength, { type: 'integer (1–32) or string', default: '`24`' });
  t.like(
    rows.find((candidate) => candidate.path === 'cluster.name'),
    { default: '**required**' },
  );
  // defaults holds the member fields, documented once under members[].
  t.false(rows.some((candidate) => candidate.path.startsWith('defaults.')));
});
