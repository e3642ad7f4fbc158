import { spawn, type ChildProcess } from 'node:child_process';
import { openSync, rmSync } from 'node:fs';

/** Daemons a test started, stopped by PID when it ends, whatever happened. */
export class Processes {
  readonly #children: ChildProcess[] = [];
  readonly #workDirs: string[] = [];

  /** A directory the processes write in (an etcd's data: ~80 MB a member), removed by stopAll once they have exited. */
  removeAfter(dir: string): void {
    this.#workDirs.push(dir);
  }

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
    for (const dir of this.#workDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  }
}
