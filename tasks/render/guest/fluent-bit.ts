import { stringify } from 'yaml';
import type { SecretWriter } from '../../core/secret.ts';
import type { GuestServices } from '../../inventory/model.ts';
import type { CloudConfigFragment } from './fragment.ts';
import { DYNAMIC_CONFIG } from './fluent-bit-dynamic.ts';
import { NODE_EXPORTER } from './node-exporter.ts';

/**
 * fluent-bit ships etcd's and the node exporter's journal to a remote fluentd/fluent-bit over the
 * forward protocol with TLS and a shared key, as the seed module does. Rendered in fluent-bit's YAML
 * format (not the classic INI-like one) so it is serialised, escaped and parsed by a real YAML library.
 */

export const FLUENT_BIT_UNIT = 'fluent-bit.service';

export const FLUENT_BIT_PATHS = {
  config: '/etc/fluent-bit/etcd-kvm.yaml',
  forwardCa: '/etc/fluent-bit/forward-ca.crt',
  dropIn: '/etc/systemd/system/fluent-bit.service.d/etcd-kvm.conf',
  storage: '/var/lib/fluent-bit',
  /** Where fluent-bit's own packages (packages.fluentbit.io) install it; Debian has none. */
  binary: '/opt/fluent-bit/bin/fluent-bit',
} as const;

export interface FluentBitSettings {
  fluentbit: GuestServices['fluentbit'];
  /** fluentbit_dynamic_config.enabled: run the synced directory's entry point, hot-reloaded on change. */
  dynamic: boolean;
}

export function fluentBitConfig(settings: FluentBitSettings, writeSecret: SecretWriter): Record<string, unknown> {
  const { fluentbit } = settings;
  const journal = (tag: string, unit: string, db: string) => ({
    name: 'systemd',
    tag,
    systemd_filter: `_SYSTEMD_UNIT=${unit}`,
    db: `${FLUENT_BIT_PATHS.storage}/${db}.db`,
    read_from_tail: 'on',
  });
  const forward = fluentbit.forward;
  return {
    service: { flush: 1, log_level: 'info', 'storage.path': `${FLUENT_BIT_PATHS.storage}/buffer` },
    pipeline: {
      inputs: [journal(fluentbit.etcdTag, 'etcd.service', 'etcd'), journal(fluentbit.nodeExporterTag, NODE_EXPORTER.unit, 'node-exporter')],
      outputs: [
        {
          name: 'forward',
          match: '*',
          host: forward.domain,
          port: forward.port,
          self_hostname: forward.hostname,
          shared_key: writeSecret(forward.sharedKey),
          tls: 'on',
          'tls.verify': 'on',
          ...(forward.caCert ? { 'tls.ca_file': FLUENT_BIT_PATHS.forwardCa } : {}),
        },
      ],
    },
  };
}

export function renderFluentBitConfig(settings: FluentBitSettings, writeSecret: SecretWriter): string {
  return `# Managed by etcd-kvm.\n${stringify(fluentBitConfig(settings, writeSecret), { lineWidth: 0 })}`;
}

/**
 * How systemd runs fluent-bit: the rendered pipeline, or with dynamic configuration the synced entry
 * point with hot reload (SIGHUP), the static pipeline staying on disk for it to include.
 */
export function renderDropIn(dynamic: boolean): string {
  const run = dynamic
    ? [`ExecStart=${FLUENT_BIT_PATHS.binary} --enable-hot-reload -c ${DYNAMIC_CONFIG.entrypoint}`, 'ExecReload=/bin/kill -HUP $MAINPID']
    : [`ExecStart=${FLUENT_BIT_PATHS.binary} -c ${FLUENT_BIT_PATHS.config}`];
  return ['# Managed by etcd-kvm.', '[Service]', 'ExecStart=', ...run, ''].join('\n');
}

export function fluentBitFragment(settings: FluentBitSettings, writeSecret: SecretWriter): CloudConfigFragment {
  if (!settings.fluentbit.enabled) return {};
  return {
    writeFiles: [
      // The shared key is in the file: root only (fluent-bit runs as root to read the journal).
      {
        path: FLUENT_BIT_PATHS.config,
        permissions: '0600',
        owner: 'root:root',
        content: renderFluentBitConfig(settings, writeSecret),
        notify: FLUENT_BIT_UNIT,
      },
      ...(settings.fluentbit.forward.caCert
        ? [{ path: FLUENT_BIT_PATHS.forwardCa, permissions: '0644', content: settings.fluentbit.forward.caCert, notify: FLUENT_BIT_UNIT }]
        : []),
      { path: FLUENT_BIT_PATHS.dropIn, permissions: '0644', content: renderDropIn(settings.dynamic), notify: FLUENT_BIT_UNIT },
    ],
    runcmd: [['install', '-d', '-m', '0700', FLUENT_BIT_PATHS.storage]],
    services: [{ unit: FLUENT_BIT_UNIT, onChange: 'restart' }],
  };
}
