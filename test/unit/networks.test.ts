import test from 'ava';
import type { LibvirtAnswers } from '../../tasks/libvirt/context.ts';
import { networkIdsOf, networksFact } from '../../tasks/steps/networks.ts';
import { renderDomainXml } from '../../tasks/render/domain.ts';
import { baseDocument, load } from '../helpers/inventory.ts';

/** network_id resolved on the hypervisor, as a table: virsh net-name's answers (recorded from libvirt 9.0) in, names or a refusal out. */

const LAB_NET = 'aa8e1158-10ae-4494-b1f4-070fdbf17e4f';
const UNKNOWN = '1b4e28ba-2fa1-11d2-883f-0016d3cca427';

function inventoryWithIds() {
  const doc = baseDocument();
  const nic = (doc.members[0]!.libvirt_networks as Record<string, unknown>[])[0]!;
  delete nic.network_name;
  nic.network_id = LAB_NET;
  return load(doc);
}

/** A hypervisor that answers `virsh net-name` with `answer`. */
const answering = (answer: { code: number; output: string }): LibvirtAnswers => ({ probe: async () => ({ n0: answer }) });
const cases = [
  { name: 'known: its name', answer: { code: 0, output: 'etcd-lab\n' }, names: [[LAB_NET, 'etcd-lab']] },
  {
    name: 'unknown: refused, naming the UUID and the hypervisor',
    answer: {
      code: 1,
      output: `error: failed to get network '${UNKNOWN}'\nerror: Network not found: no network with matching uuid '${UNKNOWN}'`,
    },
    refused: new RegExp(`^network_id ${LAB_NET} names no libvirt network on hypervisor hv`),
  },
  {
    name: 'libvirt unreachable: an error, not a verdict',
    answer: { code: 1, output: 'error: failed to connect to the hypervisor' },
    refused: /^cannot resolve network_id .* on hypervisor hv: error: failed to connect to the hypervisor$/,
  },
];

for (const row of cases) {
  test(`networks: ${row.name}`, async (t) => {
    const fact = networksFact({ members: inventoryWithIds().members, context: answering(row.answer) });
    t.deepEqual(fact.targets, ['etcd-1'], 'only members with network_id are asked');
    if (row.refused) {
      await t.throwsAsync(fact.ask('etcd-1'), { message: row.refused });
      return;
    }
    t.deepEqual([...(await fact.ask('etcd-1'))], row.names);
  });
}

test('the domain names the resolved network; offline, the UUID stands in its place', (t) => {
  const member = inventoryWithIds().members[0]!;
  t.deepEqual(networkIdsOf(member), [LAB_NET]);
  const identity = { cluster: 'test', adoptsUnmarked: false };
  t.regex(renderDomainXml(identity, member, new Map([[LAB_NET, 'etcd-lab']])), /<source network='etcd-lab'\/>/);
  t.regex(renderDomainXml(identity, member), new RegExp(`<source network='${LAB_NET}'/>`));
});
