import type { Member } from '../../inventory/model.ts';
import { NODE_EXPORTER_PORT } from '../../inventory/urls.ts';
import type { CloudConfigFragment } from './fragment.ts';
import { renderServiceUnit } from './systemd-unit.ts';
import { TEXTFILE_DIR } from './textfile.ts';

/**
 * Prometheus node exporter on every member, as in the seed module. Debian's package
 * (install_dependencies: false) brings its own unit; the upstream binary gets one of the same name,
 * so fluent-bit's journal filter and operators' habits do not depend on how it was installed.
 */

export const NODE_EXPORTER = { unit: 'prometheus-node-exporter.service', port: NODE_EXPORTER_PORT } as const;

export function renderNodeExporterUnit(): string {
  return renderServiceUnit({
    comment: 'Managed by etcd-kvm: the upstream node_exporter release (install_dependencies: true).',
    description: 'Prometheus node exporter',
    user: 'prometheus',
    execStart: `/usr/local/bin/node_exporter --web.listen-address=:${NODE_EXPORTER.port} --collector.textfile.directory=${TEXTFILE_DIR}`,
  });
}

export function nodeExporterFragment(member: Member): CloudConfigFragment {
  return {
    ...(member.installDependencies
      ? {
          writeFiles: [
            {
              path: `/etc/systemd/system/${NODE_EXPORTER.unit}`,
              permissions: '0644',
              content: renderNodeExporterUnit(),
              notify: NODE_EXPORTER.unit,
            },
          ],
        }
      : {}),
    services: [{ unit: NODE_EXPORTER.unit, onChange: 'restart' }],
  };
}
