import {
  z,
  ZodArray,
  ZodBoolean,
  ZodDefault,
  ZodEffects,
  ZodEnum,
  ZodLiteral,
  ZodNumber,
  ZodObject,
  ZodOptional,
  ZodRecord,
  ZodString,
  ZodUnion,
  ZodUnknown,
  type ZodTypeAny,
} from 'zod';
import { zodToJsonSchema } from 'zod-to-json-schema';
import { Secret } from '../../tasks/core/secret.ts';
import { documentSchema, memberDefaultsSchema, memberSchema } from '../../tasks/inventory/schema.ts';

/**
 * The inventory reference (docs/inventory.md) and its JSON Schema (schema/inventory.schema.json), both
 * made from tasks/inventory/schema.ts: the schema's `.describe()` texts are the only place a field is
 * explained.
 */

/**
 * The inventory as one document. The loader checks `defaults` and each entry of `members` with their own
 * schemas (after merging the defaults into each member), so documentSchema holds them as plain records;
 * here they are the member schemas, which is what a valid file holds.
 */
export const inventorySchema = documentSchema.extend({
  defaults: memberDefaultsSchema.default({}).describe(documentSchema.shape.defaults.description ?? ''),
  members: z
    .array(memberSchema)
    .min(1)
    .describe(documentSchema.shape.members.description ?? ''),
});

/** A field's schema without its wrappers: whether it may be left out, its default, its description. */
interface Unwrapped {
  core: ZodTypeAny;
  required: boolean;
  defaultValue?: unknown;
  /** Its value is a Secret once loaded: masked wherever the tool shows it. */
  secret: boolean;
}

function unwrap(schema: ZodTypeAny): Unwrapped {
  let current = schema;
  let required = true;
  let defaultValue: unknown;
  let secret = false;
  for (;;) {
    if (current instanceof ZodOptional) {
      required = false;
      current = current._def.innerType;
    } else if (current instanceof ZodDefault) {
      required = false;
      if (defaultValue === undefined) defaultValue = current._def.defaultValue();
      current = current._def.innerType;
    } else if (current instanceof ZodEffects) {
      // A transform that makes a Secret of the text: the only transforms the schema has are that and the MAC's lower case.
      if (current._def.effect.type === 'transform') {
        const parsed = current.safeParse('');
        if (parsed.success && parsed.data instanceof Secret) secret = true;
      }
      current = current._def.schema;
    } else {
      return { core: current, required, ...(defaultValue === undefined ? {} : { defaultValue }), secret };
    }
  }
}

const code = (text: string) => `\`${text}\``;

function range(min: number | undefined, max: number | undefined): string {
  if (min !== undefined && max !== undefined) return ` (${min}–${max})`;
  if (min !== undefined) return ` (≥ ${min})`;
  if (max !== undefined) return ` (≤ ${max})`;
  return '';
}

function numberType(schema: ZodNumber): string {
  let min: number | undefined;
  let max: number | undefined;
  const integer = schema._def.checks.some((check) => check.kind === 'int');
  for (const check of schema._def.checks) {
    if (check.kind === 'min') min = check.inclusive ? check.value : check.value + (integer ? 1 : 0);
    if (check.kind === 'max') max = check.inclusive ? check.value : check.value - (integer ? 1 : 0);
  }
  return `${integer ? 'integer' : 'number'}${range(min, max)}`;
}

function alternatives(types: string[]): string {
  const distinct = [...new Set(types)];
  return distinct.length === 1 ? distinct[0]! : `${distinct.slice(0, -1).join(', ')} or ${distinct.at(-1)}`;
}

/** A field's type as the reference shows it. */
function typeOf(schema: ZodTypeAny): string {
  const { core, secret } = unwrap(schema);
  if (core instanceof ZodString) return secret ? 'string (secret)' : 'string';
  if (core instanceof ZodNumber) return numberType(core);
  if (core instanceof ZodBoolean) return 'boolean';
  if (core instanceof ZodEnum) return alternatives((core.options as string[]).map(code));
  if (core instanceof ZodLiteral) return code(JSON.stringify(core.value));
  if (core instanceof ZodUnion) {
    const options = (core.options as ZodTypeAny[]).map((option) => unwrap(option).core);
    // `""` beside a string type says "may be empty", which the default and the description say better.
    const hasString = options.some((option) => option instanceof ZodString);
    const shown = options.filter((option) => !(hasString && option instanceof ZodLiteral && option.value === ''));
    return secret ? 'string (secret)' : alternatives(shown.map(typeOf));
  }
  if (core instanceof ZodArray) {
    const element = unwrap(core.element).core;
    if (element instanceof ZodObject) return 'list of objects';
    return element instanceof ZodString ? 'list of strings' : `list of ${typeOf(core.element)}`;
  }
  if (core instanceof ZodRecord) {
    return `map: name → ${unwrap(core.valueSchema).core instanceof ZodObject ? 'object' : typeOf(core.valueSchema)}`;
  }
  if (core instanceof ZodObject) return 'object';
  if (core instanceof ZodUnknown) return 'any';
  throw new Error(`the docs generator does not know the zod type ${core.constructor.name}: teach scripts/docs/inventory.ts`);
}

