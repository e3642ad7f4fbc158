import test from 'ava';
import { CONTROL_NODE } from '../../tasks/core/step.ts';
import { snapshotBefore, UpgradeRefused, upgradeStep } from '../../tasks/steps/upgrade.ts';
import type { MemberVersionAnswer } from '../../tasks/upgrade/preflight.ts';
import { parseVersion } from '../../tasks/upgrade/version.ts';
import { baseDocument, load } from '../helpers/inventory.ts';
import { unconnected } from '../helpers/unconnected.ts';

/** The upgrade step's plan: the pre-flight's verdict as changes (a snapshot, once per move) or a refusal. */

function step() {
  const doc = baseDocument();
  doc.etcd = { version: 'v3.5.16', binaries: 'release' };
  const inventory = load(doc);
  // The plan is pure: it never asks etcd.
  const inMember = () => Promise.reject(new Error('the plan runs nothing in a member'));
  const { clients } = unconnected(inventory);
  return { inventory, step: upgradeStep({ inventory, clients, root: () => ({ label: 'root', caCert: '' }), inMember }) };
}

/** The members' data compared before a move, as the step asks it: equal. */
const agreement = { agree: true, detail: 'equal on 3 voting members at revision 40' };

const answers = (versions: string[]): MemberVersionAnswer[] =>
  versions.map((version, i) => ({ name: `etcd-${i + 1}`, id: `a${i + 1}`, leader: 'a1', isLearner: false, version }));

test('a move: one change, a snapshot named by the move, whose summary says what moves and what the pre-flight saw', (t) => {
  const { inventory, step: upgrade } = step();
  const changes = upgrade.plan(
    { facts: { members: answers(['3.4.23', '3.4.23', '3.4.23']), alarms: [], clusterVersion: '3.4.0', agreement } },
    CONTROL_NODE,
  );
  const path = snapshotBefore(inventory, parseVersion('3.4.23')!, parseVersion('3.5.16')!);
  t.deepEqual(
    changes.map((change) => change.action),
    [{ kind: 'snapshot', path }],
  );
  t.regex(changes[0]!.summary, /^etcd 3\.4\.23 → 3\.5\.16 \(minor step\) on etcd-1, etcd-2, etcd-3, one at a time, leader last/);
  t.regex(changes[0]!.summary, /pre-flight passed: every member healthy \(3 of 3 answer\), one leader \(etcd-1 leads\)/);
  t.regex(changes[0]!.summary, /the members agree \(equal on 3 voting members at revision 40\)/);
  t.regex(path, /snapshots\/before-etcd-3\.4\.23-to-3\.5\.16\.db$/);

  // A run resuming the move keeps the snapshot taken before it began; a new roll of the same move (no
  // member moved yet) takes its own over an old one; the one this run took is the re-check's answer.
  const planned = (versions: string[], snapshotAt: number) =>
    upgrade
      .plan({ facts: { members: answers(versions), alarms: [], clusterVersion: '3.4.0', agreement }, snapshotAt }, CONTROL_NODE)
      .map((change) => change.action);
  const earlier = Date.now() - 86_400_000;
  t.deepEqual(planned(['3.5.16', '3.4.23', '3.4.23'], earlier), [], 'under way: the snapshot from before it began');
  t.deepEqual(planned(['3.4.23', '3.4.23', '3.4.23'], earlier), [{ kind: 'snapshot', path }], 'a new roll: its own');
  t.deepEqual(planned(['3.4.23', '3.4.23', '3.4.23'], Date.now()), [], "this run's: the runner's re-check after the apply");
});

test('every member on etcd.version: nothing', (t) => {
  const { step: upgrade } = step();
  t.deepEqual(
    upgrade.plan({ facts: { members: answers(['3.5.16', '3.5.16', '3.5.16']), alarms: [], clusterVersion: '3.5.0' } }, CONTROL_NODE),
    [],
  );
});

test('a refused move throws, naming the failed check and saying nothing changed', (t) => {
  const { step: upgrade } = step();
  const facts = {
    members: [...answers(['3.4.23', '3.4.23']), { name: 'etcd-3', error: 'connect ECONNREFUSED' }],
    alarms: [],
    clusterVersion: '3.4.0',
  };
  const error = t.throws(() => upgrade.plan({ facts }, CONTROL_NODE), { instanceOf: UpgradeRefused });
  t.regex(error!.message, /^etcd cannot move to 3\.5\.16 now \(nothing was changed\):\nevery member healthy: etcd-3: connect ECONNREFUSED/);
});

test('members whose data differ are never rolled: the pre-flight refuses, with the hashes; one not compared is refused too', (t) => {
  const { step: upgrade } = step();
  const plan = (agreement?: { agree: boolean; detail: string }) => () =>
    upgrade.plan(
      {
        facts: {
          members: answers(['3.4.23', '3.4.23', '3.4.23']),
          alarms: [],
          clusterVersion: '3.4.0',
          ...(agreement ? { agreement } : {}),
        },
      },
      CONTROL_NODE,
    );
  const differ =
    "the members' data differ at revision 40: etcd-1 7 (never compacted), etcd-2 7 (never compacted), etcd-3 9 (never compacted)";
  const refused = t.throws(plan({ agree: false, detail: differ }), { instanceOf: UpgradeRefused });
  t.regex(
    refused!.message,
    /\nthe members agree: the members' data differ at revision 40: .*etcd-3 9 .*: find the member whose data differs \(etcd-kvm verify\)/,
  );
  t.regex(t.throws(plan(), { instanceOf: UpgradeRefused })!.message, /\nthe members agree: not compared: /);
});
