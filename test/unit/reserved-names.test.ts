import test from 'ava';
import { maskSecret } from '../../tasks/core/secret.ts';
import { GUEST_SERVICE_ACCOUNTS, TOOL_NAME_PREFIX } from '../../tasks/inventory/reserved.ts';
import { PEER_COMMON_NAME } from '../../tasks/pki/peer-trust.ts';
import { guestFragments } from '../../tasks/render/cloud-init.ts';
import type { Member } from '../../tasks/inventory/model.ts';
import { baseDocument, load, problemsOf } from '../helpers/inventory.ts';

/** The names the inventory rules keep for the tool are the names the tool really uses. */

test('the guest accounts the admin user may not take are exactly the service accounts the seed creates, and root', (t) => {
  const inventory = load(baseDocument());
  const member = inventory.members[0]!;
  const { services } = member;
  // Every optional service on, and the upstream install that creates the base accounts.
  const everything: Member = {
    ...member,
    installDependencies: true,
    services: {
      ...services,
      vaultAgent: { ...services.vaultAgent, enabled: true },
      fluentbit: { ...services.fluentbit, enabled: true },
      fluentbitDynamicConfig: { ...services.fluentbitDynamicConfig, enabled: true },
    },
  };
  const fragments = guestFragments({ inventory, member: everything, tls: {}, firstStart: 'new', writeSecret: maskSecret });
  const created = fragments.flatMap((fragment) => fragment.users ?? []).map((user) => String(user.name));
  t.deepEqual([...created, 'root'].sort(), [...GUEST_SERVICE_ACCOUNTS].sort());
});

test("no user may carry the CN of the members' peer certificates", (t) => {
  t.true(PEER_COMMON_NAME.startsWith(TOOL_NAME_PREFIX));
  const doc = baseDocument();
  doc.users = { [PEER_COMMON_NAME]: {} };
  t.deepEqual(
    problemsOf(doc).map((problem) => problem.split(':')[0]),
    [`users.${PEER_COMMON_NAME}`],
  );
});