function defaultOf(schema: ZodTypeAny): string {
  const { required, defaultValue } = unwrap(schema);
  if (required) return '**required**';
  if (defaultValue === undefined) return '—';
  return code(typeof defaultValue === 'string' && defaultValue !== '' ? defaultValue : JSON.stringify(defaultValue));
}

/** The object a field holds, directly or as the elements of a list or the values of a map, with that path. */
function objectBelow(schema: ZodTypeAny, path: string): { path: string; object: ZodObject<z.ZodRawShape> } | undefined {
  const { core } = unwrap(schema);
  if (core instanceof ZodObject) return { path, object: core };
  if (core instanceof ZodArray) return objectBelow(core.element, `${path}[]`);
  if (core instanceof ZodRecord) return objectBelow(core.valueSchema, `${path}.<name>`);
  return undefined;
}

interface Row {
  path: string;
  type: string;
  default: string;
  description: string | undefined;
}

interface Section {
  path: string;
  description: string | undefined;
  rows: Row[];
}

/** `defaults` takes the member fields, documented once under `members[]`. */
const NOT_DESCENDED = new Set(['defaults']);

/** One section per object of the inventory, depth first, in the schema's order. */
export function inventorySections(): Section[] {
  const sections: Section[] = [];
  const visit = (object: ZodObject<z.ZodRawShape>, path: string, description: string | undefined) => {
    const section: Section = { path, description, rows: [] };
    sections.push(section);
    const below: [ZodObject<z.ZodRawShape>, string, string | undefined][] = [];
    for (const [key, field] of Object.entries(object.shape) as [string, ZodTypeAny][]) {
      const fieldPath = path ? `${path}.${key}` : key;
      section.rows.push({ path: fieldPath, type: typeOf(field), default: defaultOf(field), description: field.description });
      const nested = objectBelow(field, fieldPath);
      if (nested && !NOT_DESCENDED.has(fieldPath)) below.push([nested.object, nested.path, field.description]);
    }
    for (const [nested, nestedPath, nestedDescription] of below) visit(nested, nestedPath, nestedDescription);
  };
  visit(inventorySchema, '', undefined);
  return sections;
}

/** Every field of the inventory that has no description, by path: none, or the reference has holes. */
export function undescribedFields(): string[] {
  return inventorySections().flatMap((section) => section.rows.filter((row) => !row.description?.trim()).map((row) => row.path));
}

/** Text inside a Markdown table cell: pipes escaped, one line. */
const cell = (text: string) => text.replaceAll('|', '\\|').replaceAll('\n', ' ');

const INTRO = `# Inventory reference

<!-- Generated by \`npm run docs:generate\` from tasks/inventory/schema.ts: edit the descriptions there, not this file. -->

An inventory is one YAML file with the sections below. Field names and defaults follow the seed Terraform
module's input variables, so values port straight across; hypervisors, pools, ports and the rest are this
tool's own. Every object is strict: an unknown key is an error, with the nearest known key suggested. All
problems are reported at once, each with its path and, below it, where the file has it and the value found
there (never a value under a key that may hold a secret), e.g.
\`members[1].libvirt_networks[0].gateway (member etcd-2): 10.20.0.1 is outside 10.10.0.12/24 — …\` then
\`in inventories/prod.yaml:41:9, found 10.20.0.1\`; the run stops with exit 2 before anything is changed. A
problem in a value a member took from \`defaults\` is said once, at \`defaults.<field>\`, with the members that
took it. Broken YAML is said by its first error, with the file's lines there; a private key to log in with that
cannot be read is bad input too (exit 2 at \`hypervisors.<name>.private_key\`), before any host is asked.

Editors complete and check inventories against [schema/inventory.schema.json](../schema/inventory.schema.json),
generated from the same schema: put \`# yaml-language-server: $schema=../schema/inventory.schema.json\` (the path
relative to the inventory) on the file's first line, as every shipped inventory does. The JSON Schema checks
types, ranges, patterns and unknown keys, and is valid under ajv's strict mode (with ajv-formats), so a pipeline
can check inventories with it too (\`npm test\` does, for every shipped one); the rules further below are the
loader's alone. Where the schema takes two spellings (a prefix length as 24 or "24"), the loader takes exactly those.

\`defaults\` takes any member field but \`name\` and \`state\`; a field set on a member replaces the default as a
whole (a shallow merge, as Ansible's variable precedence does). PEM fields take PEM text or a file path
relative to the inventory. A field of type "string (secret)" is never shown by the tool: diffs, logs and
\`--json\` mask it.
`;

