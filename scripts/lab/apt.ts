import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { $ } from 'zx';

/**
 * apt with a configuration of the lab's own, in a directory of its own: its sources, lists and cache,
 * never the machine's (whose apt configuration the lab must not change). Read after the machine's
 * apt.conf.d, so these settings win; the update hooks there (AppStream, PackageKit) would refresh the
 * machine's own caches, so they are cleared.
 */

export const DEBIAN_KEYRING = '/usr/share/keyrings/debian-archive-keyring.gpg';

export interface OwnApt {
  /** apt-get with the lab's configuration, in `cwd` when given. */
  run(args: string[], cwd?: string): ReturnType<typeof $>;
  /** The configuration's path. */
  config: string;
}

/** `sources` are `deb URL SUITE COMPONENT` lines, signed by Debian's archive key; `settings` are more apt.conf lines. */
export function ownApt(dir: string, sources: readonly string[], settings: readonly string[] = []): OwnApt {
  for (const sub of ['sources.list.d', 'preferences.d', 'lists/partial', 'cache/archives/partial'])
    mkdirSync(join(dir, sub), { recursive: true, mode: 0o755 });
  const signed = sources.map((line) => `${line.replace(/^deb /, `deb [arch=amd64 signed-by=${DEBIAN_KEYRING}] `)}\n`);
  writeFileSync(join(dir, 'sources.list'), signed.join(''));
  const config = join(dir, 'apt.conf');
  writeFileSync(
    config,
    [
      `Dir::Etc::sourcelist "${join(dir, 'sources.list')}";`,
      `Dir::Etc::sourceparts "${join(dir, 'sources.list.d')}";`,
      `Dir::Etc::preferences "${join(dir, 'preferences')}";`,
      `Dir::Etc::preferencesparts "${join(dir, 'preferences.d')}";`,
      `Dir::State::Lists "${join(dir, 'lists')}";`,
      `Dir::Cache "${join(dir, 'cache')}";`,
      'APT::Architecture "amd64";',
      ...settings,
      '#clear APT::Update::Post-Invoke-Success;',
      '#clear APT::Update::Post-Invoke;',
      '',
    ].join('\n'),
  );
  return { config, run: (args, cwd) => $({ cwd })`apt-get -q -c ${config} ${args}` };
}
