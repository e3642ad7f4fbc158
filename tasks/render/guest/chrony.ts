import type { GuestServices } from '../../inventory/model.ts';
import type { CloudConfigFragment } from './fragment.ts';

/** chrony with the inventory's servers and pools replacing the distribution's default sources. */

export const CHRONY_CONF = '/etc/chrony/chrony.conf';
const CHRONY_UNIT = 'chrony.service';

export function renderChronyConf(chrony: GuestServices['chrony']): string {
  const source = (kind: 'server' | 'pool', entry: { url: string; options: string[] }) => [kind, entry.url, ...entry.options].join(' ');
  return [
    '# Managed by etcd-kvm: time sources from the inventory (chrony.servers, chrony.pools).',
    ...chrony.servers.map((entry) => source('server', entry)),
    ...chrony.pools.map((entry) => source('pool', entry)),
    // etcd's leases and raft timeouts assume clocks that agree: step a large offset at start-up.
    ...(chrony.makestep.threshold > 0 ? [`makestep ${chrony.makestep.threshold} ${chrony.makestep.limit}`] : []),
    'driftfile /var/lib/chrony/chrony.drift',
    'ntsdumpdir /var/lib/chrony',
    'logdir /var/log/chrony',
    'maxupdateskew 100.0',
    'rtcsync',
    'leapsectz right/UTC',
    '',
  ].join('\n');
}

export function chronyFragment(chrony: GuestServices['chrony']): CloudConfigFragment {
  if (!chrony.enabled) return {};
  return {
    writeFiles: [{ path: CHRONY_CONF, permissions: '0644', content: renderChronyConf(chrony), notify: CHRONY_UNIT }],
    services: [{ unit: CHRONY_UNIT, onChange: 'restart' }],
  };
}
