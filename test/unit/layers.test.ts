import test from 'ava';
import ts from 'typescript';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { ZodObject, ZodType, type ZodTypeAny } from 'zod';
import { documentSchema, memberSchema } from '../../tasks/inventory/schema.ts';

/**
 * The folders under tasks/ are layers, and imports point one way: down. docs/architecture.md's "Layers"
 * describes the same order. A file may import its own folder and the folders listed for it.
 */
const ALLOWED: Record<string, string[]> = {
  core: [],
  // The loader parses etcd's versions (upgrade/version.ts, which needs core alone) once, for everything after it.
  inventory: ['core', 'upgrade'],
  // etcd's versions, releases and the pre-flight of a version change: pure, or files on the control node.
  upgrade: ['core'],
  pki: ['core', 'inventory'],
  render: ['core', 'inventory', 'pki', 'upgrade'],
  remote: ['core', 'inventory'],
  libvirt: ['core', 'inventory', 'pki', 'remote', 'render'],
  etcd: ['core', 'inventory', 'remote', 'pki', 'upgrade'],
  guest: ['core', 'inventory', 'remote', 'render', 'libvirt', 'upgrade'],
  backup: ['core', 'inventory'],
  // A restore drill: a backup restored in a member (its SSH, its etcd tools) and read through etcd's client.
  drill: ['core', 'inventory', 'remote', 'render', 'etcd', 'backup'],
  // The upgrade's pre-flight compares the members' data as verify does.
  steps: ['core', 'inventory', 'pki', 'render', 'remote', 'libvirt', 'etcd', 'guest', 'backup', 'upgrade', 'verify'],
  // It names a deploy's recorded mismatch as verify/consistency.ts reads it, and looks in the guests (through their
  // agents) for a recovery's leftover drop-in, at the path the member's rendering gives it.
  status: ['core', 'inventory', 'remote', 'render', 'libvirt', 'etcd', 'guest', 'upgrade', 'backup', 'verify', 'drill'],
  // Whether the members hold the same data: read through etcd's clients only (and the deploy's record of a difference).
  verify: ['core', 'inventory', 'etcd'],
  // A fault drill: faults through libvirt and the members' SSH, clients through etcd's, verify after each.
  faults: ['core', 'inventory', 'remote', 'libvirt', 'etcd', 'verify'],
  // Whether the quorum is lost for good, and from which survivor it comes back: the deploy asks it too.
  recover: ['core', 'inventory', 'remote', 'render', 'libvirt', 'etcd', 'steps'],
  // The deploy's stages: gather, plan, execute, over the steps; its last phase compares the members as verify does.
  deploy: ['core', 'inventory', 'pki', 'render', 'remote', 'libvirt', 'etcd', 'guest', 'backup', 'upgrade', 'steps', 'recover', 'verify'],
  // The ground a deploy stands on, read through libvirt on each hypervisor; nothing of etcd's.
  doctor: ['core', 'inventory', 'remote', 'libvirt'],
  // The CLI's help lists the steps from their registry.
  cli: ['core', 'steps'],
  monitoring: ['core', 'inventory', 'render'],
  // The commands, thin over every layer below; nothing imports them (cli/main.ts runs them by path).
  commands: [
    'core',
    'inventory',
    'upgrade',
    'pki',
    'render',
    'remote',
    'libvirt',
    'etcd',
    'guest',
    'backup',
    'drill',
    'faults',
    'steps',
    'status',
    'verify',
    'doctor',
    'recover',
    'deploy',
    'cli',
    'monitoring',
  ],
};

const TASKS = resolve('tasks');

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? sources(path) : name.endsWith('.ts') ? [path] : [];
  });
}

/** The top-level folder of tasks/ a file is in; undefined for tasks/deploy.ts, the README's entry point into commands/deploy.ts. */
const layerOf = (path: string) => {
  const parts = relative(TASKS, path).split('/');
  return parts.length > 1 ? parts[0] : undefined;
};

test('every folder of tasks/ is a known layer', (t) => {
  const folders = readdirSync(TASKS)
    .filter((name) => statSync(join(TASKS, name)).isDirectory())
    .sort();
  t.deepEqual(folders, Object.keys(ALLOWED).sort());
});

