import test from 'ava';
import { shutDown } from '../../tasks/libvirt/power.ts';
import type { Virsh } from '../../tasks/libvirt/virsh.ts';

/** A domain stop waits until libvirt says it is off: "in shutdown" is still active. */

const dominfo = (state: string) => `Id:             3\nName:           etcd-1\nState:          ${state}\nAutostart:      enable\n`;

function fakeVirsh(states: string[]): { virsh: Pick<Virsh, 'run'>; asked: string[] } {
  const asked: string[] = [];
  const virsh: Pick<Virsh, 'run'> = {
    run: async (args: readonly string[]) => {
      asked.push(args[0]!);
      return args[0] === 'dominfo' ? dominfo(states.shift() ?? 'shut off') : '';
    },
  };
  return { virsh, asked };
}

test('shutDown waits through "in shutdown" until the domain is shut off, then returns without a destroy', async (t) => {
  const { virsh, asked } = fakeVirsh(['running', 'running', 'in shutdown', 'shut off']);
  await shutDown(virsh, 'etcd-1', 10_000);
  t.deepEqual(asked, ['dominfo', 'shutdown', 'dominfo', 'dominfo', 'dominfo']);
});

test('shutDown sends no shutdown to a domain already shutting down (libvirt refuses it: not running), and resumes a paused one first', async (t) => {
  const shuttingDown = fakeVirsh(['in shutdown', 'in shutdown', 'shut off']);
  await shutDown(shuttingDown.virsh, 'etcd-1', 10_000);
  t.deepEqual(shuttingDown.asked, ['dominfo', 'dominfo', 'dominfo']);
  const paused = fakeVirsh(['paused', 'shut off']);
  await shutDown(paused.virsh, 'etcd-1', 10_000);
  t.deepEqual(paused.asked, ['dominfo', 'resume', 'shutdown', 'dominfo']);
});

test('shutDown powers the domain off once the grace is over', async (t) => {
  const { virsh, asked } = fakeVirsh(['in shutdown', 'in shutdown', 'in shutdown']);
  await shutDown(virsh, 'etcd-1', 500);
  t.is(asked.at(-1), 'destroy');
});
