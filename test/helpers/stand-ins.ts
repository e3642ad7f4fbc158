import type { MemberClients } from '../../tasks/etcd/client.ts';
import type { GuestFactsProbe, GuestShell } from '../../tasks/steps/guest.ts';
import type { RestoreSource } from '../../tasks/steps/restore.ts';

/**
 * Stand-ins for what a step asks of the run (its etcd clients, guest probe, SSH, snapshot source), typed
 * as the step takes them: a test gives the methods it means to be called; any other fails when called,
 * naming itself.
 */

const notGiven = (what: string) => (): never => {
  throw new Error(`${what}: not given to this test's stand-in`);
};

export const standInClients = (given: Partial<MemberClients>): MemberClients => ({
  for: notGiven('EtcdClients.for'),
  endpoint: notGiven('EtcdClients.endpoint'),
  unreachable: notGiven('EtcdClients.unreachable'),
  ...given,
});

export const standInProbe = (given: Partial<GuestFactsProbe>): GuestFactsProbe => ({
  takeEarly: notGiven('GuestProbe.takeEarly'),
  askNow: notGiven('GuestProbe.askNow'),
  lookAtBoot: notGiven('GuestProbe.lookAtBoot'),
  ...given,
});

export const standInShell = (given: Partial<GuestShell>): GuestShell => ({
  run: notGiven('SshConnection.run'),
  exec: notGiven('SshConnection.exec'),
  ...given,
});

export const standInSource = (given: Partial<RestoreSource> & Pick<RestoreSource, 'bucket'>): RestoreSource => ({
  choose: notGiven('SnapshotSource.choose'),
  open: notGiven('SnapshotSource.open'),
  ...given,
});
