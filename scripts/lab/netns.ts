import { $ } from 'zx';

export async function namespaceExists(name: string): Promise<boolean> {
  return (await $`ip netns list`.quiet()).stdout.split('\n').some((line) => line.split(' ')[0] === name);
}

/** Stops every process still running in a namespace, then removes it. */
export async function removeNamespace(name: string, stop: (pid: number) => Promise<void>): Promise<boolean> {
  if (!(await namespaceExists(name))) return false;
  const pids = (await $`ip netns pids ${name}`.nothrow().quiet()).stdout.split('\n').filter(Boolean).map(Number);
  for (const pid of pids) await stop(pid);
  await $`ip netns del ${name}`;
  return true;
}
