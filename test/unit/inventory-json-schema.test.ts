import test from 'ava';
import { Ajv } from 'ajv';
import addFormats from 'ajv-formats';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { InputError } from '../../tasks/core/errors.ts';
import { loadInventory } from '../../tasks/inventory/load.ts';
import { baseDocument, load } from '../helpers/inventory.ts';

/**
 * The published schema (schema/inventory.schema.json) under a real JSON Schema validator, as an editor or a
 * pipeline runs it: ajv in its strict mode, with ajv-formats. It and the tool agree on every shipped inventory, and both refuse
 * what the tool once coerced silently.
 */

const SCHEMA_PATH = 'schema/inventory.schema.json';
const schema = JSON.parse(readFileSync(SCHEMA_PATH, 'utf8')) as object;
// With the standard formats (uuid, uri), as every ajv set-up that checks them adds them.
const ajv = new Ajv({ strict: true, allErrors: true });
addFormats.default(ajv);
const validate = ajv.compile(schema);

const shipped = ['inventories', 'inventories/examples'].flatMap((dir) =>
  readdirSync(dir)
    .filter((name) => name.endsWith('.yaml'))
    .map((name) => join(dir, name)),
);

test('ajv compiles the published schema in strict mode (no keyword it does not know, no type it cannot check)', (t) => {
  t.is(typeof validate, 'function');
  t.true(shipped.length >= 6, shipped.join(', '));
});

for (const path of shipped) {
  test(`${path}: names the schema for editors, is valid under ajv, and the tool loads it`, (t) => {
    const text = readFileSync(path, 'utf8');
    const relative = path.split('/').length === 2 ? '../schema/inventory.schema.json' : '../../schema/inventory.schema.json';
    t.is(text.split('\n')[0], `# yaml-language-server: $schema=${relative}`);
    t.true(validate(parse(text)), JSON.stringify(validate.errors));
    t.notThrows(() => loadInventory(path));
  });
}

/** One NIC's prefix_length set to `value`, in a document otherwise valid. */
function withPrefixLength(value: unknown): Record<string, unknown> {
  const doc = baseDocument();
  (doc.members[0]!.libvirt_networks as Record<string, unknown>[])[0]!.prefix_length = value;
  return doc;
}

const problemsOf = (doc: Record<string, unknown>): readonly string[] => {
  try {
    load(doc as Parameters<typeof load>[0]);
    return [];
  } catch (error) {
    if (error instanceof InputError) return error.problems;
    throw error;
  }
};

test('prefix_length: 24 and "24" are taken by both; a boolean, a list, hex or a number past 32 by neither, named by the tool', (t) => {
  for (const value of [24, '24', 8, '16']) {
    t.true(validate(withPrefixLength(value)), `ajv: ${JSON.stringify(value)}`);
    t.deepEqual(problemsOf(withPrefixLength(value)), [], `tool: ${JSON.stringify(value)}`);
  }
  for (const value of [true, [24], '0x18', 33, '40', 0, 24.5, '']) {
    t.false(validate(withPrefixLength(value)), `ajv: ${JSON.stringify(value)}`);
    t.deepEqual(
      problemsOf(withPrefixLength(value)),
      ['members[0].libvirt_networks[0].prefix_length (member etcd-1): must be a whole number from 1 to 32 (written 24 or "24")'],
      `tool: ${JSON.stringify(value)}`,
    );
  }
});

test('etcd.auto_compaction_retention: a number is its text, a boolean is refused by both', (t) => {
  const withRetention = (value: unknown) => ({ ...baseDocument(), etcd: { auto_compaction_retention: value } }) as Record<string, unknown>;
  t.is(load(withRetention(5000) as Parameters<typeof load>[0]).etcd.autoCompactionRetention, '5000');
  t.true(validate(withRetention('1h')));
  t.false(validate(withRetention(true)));
  t.deepEqual(problemsOf(withRetention(true)), [
    'etcd.auto_compaction_retention: must be a number of revisions or a duration such as "1h"',
  ]);
});
