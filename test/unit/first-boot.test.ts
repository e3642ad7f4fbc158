import test from 'ava';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ENABLE_UNLESS_ENABLED, firstBootCommands } from '../../tasks/render/guest/fragment.ts';
import { run } from '../helpers/exec.ts';

/**
 * The first boot's enabling command run by the real sh against a stand-in systemctl: `is-enabled` answers each
 * unit's state from a table, one line each, in order (and stops at a unit it does not know, as systemd 252's
 * does); `enable` is recorded.
 */
function enabledBy(states: Record<string, string>, units: string[]): string[] {
  const dir = mkdtempSync(join(tmpdir(), 'etcd-kvm-first-boot-'));
  const log = join(dir, 'enabled');
  writeFileSync(log, '');
  const table = Object.entries(states)
    .map(([unit, state]) => `    ${unit}) echo ${state} ;;`)
    .join('\n');
  writeFileSync(
    join(dir, 'systemctl'),
    [
      '#!/bin/sh',
      'verb=$1; shift',
      'if [ "$verb" = enable ]; then echo "SYSTEMCTL_SKIP_SYSV=$SYSTEMCTL_SKIP_SYSV $*" >> "$LOG"; exit 0; fi',
      'for unit; do',
      '  case $unit in',
      table,
      '    *) echo "Failed to get unit file state for $unit: No such file or directory" >&2; exit 1 ;;',
      '  esac',
      'done',
      '',
    ].join('\n'),
    { mode: 0o755 },
  );
  try {
    const done = run('sh', ['-c', ENABLE_UNLESS_ENABLED, 'sh', ...units], { env: { PATH: `${dir}:/usr/bin:/bin`, LOG: log } });
    if (done.status !== 0) throw new Error(done.stderr);
    return readFileSync(log, 'utf8').split('\n').filter(Boolean);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('enabling at first boot: one systemctl asks every state, one enables exactly those is-enabled --quiet would fail', (t) => {
  const units = [
    'etcd.service',
    'chrony.service',
    'prometheus-node-exporter.service',
    'etcd-kvm-backup.timer',
    'dbus.service',
    'a.service',
  ];
  t.deepEqual(
    enabledBy(
      {
        'etcd.service': 'disabled',
        'chrony.service': 'enabled',
        'prometheus-node-exporter.service': 'enabled-runtime',
        'etcd-kvm-backup.timer': 'disabled',
        'dbus.service': 'static',
        'a.service': 'masked',
      },
      units,
    ),
    // Without Debian's SysV sync and enable's own reload: three reloads of ~12 s each under emulation.
    ['SYSTEMCTL_SKIP_SYSV=1 --no-reload etcd.service etcd-kvm-backup.timer a.service'],
  );
  // Nothing to enable: no enable at all (a systemctl costs seconds in a guest booting under emulation).
  t.deepEqual(
    enabledBy({ 'chrony.service': 'enabled', 'x.service': 'indirect', 'y.service': 'generated', 'z.service': 'alias' }, [
      'chrony.service',
      'x.service',
      'y.service',
      'z.service',
    ]),
    [],
  );
  // A unit systemctl does not know ends its answer: it and every unit after it are enabled (and enable says which failed).
  t.deepEqual(enabledBy({ 'chrony.service': 'enabled', 'b.service': 'disabled' }, ['chrony.service', 'gone.service', 'b.service']), [
    'SYSTEMCTL_SKIP_SYSV=1 --no-reload gone.service b.service',
  ]);
});

test('first boot: preparations in fragment order, one reload, one enabling, started and restarted together, the rolling service last', (t) => {
  const commands = firstBootCommands([
    {
      runcmd: [['install', '-d', '/var/lib/etcd']],
      writeFiles: [{ path: '/etc/etcd/etcd.env', permissions: '0644', content: '', notify: 'etcd.service' }],
      services: [{ unit: 'etcd.service', onChange: 'restart', rolling: true }],
    },
    { services: [{ unit: 'prometheus-node-exporter.service', onChange: 'restart' }] },
    {
      runcmd: [['install', '-d', '/var/lib/agent']],
      writeFiles: [
        { path: '/etc/chrony/chrony.conf', permissions: '0644', content: '', notify: 'chrony.service' },
        { path: '/etc/systemd/system/x.timer', permissions: '0644', content: '', notify: 'x.timer' },
      ],
      services: [
        { unit: 'chrony.service', onChange: 'restart' },
        { unit: 'x.timer', onChange: 'restart' },
      ],
    },
  ]);
  t.deepEqual(commands, [
    ['install', '-d', '/var/lib/etcd'],
    ['install', '-d', '/var/lib/agent'],
    ['systemctl', 'daemon-reload'],
    ['sh', '-c', ENABLE_UNLESS_ENABLED, 'sh', 'etcd.service', 'prometheus-node-exporter.service', 'chrony.service', 'x.timer'],
    ['systemctl', 'start', 'prometheus-node-exporter.service'],
    ['systemctl', 'restart', 'chrony.service', 'x.timer'],
    ['systemctl', 'restart', 'etcd.service'],
  ]);
  // No service: the preparations alone, no reload.
  t.deepEqual(firstBootCommands([{ runcmd: [['true']] }]), [['true']]);
});
