/**
 * How a member's units are enabled, in the first boot's commands and in the guest step's batches alike: a shell
 * command line to which the units are appended.
 *
 * Enabling a unit Debian also ships an init script for (etcd, chrony, the node exporter) runs
 * systemd-sysv-install, whose two update-rc.d calls each make systemd reload, and then enable's own reload:
 * three reloads of ~12 s each in a guest booting under emulation beside others, 36 s of every first boot.
 * None is needed. systemd reads a unit's [Install] links at boot, `systemctl is-enabled` reads them from the
 * file system, and whoever starts a unit now has already reloaded after writing its file. The rc.d links
 * only matter to a sysvinit boot, which no member makes.
 */
export const SYSTEMCTL_ENABLE = 'SYSTEMCTL_SKIP_SYSV=1 systemctl enable --no-reload';
