import test from 'ava';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { InputError } from '../../tasks/core/errors.ts';
import { loadInventory } from '../../tasks/inventory/load.ts';
import { loginKeyProblems } from '../../tasks/inventory/login-keys.ts';
import { baseDocument, load, locatedProblemsOf } from '../helpers/inventory.ts';
import { scratchDir } from '../helpers/scratch.ts';

/** The base inventory as text, one line changed: the line numbers below are this text's. */
function baseText(replace: [string, string][] = []): string {
  let text = stringify(baseDocument());
  for (const [from, to] of replace) {
    if (!text.includes(from)) throw new Error(`the base inventory has no ${from}`);
    text = text.replace(from, to);
  }
  return text;
}

const lineOf = (text: string, needle: string, nth = 0) => {
  const lines = text.split('\n');
  let seen = 0;
  const index = lines.findIndex((line) => line.includes(needle) && seen++ === nth);
  if (index < 0) throw new Error(`no ${needle}`);
  return { line: index + 1, column: lines[index]!.indexOf(needle.trimStart()) + 1 };
};

test('a wrong value is located in the file, with the value found there', (t) => {
  const text = baseText([['prefix_length: 24', 'prefix_length: true']]);
  const [located, ...rest] = locatedProblemsOf(text);
  t.deepEqual(rest, []);
  t.regex(located!.problem, /^members\[0\]\.libvirt_networks\[0\]\.prefix_length \(member etcd-1\): /);
  const { line, column } = lineOf(text, 'prefix_length: true');
  t.regex(located!.at!, new RegExp(`^in \\S+inventory\\.yaml:${line}:${column}, found true$`));
});

test('a quoted string is shown quoted; an unknown key is located at the key', (t) => {
  const text = baseText([
    ['prefix_length: 24', 'prefix_length: "0x18"'],
    ['vcpus: 1', 'vcpus: 1\n  vcpu_count: 2'],
  ]);
  const problems = locatedProblemsOf(text);
  const prefix = problems.find(({ problem }) => problem.includes('prefix_length'));
  const unknown = problems.find(({ problem }) => problem.startsWith('defaults.vcpu_count: unknown key'));
  t.regex(prefix!.at!, /, found "0x18"$/);
  const { line, column } = lineOf(text, 'vcpu_count');
  t.regex(unknown!.at!, new RegExp(`:${line}:${column}, found 2$`));
});

test('a value under a key that may hold a secret is located but never shown', (t) => {
  const text = baseText([['vcpus: 1', 'vcpus: 1\n  admin_user_password_hash: hunter2']]);
  const [located] = locatedProblemsOf(text);
  t.regex(located!.problem, /^defaults\.admin_user_password_hash.*crypt\(3\) hash/);
  const { line } = lineOf(text, 'admin_user_password_hash');
  t.regex(located!.at!, new RegExp(`:${line}:3$`));
  t.false(located!.at!.includes('hunter2'));
});

test('a required key left out points at the mapping that lacks it', (t) => {
  const doc = baseDocument();
  delete (doc.cluster as Record<string, unknown>).initial_token;
  const text = stringify(doc);
  const [located] = locatedProblemsOf(text);
  t.is(located!.problem, 'cluster.initial_token: is required (string)');
  t.regex(located!.at!, new RegExp(`:${lineOf(text, 'cluster:').line}:1$`));
});

test("broken YAML: the first error, its place and the file's lines there; the errors that follow from it counted, not listed", (t) => {
  const path = join(scratchDir('inventory-errors'), 'broken.yaml');
  writeFileSync(path, 'cluster:\n  name: [a\netcd: {\n');
  const error = t.throws(() => loadInventory(path), { instanceOf: InputError });
  t.is(error!.problems.length, 2);
  t.regex(error!.problems[0]!, /^Flow sequence .* end with a \]$/);
  t.regex(error!.problems[1]!, /^\(1 more parse errors after it/);
  t.regex(error!.locations[0]!, /^in \S+broken\.yaml:3:1\n {4} {2}name: \[a\n {4}etcd: \{\n {4}\^$/);
});

test('an inventory file that is not there, or a directory, is said in words with what to give', (t) => {
  const dir = scratchDir('inventory-errors');
  const missing = t.throws(() => loadInventory(join(dir, 'none.yaml')), { instanceOf: InputError });
  t.regex(missing!.message, /cannot read inventory \S+none\.yaml: no such file$/);
  t.regex(missing!.problems[0]!, /give the path of an inventory file with -i/);
  mkdirSync(join(dir, 'adir.yaml'));
  t.regex(t.throws(() => loadInventory(join(dir, 'adir.yaml')), { instanceOf: InputError })!.message, /is a directory, not a file$/);
});

test("a login key that cannot be read is bad input at its field (the hypervisor's, a bastion's); a readable one is none", (t) => {
  const dir = scratchDir('inventory-errors');
  writeFileSync(join(dir, 'hv.key'), 'a key\n');
  const doc = baseDocument();
  doc.bastions = { edge: { address: '127.0.0.2', private_key: join(dir, 'edge.key') } };
  doc.hypervisors = { hv: { address: '127.0.0.1', private_key: join(dir, 'hv.key'), jump: ['edge'] } };
  t.deepEqual(
    loginKeyProblems(load(doc)).map(({ path, message }) => [path.join('.'), message]),
    [['bastions.edge.private_key', `cannot read the private key ${join(dir, 'edge.key')} (no such file)`]],
  );
  writeFileSync(join(dir, 'edge.key'), 'another key\n');
  t.deepEqual(loginKeyProblems(load(doc)), []);
});

test('etcd.defrag_min_free is refused with the rule that replaces it: maintain --defrag and the agents read one rule', (t) => {
  const text = baseText([['cluster:', 'etcd:\n  defrag_min_free: 2097152\ncluster:']]);
  const [located, ...rest] = locatedProblemsOf(text);
  t.deepEqual(rest, []);
  t.is(
    located!.problem,
    "etcd.defrag_min_free: has moved: `maintain --defrag` and the members' agents both read maintenance.defrag.rule now — remove it and write maintenance: { defrag: { rule: { free_bytes: 2097152, free_fraction: 0, quota_fraction: 0 } } } for the same threshold (the rule's defaults: 200 MiB free, or 80 % of the quota)",
  );
  t.regex(located!.at!, /:2:3, found 2097152$/);
});

test('defaults or a member that is not a mapping is its own problem, reported without a crash', (t) => {
  const notMappings = baseText([
    ['defaults:\n', 'defaults: just text\nunused:\n'],
    ['- name: etcd-2', '- 42\n  - name: etcd-2'],
  ]);
  const problems = locatedProblemsOf(notMappings).map(({ problem }) => problem);
  t.true(
    problems.some((problem) => problem.startsWith('defaults: Expected object, received string')),
    problems.join(' | '),
  );
  t.true(
    problems.some((problem) => problem.startsWith('members[1]: Expected object, received number')),
    problems.join(' | '),
  );
});
