import { isMap, isScalar, isSeq, type Document, type LineCounter, type Node } from 'yaml';
import type { Path } from './problems.ts';

/**
 * Where a path of the parsed document is written in the inventory's text: what a problem's reader needs
 * to find it in an editor (file:line:column), and the value found there when it is a plain scalar.
 */
export interface SourceSpot {
  line: number;
  column: number;
  /** The scalar as written (`true`, `"0x18"`), absent for a mapping, a list, or a value that may be a secret. */
  found?: string;
}

export type Locate = (path: Path) => SourceSpot | undefined;

/** Values under keys named like these are never echoed: passwords, keys, tokens, PEM material. */
const SECRET_KEY = /password|secret|token|key|passphrase|cert|pem/i;

const shown = (node: Node, key: string | number | undefined): string | undefined => {
  if (!isScalar(node) || (typeof key === 'string' && SECRET_KEY.test(key))) return undefined;
  const source = typeof node.source === 'string' ? node.source : undefined;
  const text = node.type === 'PLAIN' && source !== undefined ? source : JSON.stringify(node.value);
  return text !== undefined && text.length <= 80 ? text : undefined;
};

/**
 * Follows `path` through the document's nodes. A path that ends in a key the file has points at that key;
 * one that goes further than the file (a required key left out) points at the deepest part it has.
 */
export function locator(document: Document, lines: LineCounter): Locate {
  const at = (offset: number | undefined) => (offset === undefined ? undefined : lines.linePos(offset));
  return (path) => {
    let node: unknown = document.contents;
    let spot: SourceSpot | undefined;
    for (const [i, part] of path.entries()) {
      const last = i === path.length - 1;
      let keyOffset: number | undefined;
      let next: unknown;
      if (isMap(node)) {
        const pair = node.items.find((item) => isScalar(item.key) && item.key.value === part);
        if (!pair) break;
        keyOffset = isScalar(pair.key) ? pair.key.range?.[0] : undefined;
        next = pair.value;
      } else if (isSeq(node) && typeof part === 'number') {
        next = node.items[part];
        keyOffset = (next as Node | undefined)?.range?.[0];
      } else break;
      const position = at(keyOffset);
      if (position) spot = { line: position.line, column: position.col };
      node = next;
      if (last && spot && node) {
        const found = shown(node as Node, part);
        if (found !== undefined) spot.found = found;
      }
    }
    return spot;
  };
}

export const describeSpot = (file: string, spot: SourceSpot) =>
  `in ${file}:${spot.line}:${spot.column}${spot.found !== undefined ? `, found ${spot.found}` : ''}`;
