import { spawnSync } from 'node:child_process';

export interface Completed {
  status: number;
  stdout: string;
  stderr: string;
}

/** Runs a real tool (openssl, virt-xml-validate, cloud-init, etcdctl) with an argument array. */
export function run(
  command: string,
  args: string[],
  options: { input?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {},
): Completed {
  const result = spawnSync(command, args, {
    encoding: 'utf8',
    input: options.input,
    env: options.env ?? process.env,
    timeout: options.timeoutMs ?? 60_000,
  });
  if (result.error) throw result.error;
  return { status: result.status ?? -1, stdout: result.stdout, stderr: result.stderr };
}
