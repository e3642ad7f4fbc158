#!/usr/bin/env -S npx tsx
import { readCaRotation } from '../pki/ca-rotation.ts';
import { runTool } from '../cli/tool.ts';
import { EXIT } from '../core/errors.ts';
import { withClusterSession } from '../etcd/session.ts';
import { loadInventory } from '../inventory/load.ts';
import { readIdentity } from '../pki/identity.ts';
import { inspectCertificate } from '../pki/x509.ts';
import { gatherStatus } from '../status/facts.ts';
import { formatStatusTable, summarizeStatus } from '../status/report.ts';

const HELP = `Usage: etcd-kvm status -i INVENTORY [--json]

Reads the cluster as it is, changing nothing: per member its VM state (virsh), etcd member ID,
role (leader, follower, learner), raft term, applied index, database size and size in use,
etcd version, active alarms and the expiry of the certificate it serves, and (through its guest
agent) whether a recovery's force-new-cluster drop-in is left in it; then the cluster's health
as one line.

  -i, --inventory FILE   the inventory (required)
      --json             print the same as JSON (for scripts)
  -h, --help             this text

Exit: 0 healthy, 1 degraded (or unreachable), 2 bad input.`;

process.exitCode = await runTool({
  help: HELP,
  options: { json: { type: 'boolean', default: false } },
  failure: 'status failed',
  async run(values, path) {
    const inventory = loadInventory(path);
    const report = await withClusterSession(inventory, async ({ clients, connections, root }) => {
      const caNotAfter = root.caCert ? inspectCertificate(root.caCert).notAfter : undefined;
      const clusterId = readIdentity(inventory.stateDir, inventory.cluster.name)?.id;
      const rotation = readCaRotation(inventory.stateDir);
      const caRotation = rotation ? { target: rotation.target, stage: rotation.stage } : undefined;
      const facts = await gatherStatus(inventory, clients, connections, root, {
        caNotAfter,
        clusterId,
        ...(caRotation ? { caRotation } : {}),
      });
      return summarizeStatus(
        facts,
        inventory.members.map((member) => member.name),
      );
    });
    console.log(values.json ? JSON.stringify(report, null, 2) : formatStatusTable(report));
    return report.healthy ? EXIT.ok : EXIT.failed;
  },
});
