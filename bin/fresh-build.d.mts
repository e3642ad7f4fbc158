/** Whether the installed command may run dist/: a build not older than any source under tasks/. `root`: the package's folder, a file URL ending in a slash. */
export function freshBuild(root: URL): boolean;
