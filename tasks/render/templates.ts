import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import ejs from 'ejs';
import { PACKAGE_ROOT } from '../core/package-root.ts';

const TEMPLATE_DIR = join(PACKAGE_ROOT, 'templates');
const cache = new Map<string, ejs.TemplateFunction>();

/** Renders templates/<name> with ejs; compiled templates are cached for the process. */
export function renderTemplate(name: string, data: object): string {
  let template = cache.get(name);
  if (!template) {
    const path = join(TEMPLATE_DIR, name);
    template = ejs.compile(readFileSync(path, 'utf8'), {
      filename: path,
      strict: true,
      localsName: 'it',
      destructuredLocals: Object.keys(data),
    });
    cache.set(name, template);
  }
  return template(data);
}
