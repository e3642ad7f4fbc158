import { spawn, type ChildProcess } from 'node:child_process';
import { openSync } from 'node:fs';

/** Daemons a test started, stopped by PID when it ends, whatever happened. */
export class Processes {
  readonly #children: ChildProcess[] = [];

  start(command: string, args: string[], options: { env: NodeJS.ProcessEnv; logFile: string }): ChildProcess {
    const log = openSync(options.logFile, 'a');
    const child = spawn(command, args, { env: options.env, stdio: ['ignore', log, log] });
    this.#children.push(child);
    return child;
  }

  async stopAll(): Promise<void> {
    await Promise.all(
      this.#children.map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return resolve();
            const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
            child.once('exit', () => {
              clearTimeout(timer);
              resolve();
            });
            process.kill(child.pid, 'SIGTERM');
          }),
      ),
    );
  }
}
