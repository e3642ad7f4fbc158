import test from 'ava';
import { maskSecret } from '../../tasks/core/secret.ts';
import { GUEST_SERVICE_ACCOUNTS } from '../../tasks/inventory/reserved.ts';
import { guestFragments } from '../../tasks/render/cloud-init.ts';
import { baseDocument, load } from '../helpers/inventory.ts';

/** The names the inventory rules keep for the tool are the names the tool really uses. */

test('the guest accounts the admin user may not take are exactly the service accounts the seed creates, and root', (t) => {
  const inventory = load(baseDocument());
  const member = inventory.members[0]!;
  const { services } = member;
  // Every optional service on, and the upstream install that creates the base accounts.
  const everything = {
    ...member,
    installDependencies: true,
    services: {
      ...services,
      vault_agent: { ...services.vault_agent, enabled: true },
      fluentbit: { ...services.fluentbit, enabled: true },
      fluentbit_dynamic_config: { ...services.fluentbit_dynamic_config, enabled: true },
    },
  };
  const fragments = guestFragments({ inventory, member: everything, tls: {}, initialClusterState: 'new', writeSecret: maskSecret });
  const created = fragments.flatMap((fragment) => fragment.users ?? []).map((user) => String(user.name));
  t.deepEqual([...created, 'root'].sort(), [...GUEST_SERVICE_ACCOUNTS].sort());
});