test('imports between the folders of tasks/ point down the layers only', (t) => {
  const wrong: string[] = [];
  for (const file of sources(TASKS)) {
    const from = layerOf(file);
    if (!from) continue;
    for (const match of readFileSync(file, 'utf8').matchAll(/^(?:import|export)[^'"]*from '(\.[^']+)'/gm)) {
      const to = layerOf(resolve(dirname(file), match[1]!));
      if (to === undefined && !resolve(dirname(file), match[1]!).startsWith(TASKS)) continue;
      if (to !== from && !ALLOWED[from]!.includes(to ?? '(an entry point)'))
        wrong.push(`${relative(TASKS, file)} imports ${match[1]} (${from} -> ${to ?? 'an entry point'})`);
    }
  }
  t.deepEqual(wrong, []);
});

test('nothing after loading sees raw input: only inventory/ imports the schema', (t) => {
  const readers = sources(TASKS).filter(
    (file) => layerOf(file) !== 'inventory' && /from '[^']*inventory\/schema\.ts'/.test(readFileSync(file, 'utf8')),
  );
  t.deepEqual(
    readers.map((file) => relative(TASKS, file)),
    [],
  );
});

test('tasks/ holds folders only, but for deploy.ts, which only runs commands/deploy.ts: no command script beside a folder of its name', (t) => {
  const files = readdirSync(TASKS).filter((name) => !statSync(join(TASKS, name)).isDirectory());
  t.deepEqual(files, ['deploy.ts']);
  t.deepEqual(
    readFileSync(join(TASKS, 'deploy.ts'), 'utf8')
      .split('\n')
      .filter((line) => /^(import|export)/.test(line)),
    ["import './commands/deploy.ts';"],
  );
});

test('no import circle between the files of tasks/', (t) => {
  const importsOf = new Map(
    sources(TASKS).map((file) => [
      file,
      [...readFileSync(file, 'utf8').matchAll(/^(?:import|export)[^'"]*from '(\.[^']+)'/gm)].map((match) =>
        resolve(dirname(file), match[1]!),
      ),
    ]),
  );
  const circles: string[] = [];
  const state = new Map<string, 'open' | 'done'>();
  const visit = (file: string, path: string[]): void => {
    if (state.get(file) === 'done') return;
    if (state.get(file) === 'open') {
      circles.push([...path.slice(path.indexOf(file)), file].map((f) => relative(TASKS, f)).join(' -> '));
      return;
    }
    state.set(file, 'open');
    for (const next of importsOf.get(file) ?? []) visit(next, [...path, file]);
    state.set(file, 'done');
  };
  for (const file of importsOf.keys()) visit(file, []);
  t.deepEqual(circles, []);
});

/** Functions short enough to read at once: none in tasks/ of this many lines or more (its signature to its closing brace). */
const LONGEST_FUNCTION = 80;

test(`no function in tasks/ is ${LONGEST_FUNCTION} lines or longer`, (t) => {
  const long: string[] = [];
  for (const file of sources(TASKS)) {
    const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
    const visit = (node: ts.Node): void => {
      if (ts.isFunctionLike(node) && 'body' in node && node.body) {
        const first = source.getLineAndCharacterOfPosition(node.getStart(source)).line;
        const lines = source.getLineAndCharacterOfPosition(node.end).line - first + 1;
        if (lines >= LONGEST_FUNCTION) long.push(`${relative(TASKS, file)}:${first + 1} (${lines} lines)`);
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  t.deepEqual(long, []);
});

/** Every field name the inventory file may hold with an underscore in it (`space_quota`): the schema's keys, all the way down. */
function snakeFieldsOf(schema: ZodTypeAny, found = new Set<string>()): Set<string> {
  const def = schema._def as {
    innerType?: ZodTypeAny;
    schema?: ZodTypeAny;
    type?: ZodTypeAny;
    valueType?: ZodTypeAny;
    options?: ZodTypeAny[];
  };
  if (schema instanceof ZodObject)
    for (const [key, field] of Object.entries(schema.shape as Record<string, ZodTypeAny>)) {
      if (key.includes('_')) found.add(key);
      snakeFieldsOf(field, found);
    }
  for (const inner of [def.innerType, def.schema, def.type, def.valueType, ...(def.options ?? [])])
    if (inner instanceof ZodType) snakeFieldsOf(inner, found);
  return found;
}

test("nothing outside inventory/ reads a field by the file's snake_case name: the loader hands on the camelCased model", (t) => {
  const fields = snakeFieldsOf(documentSchema);
  snakeFieldsOf(memberSchema, fields);
  t.true(fields.has('space_quota') && fields.has('trusted_gpg_keys') && fields.has('role_id'), 'the walk reaches nested fields');
  const reads: string[] = [];
  for (const file of sources(TASKS).filter((path) => layerOf(path) !== 'inventory')) {
    const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
    const visit = (node: ts.Node): void => {
      const name = ts.isPropertyAccessExpression(node)
        ? node.name.text
        : ts.isElementAccessExpression(node) && ts.isStringLiteral(node.argumentExpression)
          ? node.argumentExpression.text
          : ts.isBindingElement(node) && ts.isObjectBindingPattern(node.parent)
            ? (node.propertyName ?? node.name).getText(source)
            : undefined;
      if (name !== undefined && fields.has(name))
        reads.push(`${relative(TASKS, file)}:${source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1} ${name}`);
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  t.deepEqual(reads, []);
});

/**
 * Lines the formatter cannot bring within its width, by file and how the line starts: one token that must stay whole.
 * CALENDAR is a regular expression literal (a RegExp built from joined strings would hide what it matches).
 */
const WIDE_LINES: readonly { file: string; starts: string }[] = [{ file: 'inventory/schema.ts', starts: '  /^(minutely|hourly|daily|' }];

test("no line in tasks/ is wider than the formatter's lineWidth", (t) => {
  const biome = JSON.parse(readFileSync(resolve('biome.json'), 'utf8')) as {
    formatter?: { lineWidth?: number };
    javascript?: { formatter?: { lineWidth?: number } };
  };
  const width = biome.javascript?.formatter?.lineWidth ?? biome.formatter?.lineWidth;
  t.is(typeof width, 'number', 'biome.json sets formatter.lineWidth');
  const wide: string[] = [];
  for (const file of sources(TASKS)) {
    const name = relative(TASKS, file);
    readFileSync(file, 'utf8')
      .split('\n')
      .forEach((line, i) => {
        if (line.length <= width! || WIDE_LINES.some((allowed) => allowed.file === name && line.startsWith(allowed.starts))) return;
        wide.push(`${name}:${i + 1} (${line.length})`);
      });
  }
  t.deepEqual(wide, []);
});
