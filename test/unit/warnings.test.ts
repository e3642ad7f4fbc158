import test from 'ava';
import { spawnSync } from 'node:child_process';

/** The CLIs drop the one warning known to be noise (DEP0123 from etcd3's authenticator) and print the rest. */

test('known-noise warnings are dropped, every other warning is still printed', (t) => {
  const script = `
    const { silenceKnownWarnings } = await import('./tasks/core/warnings.ts');
    silenceKnownWarnings();
    process.emitWarning('TLS server name is an IP', { code: 'DEP0123', type: 'DeprecationWarning' });
    process.emitWarning('something else', { code: 'DEP0999', type: 'DeprecationWarning' });
    process.emitWarning('no code at all');
  `;
  const child = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { encoding: 'utf8' });
  t.is(child.status, 0, child.stderr);
  t.false(child.stderr.includes('DEP0123'), child.stderr);
  t.regex(child.stderr, /\[DEP0999\] DeprecationWarning: something else/);
  t.regex(child.stderr, /Warning: no code at all/);
});
