// Whether the installed command may run dist/: a build (dist/.built, written last by scripts/build.mjs)
// not older than any source under tasks/, nor than package-lock.json where there is one: the bundle
// holds packages too (etcd3, gRPC), and an `npm install` of another release of them must not leave the
// command on the old ones. Plain JS: it runs before any loader is registered.
import { readdirSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** `root`: the package's folder, as a file URL ending in a slash. */
export function freshBuild(root) {
  let built;
  try {
    built = statSync(new URL('dist/.built', root)).mtimeMs;
  } catch {
    return false;
  }
  const lock = (() => {
    try {
      return statSync(new URL('package-lock.json', root)).mtimeMs;
    } catch {
      return 0;
    }
  })();
  if (lock > built) return false;
  // Installed from a tarball (under node_modules/): npm writes every file at its install time, dist/ before tasks/,
  // so the times say nothing there, and nobody edits an installed package's sources; its build came with it.
  if (fileURLToPath(root).split('/').includes('node_modules')) return true;
  const tasks = fileURLToPath(new URL('tasks/', root));
  return readdirSync(tasks, { recursive: true }).every((file) => statSync(`${tasks}${file}`).mtimeMs <= built);
}