const RULES = `## Rules beyond the fields

Validation rules beyond field types: unique member names, IPs and MACs; IPs are host addresses of their
prefix; gateways inside the prefix; exactly one bootstrap member while initializing; \`grpc_gateway_enabled\`
needs \`client_cert_auth: false\`; \`root_password\` in password mode; \`initial_members\` consistent with the
members; a libvirt network by name xor id; every member has an interface; the hypervisor exists (and is named
when there are several); a base image when there is no \`volume_id\`; \`tls\` all or nothing; distinct client and
peer ports; every enabled service has its required settings (chrony a source; fluent-bit its forward target,
tag and shared key; its dynamic configuration fluent-bit itself, a prefix, endpoints, CA and exactly one kind
of etcd credentials, or a repo, ref, deploy key and server key; Vault-rendered credentials the vault agent;
the vault agent its address and AppRole ids; restore its S3 settings, a 64-hex-digit key, an RFC 3339
\`backup_timestamp\`, the same settings on every member); \`install_dependencies\` needs an etcd release tag;
a member whose etcd listens on macvtap needs \`reach_via: direct\`.

Input that can't hurt: every string that can land in a line-based file (systemd units, the environment file,
fstab, chrony.conf, sudoers, fluent-bit's configuration) is one line without control characters (PEM text,
armored keys and passwords are exempt: libraries serialise them or they travel over gRPC); \`etcd.data_dir\` is
absolute, normalised and never a system directory; numbers have ranges that mean something (the ranges in the
tables); a PEM field holding text before its \`-----BEGIN\` line is refused without echoing it (it may be a key);
more than 100 YAML alias expansions are refused. Each refusal: exit 2, the field's path, a hint.

etcd binds to the member's first interface only (libvirt networks before macvtap), as the seed module does.
`;

/** docs/inventory.md. */
export function inventoryReference(): string {
  const parts = [INTRO];
  for (const section of inventorySections()) {
    parts.push(`## ${section.path ? code(section.path) : 'The document'}\n`);
    if (section.description) parts.push(`${section.description}\n`);
    parts.push('| field | type | default | description |', '| --- | --- | --- | --- |');
    for (const row of section.rows) {
      parts.push(`| ${code(row.path)} | ${cell(row.type)} | ${cell(row.default)} | ${cell(row.description ?? '')} |`);
    }
    parts.push('');
  }
  parts.push(RULES);
  return parts.join('\n');
}

/**
 * schema/inventory.schema.json. What JSON Schema does not express, and the loader checks: the refinements
 * (an IPv4 address's octets, a unicast MAC, a normalised data directory that is no system directory, a
 * permission's key xor prefix, `root` refused as a user or role), every rule across fields (tasks/inventory/
 * rules.ts: unique addresses, one bootstrap member, an enabled feature's required settings, …), and the merge of
 * `defaults` into each member (the schema checks each of them on its own, which is equivalent field by field).
 * No markdownDescription: ajv's strict mode, which many pipelines run, refuses keywords it does not know.
 */
export function inventoryJsonSchema(): string {
  const schema = zodToJsonSchema(inventorySchema, {
    $refStrategy: 'none',
  });
  const document = {
    $schema: (schema as { $schema?: string }).$schema,
    title: 'etcd-kvm inventory',
    $comment:
      'Generated by `npm run docs:generate` from tasks/inventory/schema.ts. The loader checks more than this: rules across fields, ' +
      'IPv4 and MAC values, and the defaults merged into each member (docs/inventory.md).',
    ...Object.fromEntries(Object.entries(schema).filter(([key]) => key !== '$schema')),
  };
  return `${JSON.stringify(document, null, 2)}\n`;
}
