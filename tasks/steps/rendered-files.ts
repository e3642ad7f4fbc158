import { join, resolve } from 'node:path';
import { sha256 } from '../core/digest.ts';
import { PRIVATE_FILE_MODE, PUBLIC_FILE_MODE, readIfExists, writeFileAtomic } from '../core/files.ts';
import type { Change, Step } from '../core/step.ts';
import type { RenderedFile } from '../render/member.ts';
import { deployStep } from './deploy-step.ts';

/**
 * The record of what was last rendered for each member, kept in the state directory as digests plus the
 * secret-free display text. It lets dry-run show, per host, exactly how the member's configuration
 * changes. No secret is stored: a change inside a secret shows as a changed digest.
 */

interface RecordedFile {
  sha256: string;
  display: string;
}

type RenderRecord = { [file: string]: RecordedFile };

export function renderedFilesStep({
  stateDir,
  rendered,
}: {
  stateDir: string;
  rendered: ReadonlyMap<string, RenderedFile[]>;
}): Step<RenderRecord, RenderedFile> {
  const recordPath = (member: string) => join(stateDir, 'rendered', `${member}.json`);
  return {
    name: 'render',
    targets: [...rendered.keys()],
    async check(member) {
      const text = readIfExists(recordPath(member));
      return text ? (JSON.parse(text) as RenderRecord) : {};
    },
    plan(record, member) {
      const changes: Change<RenderedFile>[] = [];
      for (const file of rendered.get(member) ?? []) {
        const recorded = record[file.name];
        if (recorded?.sha256 === sha256(file.content)) continue;
        const verb = recorded ? 'update' : 'create';
        const secretOnly = recorded !== undefined && recorded.display === file.display;
        changes.push({
          summary: `${verb} ${file.name}${secretOnly ? ' (only secret content changed; redacted)' : ''}`,
          ...(secretOnly ? {} : { diff: { label: `${member}/${file.name}`, before: recorded?.display ?? '', after: file.display } }),
          action: file,
        });
      }
      return changes;
    },
    async apply(changes, member, record) {
      const next: RenderRecord = { ...record };
      for (const { action: file } of changes) next[file.name] = { sha256: sha256(file.content), display: file.display };
      writeFileAtomic(recordPath(member), `${JSON.stringify(next, null, 2)}\n`, PRIVATE_FILE_MODE);
    },
  };
}

/** Writes rendered files for review: DIR/<member>/<file>; files holding secrets are 0600, directories 0700. */
export function writeRendered(dir: string, rendered: Map<string, RenderedFile[]>): string[] {
  const written: string[] = [];
  for (const [member, files] of rendered) {
    for (const file of files) {
      const path = join(resolve(dir), member, file.name);
      writeFileAtomic(path, file.content, file.containsSecrets ? PRIVATE_FILE_MODE : PUBLIC_FILE_MODE);
      written.push(path);
    }
  }
  return written;
}

declare module './deploy-step.ts' {
  interface PassSteps {
    render: true;
  }
}

/** What a pass deploys, rendered and recorded in the state directory (or written for review: --render-only). */
export const render = deployStep({
  id: 'render',
  kind: 'operation',
  on: 'control node',
  selectable: false,
  changes: [],
  doc: "domain XML, cloud-init and each guest's contents, recorded in the state directory",
  async run({ pass }, run) {
    const rendered = run.renderPass(pass);
    if (run.options.renderOnly !== undefined) {
      run.written.push(...writeRendered(run.options.renderOnly, rendered.files));
      return [];
    }
    return run.runner.runStep(renderedFilesStep({ stateDir: run.resources.inventory.stateDir, rendered: rendered.files }));
  },
});
