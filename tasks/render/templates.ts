import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import ejs from 'ejs';

const TEMPLATE_DIR = fileURLToPath(new URL('../../templates/', import.meta.url));
const cache = new Map<string, ejs.TemplateFunction>();

/** Renders templates/<name> with ejs; compiled templates are cached for the process. */
export function renderTemplate(name: string, data: object): string {
  let template = cache.get(name);
  if (!template) {
    const path = `${TEMPLATE_DIR}${name}`;
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
