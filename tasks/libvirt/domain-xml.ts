import { XMLBuilder, XMLParser } from 'fast-xml-parser';

/**
 * Semantic comparison of a rendered domain with libvirt's definition of it. libvirt adds a uuid, PCI
 * addresses, controllers and defaults, and expands machine aliases, so text equality says nothing.
 * Instead the live XML is projected onto the rendered one (only what we specify is kept, elements
 * matched by content) and the two projections are compared and diffed.
 */

/** Attributes ("@name") and text ("#text") are strings; child elements are lists (text-only ones of strings). */
type XmlNode = { [key: string]: XmlValue[] | string };
type XmlValue = XmlNode | string;

const options = {
  ignoreAttributes: false,
  attributeNamePrefix: '@',
  textNodeName: '#text',
  parseTagValue: false,
  parseAttributeValue: false,
  trimValues: true,
};
const parser = new XMLParser({ ...options, isArray: (_name, _path, _leaf, isAttribute) => !isAttribute });
const builder = new XMLBuilder({ ...options, format: true, indentBy: '  ', suppressEmptyNode: true });

const parse = (xml: string): XmlNode => parser.parse(xml) as XmlNode;

/** Values libvirt rewrites into an equivalent form. */
function equivalent(attribute: string, wanted: string, live: string): boolean {
  if (wanted === live) return true;
  // machine='q35' is stored as the versioned type it resolved to, e.g. pc-q35-7.2.
  if (attribute === '@machine') return live.startsWith(`pc-${wanted}-`) || (wanted === 'pc' && live.startsWith('pc-i440fx-'));
  return false;
}

function projectValue(wanted: XmlValue, live: XmlValue | undefined): XmlValue {
  if (typeof wanted === 'string') return typeof live === 'string' ? live : typeof live?.['#text'] === 'string' ? live['#text'] : '';
  return project(wanted, typeof live === 'object' ? live : undefined);
}

function project(wanted: XmlNode, live: XmlNode | undefined): XmlNode {
  const projected: XmlNode = {};
  if (!live) return projected;
  for (const [key, value] of Object.entries(wanted)) {
    const liveValue = live[key];
    if (typeof value === 'string') {
      if (typeof liveValue === 'string') projected[key] = equivalent(key, value, liveValue) ? value : liveValue;
      continue;
    }
    const candidates = Array.isArray(liveValue) ? [...liveValue] : [];
    projected[key] = value.map((child) => {
      // The live element most like this one (libvirt reorders some devices and adds others).
      let best = -1;
      let bestScore = Number.POSITIVE_INFINITY;
      candidates.forEach((candidate, i) => {
        const score = distance(child, projectValue(child, candidate));
        if (score < bestScore) [best, bestScore] = [i, score];
      });
      return projectValue(child, best < 0 ? undefined : candidates.splice(best, 1)[0]);
    });
    // A disk or NIC attached by hand is drift (the description says so); the controllers, inputs and
    // the like libvirt adds by itself are not.
    if (ATTACHABLE.has(key)) for (const extra of candidates) (projected[key] as XmlValue[]).push(extra);
  }
  return projected;
}

/** Devices an operator attaches: one present only in the live definition shows in the comparison. */
const ATTACHABLE = new Set(['disk', 'interface', 'filesystem', 'hostdev']);

/** How many leaves differ between a wanted tree and a projection onto it. */
function distance(wanted: XmlValue, projected: XmlValue | undefined): number {
  if (typeof wanted === 'string') return wanted === projected ? 0 : 1;
  if (typeof projected !== 'object') return 1;
  let count = 0;
  for (const [key, value] of Object.entries(wanted)) {
    const other = projected[key];
    if (typeof value === 'string') count += other === value ? 0 : 1;
    else for (const [i, child] of value.entries()) count += distance(child, Array.isArray(other) ? other[i] : undefined);
  }
  return count;
}

export interface DomainComparison {
  same: boolean;
  /** The rendered XML as canonical text, and the live one projected onto it: what a diff shows. */
  wanted: string;
  live: string;
}

/** The XML as the comparison prints it: what a diff of a domain not yet defined shows. */
export const canonicalDomainXml = (xml: string): string => builder.build(parse(xml)) as string;

export function compareDomainXml(renderedXml: string, liveXml: string): DomainComparison {
  const wantedTree = parse(renderedXml);
  // The owner's mark is the ownership step's (libvirt/ownership.ts), which sets it without a redefinition.
  for (const domain of wantedTree.domain ?? []) if (typeof domain === 'object') delete domain.metadata;
  const wanted = builder.build(wantedTree) as string;
  const live = builder.build(project(wantedTree, parse(liveXml))) as string;
  return { same: wanted === live, wanted, live };
}

/**
 * `virsh dominfo`'s states of a domain that is no longer active: anything else (running, paused,
 * "in shutdown", a state not read) still has its QEMU, its disks in use, and refuses `virsh start`
 * ("Domain is already active", seen in CI once after a stop judged done at "in shutdown").
 */
const INACTIVE_STATES = new Set(['shut off', 'crashed']);

/** The state and autostart flag from `virsh dominfo`: `running` as libvirt says it, `active` until the domain is off. */
export function parseDomInfo(output: string): { running: boolean; active: boolean; autostart: boolean; state: string } {
  const state = output.match(/^State:\s+(.+)$/m)?.[1]?.trim() ?? 'unknown';
  return { running: state === 'running', active: !INACTIVE_STATES.has(state), autostart: /^Autostart:\s+enable/m.test(output), state };
}

/** The domain's UUID from `virsh dominfo`: libvirt makes it when the domain is first defined and keeps it across redefinitions. */
export const domainUuid = (output: string): string | undefined => output.match(/^UUID:\s+([0-9a-f-]{36})\s*$/m)?.[1];
