#!/usr/bin/env -S npx tsx
import { runTool } from '../cli/tool.ts';
import { EXIT } from '../core/errors.ts';
import { withClusterSession } from '../etcd/session.ts';
import { loadInventory } from '../inventory/load.ts';
import { gatherVerifyFacts } from '../verify/facts.ts';
import { formatChecks, verifyChecks } from '../verify/verdict.ts';

const HELP = `Usage: etcd-kvm verify -i INVENTORY [--json]

Shows that the members agree, changing nothing but a canary key of its own: every voting member's HashKV at
one pinned revision (equal), their member lists (the same), no alarm, every member's raft log caught up, a
canary written through one member and read back linearizably through every voting member (then deleted),
the certificate each member presents chaining to the state directory's CA, and the versions. One line per
check; a failed one names the member and what was seen.

  -i, --inventory FILE   the inventory (required)
      --json             print the checks as JSON (for scripts)
  -h, --help             this text

Exit: 0 every check passed, 1 a check failed (or etcd could not be reached), 2 bad input.`;

process.exitCode = await runTool({
  help: HELP,
  options: { json: { type: 'boolean', default: false } },
  failure: 'verify failed',
  async run(values, path) {
    const inventory = loadInventory(path);
    const facts = await withClusterSession(inventory, ({ clients, root }) => gatherVerifyFacts(inventory, clients, root));
    const checks = verifyChecks(facts);
    const passed = checks.every((check) => check.ok);
    console.log(values.json ? JSON.stringify({ passed, pinnedRevision: facts.pinnedRevision, checks }, null, 2) : formatChecks(checks));
    return passed ? EXIT.ok : EXIT.failed;
  },
});
