import { ensurePackages, PACKAGE_SETS, PackageInstallError, type PackageSet } from './packages.ts';

/**
 * `tsx scripts/system/ensure-packages.ts test|e2e|lab`: installs the Debian packages that set needs
 * and are missing, printing what it installs; silent when everything is there. `npm test` and
 * `npm run test:e2e` run it first, so each is complete on its own on a fresh machine.
 */

const set = process.argv[2];
if (!set || !(set in PACKAGE_SETS)) {
  console.error(`usage: tsx scripts/system/ensure-packages.ts ${Object.keys(PACKAGE_SETS).join('|')}`);
  process.exit(2);
}
try {
  await ensurePackages(set as PackageSet, (line) => console.log(`packages: ${line}`));
} catch (error) {
  if (!(error instanceof PackageInstallError)) throw error;
  console.error(`packages: ${error.message}`);
  process.exit(1);
}
