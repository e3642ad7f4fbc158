#!/usr/bin/env -S npx tsx
import { runTool } from '../cli/tool.ts';
import { EXIT } from '../core/errors.ts';
import { doctorChecks, formatDoctor } from '../doctor/checks.ts';
import { gatherDoctorFacts } from '../doctor/facts.ts';
import { loadInventory } from '../inventory/load.ts';
import { HypervisorConnections } from '../remote/hypervisors.ts';

const HELP = `Usage: etcd-kvm doctor -i INVENTORY [--json]

Checks the ground a deploy stands on, changing nothing: on this machine Node.js, xorriso (the seed ISOs) and
etcdctl (for etcd-kvm etcdctl); on each hypervisor, over SSH with its pinned host key, libvirt's version, the
domain type against /dev/kvm, the pools, base images, libvirt networks and macvtap devices the inventory's
members need, the free space for the volumes a deploy would create, and the guest agent of each member that
runs. One line per check, and under a warning or a failure what to do. Needs no state directory: run it before
the first deploy.

  -i, --inventory FILE   the inventory (required)
      --json             print the checks as JSON (for scripts)
  -h, --help             this text

Exit: 0 the ground is ready (warnings allowed), 1 a check failed, 2 bad input.`;

process.exitCode = await runTool({
  help: HELP,
  options: { json: { type: 'boolean', default: false } },
  failure: 'doctor failed',
  async run(values, path) {
    const inventory = loadInventory(path);
    const connections = new HypervisorConnections();
    const facts = await gatherDoctorFacts(inventory, connections).finally(() => connections.closeAll());
    const checks = doctorChecks(facts);
    const passed = checks.every((check) => check.status !== 'fail');
    console.log(values.json ? JSON.stringify({ passed, checks }, null, 2) : formatDoctor(checks));
    return passed ? EXIT.ok : EXIT.failed;
  },
});
