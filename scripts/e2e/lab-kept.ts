/**
 * Set (to 1) by `npm run test:e2e` (scripts/e2e/run.ts) for the files it runs: the lab stays up from one file to the
 * next, each file clearing the VMs of the one before (lab.ts clear, ~3 s) instead of a lab:down and a lab:up (~20 s),
 * and the runner takes it down before the first file and after the last. A file run by ava alone takes the lab down
 * and up itself, as before.
 */
export const LAB_KEPT_ENV = 'ETCD_KVM_E2E_LAB_KEPT';

export const labKept = (env: NodeJS.ProcessEnv = process.env): boolean => env[LAB_KEPT_ENV] === '1';
