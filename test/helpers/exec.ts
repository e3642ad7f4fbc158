import { execFile, spawnSync } from 'node:child_process';

export interface Completed {
  status: number;
  stdout: string;
  stderr: string;
}

/** Runs a real tool (openssl, virt-xml-validate, cloud-init, etcdctl) with an argument array. */
export function run(
  command: string,
  args: string[],
  options: { input?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number; cwd?: string } = {},
): Completed {
  const result = spawnSync(command, args, {
    encoding: 'utf8',
    cwd: options.cwd,
    input: options.input,
    env: options.env ?? process.env,
    timeout: options.timeoutMs ?? 60_000,
  });
  if (result.error) throw result.error;
  return { status: result.status ?? -1, stdout: result.stdout, stderr: result.stderr };
}

/** `run` without blocking the test's process: validations of several files go on side by side. */
export function runAsync(command: string, args: string[], options: { timeoutMs?: number } = {}): Promise<Completed> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { encoding: 'utf8', timeout: options.timeoutMs ?? 60_000 }, (error, stdout, stderr) => {
      if (error && typeof error.code !== 'number') reject(error);
      else resolve({ status: error ? (error.code as number) : 0, stdout, stderr });
    });
  });
}
