import test from 'ava';
import { readFileSync } from 'node:fs';
import { agentConfig } from '../../tasks/render/guest/member-agent.ts';
import { baseDocument, load } from '../helpers/inventory.ts';

/**
 * The members' agent (agent/etcd-kvm-agent.py) reads the configuration render/guest/member-agent.ts writes
 * (agentConfig, typed as AgentConfig): one file, two languages. Every key the Python reads is written, and
 * every key written is read, so neither side can rename or drop one alone.
 */

const AGENT = readFileSync('agent/etcd-kvm-agent.py', 'utf8');

/** The agent's names for parts of its configuration, each checked to be taken from where the table says. */
const ALIASES: Record<string, { path: string; taken: RegExp }> = {
  config: { path: '', taken: /^CONFIG = "\/etc\/etcd-kvm\/agent\/backup\.json"$/m },
  s3: { path: 's3', taken: /\bs3 = config\["s3"\]/ },
  settings: { path: 'defrag', taken: /\bsettings = config\["defrag"\]/ },
  rule: { path: 'defrag.rule', taken: /settings\["rule"\]/ },
  drill: { path: 'verify', taken: /\bdrill = config\["verify"\]/ },
};

/** Every `name["a"]["b"]` and `name.get("a")` read in the agent, as a dotted path from the configuration's top. */
function pathsRead(): Set<string> {
  const read = new Set<string>();
  for (const [alias, { path }] of Object.entries(ALIASES)) {
    const chain = new RegExp(`\\b${alias}((?:\\["[a-z_0-9]+"\\]|\\.get\\("[a-z_0-9]+")+)`, 'g');
    for (const [, keys] of AGENT.matchAll(chain)) {
      const names = [...keys!.matchAll(/"([a-z_0-9]+)"/g)].map((match) => match[1]!);
      read.add([path, ...names].filter(Boolean).join('.'));
    }
  }
  return read;
}

/** Every path in what TypeScript writes, leaves and the objects above them. */
function pathsWritten(value: unknown, prefix = ''): string[] {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return [prefix];
  return [
    ...(prefix ? [prefix] : []),
    ...Object.entries(value).flatMap(([key, inner]) => pathsWritten(inner, prefix ? `${prefix}.${key}` : key)),
  ];
}

/** Backups, their drills, an encryption key and scheduled defragmentation: every key the agent can be given. */
function everything() {
  const doc = baseDocument();
  const s3 = { endpoint: 'https://s3.example.org', bucket: 'bkt', object_prefix: 'lab', access_key: 'AK', secret_key: 'SK' };
  const inventory = load({
    ...doc,
    backup: { enabled: true, verify: { enabled: true } },
    maintenance: { defrag: { enabled: true } },
    defaults: { ...(doc.defaults as object), restore: { s3, encryption_key: 'ab'.repeat(32) } },
  });
  return agentConfig(inventory, inventory.members[0]!, 'cluster-1');
}

test('the agent takes its configuration from the one file, and its names for parts of it from where the table says', (t) => {
  for (const [alias, { taken }] of Object.entries(ALIASES)) t.regex(AGENT, taken, alias);
});

test('every key the agent reads is one render/guest/member-agent.ts writes', (t) => {
  const written = new Set(pathsWritten(everything()));
  t.true(pathsRead().size > 20, 'the reads are found');
  t.deepEqual(
    [...pathsRead()].filter((path) => !written.has(path)),
    [],
  );
});

test('every key written is read by the agent (none left behind by a rename)', (t) => {
  const read = pathsRead();
  // A key is read when the agent reads it or anything below it.
  const isRead = (path: string) => [...read].some((seen) => seen === path || seen.startsWith(`${path}.`));
  t.deepEqual(
    pathsWritten(everything()).filter((path) => !isRead(path)),
    [],
  );
});
