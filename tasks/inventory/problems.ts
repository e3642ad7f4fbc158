import type { ZodIssue } from 'zod';

export type Path = readonly (string | number)[];

/** One thing wrong with the inventory, located by its path in the document. */
export interface Problem {
  path: Path;
  message: string;
  hint?: string;
  /** A value written under `defaults`: the members that took it (said once, not once per member). */
  inheritedBy?: string[];
}

export function formatPath(path: Path): string {
  return path.reduce<string>((text, part) => {
    if (typeof part === 'number') return `${text}[${part}]`;
    return text ? `${text}.${part}` : part;
  }, '');
}

export function formatProblem(problem: Problem, memberNames: readonly (string | undefined)[] = []): string {
  const [head, index] = problem.path;
  const memberName = head === 'members' && typeof index === 'number' ? memberNames[index] : undefined;
  const where = formatPath(problem.path) || '(document)';
  const who = memberName
    ? ` (member ${memberName})`
    : problem.inheritedBy?.length
      ? ` (inherited by ${problem.inheritedBy.join(', ')})`
      : '';
  return `${where}${who}: ${problem.message}${problem.hint ? ` — ${problem.hint}` : ''}`;
}

/**
 * A member's problem in a value it took from `defaults` (the member's entry does not set that key) is the
 * default's problem: moved there, and said once with the members that took it, where it used to be said
 * once per member at a key the file does not have.
 */
export function atTheirSource(
  problems: readonly Problem[],
  rawMembers: readonly unknown[],
  rawDefaults: unknown,
  memberNames: readonly (string | undefined)[],
): Problem[] {
  // As written: possibly not a mapping at all (its own problem, reported as it is).
  const defaults = typeof rawDefaults === 'object' && rawDefaults !== null ? (rawDefaults as Record<string, unknown>) : {};
  const merged = new Map<string, Problem>();
  const out: Problem[] = [];
  for (const problem of problems) {
    const [head, index, key, ...rest] = problem.path;
    const entry = typeof index === 'number' ? (rawMembers[index] as Record<string, unknown> | undefined) : undefined;
    const inherited =
      head === 'members' && typeof key === 'string' && entry && typeof entry === 'object' && !(key in entry) && key in defaults;
    if (!inherited) {
      out.push(problem);
      continue;
    }
    const moved: Problem = { ...problem, path: ['defaults', key, ...rest] };
    const identity = formatProblem(moved);
    const name = memberNames[index as number] ?? `members[${index}]`;
    const known = merged.get(identity);
    if (known) known.inheritedBy!.push(name);
    else {
      const first = { ...moved, inheritedBy: [name] };
      merged.set(identity, first);
      out.push(first);
    }
  }
  return out;
}

function editDistance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let diagonal = row[0]!;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const above = row[j]!;
      row[j] = Math.min(row[j]! + 1, row[j - 1]! + 1, diagonal + (a[i - 1] === b[j - 1] ? 0 : 1));
      diagonal = above;
    }
  }
  return row[b.length]!;
}

export function closestKey(key: string, known: readonly string[]): string | undefined {
  let best: { key: string; distance: number } | undefined;
  for (const candidate of known) {
    const distance = editDistance(key, candidate);
    if (!best || distance < best.distance) best = { key: candidate, distance };
  }
  return best && best.distance <= Math.max(2, Math.floor(key.length / 3)) ? best.key : undefined;
}

/**
 * Turns zod's issues into problems. `knownKeys` maps a path (as formatted) to the keys its object accepts,
 * so an unknown key can be answered with the nearest known one.
 */
export function problemsFromZod(issues: readonly ZodIssue[], prefix: Path, knownKeysAt: (path: Path) => readonly string[]): Problem[] {
  const problems: Problem[] = [];
  for (const issue of issues) {
    const path = [...prefix, ...issue.path];
    if (issue.code === 'unrecognized_keys') {
      const known = knownKeysAt(issue.path);
      for (const key of issue.keys) {
        const suggestion = closestKey(key, known);
        problems.push({
          path: [...path, key],
          message: 'unknown key',
          hint: suggestion ? `did you mean '${suggestion}'?` : `known keys here: ${known.join(', ')}`,
        });
      }
    } else if (issue.code === 'invalid_type' && issue.received === 'undefined') {
      problems.push({ path, message: `is required (${issue.expected})` });
    } else if (issue.code === 'invalid_union') {
      // The branch of the value's own type says what is wrong with it ("0x18" as a prefix length); of the
      // branches' type errors, the union's own message when the schema gives one, else the first is more
      // precise than zod's "Invalid input".
      const inner = issue.unionErrors.flatMap((error) => error.issues).filter((inner) => inner.code !== 'invalid_literal');
      const ofItsType = inner.find((candidate) => candidate.code !== 'invalid_type');
      const own = issue.message !== 'Invalid input' ? issue.message : undefined;
      problems.push({ path, message: ofItsType?.message ?? own ?? inner[0]?.message ?? issue.message });
    } else {
      problems.push({ path, message: issue.message });
    }
  }
  return problems;
}
