import { CONTROL_NODE, type ControlNode, type Fact, type Step } from '../core/step.ts';
import {
  formationToRecord,
  formationWithoutAnswer,
  readFormation,
  writeFormation,
  type FormationRecord,
  type FormationVerdict,
  type SeenDomains,
} from '../etcd/formation.ts';
import type { Member } from '../inventory/model.ts';
import type { RemoteContext } from '../libvirt/context.ts';
import { domainUuid } from '../libvirt/domain-xml.ts';
import { isNotFound } from '../libvirt/virsh.ts';
import { deployStep } from './deploy-step.ts';
import { domainQuestions } from './domains.ts';

/** The record now, and the members' domains as seen in this run. */
export interface FormationState {
  record: FormationRecord | undefined;
  seen: SeenDomains;
}

const sameDomains = (a: Record<string, string>, b: Record<string, string>) =>
  Object.keys(a).length === Object.keys(b).length && Object.entries(a).every(([member, uuid]) => b[member] === uuid);

/**
 * When no member's etcd answered: has the cluster formed all the same? Decided from formed.json and
 * the members' VMs as libvirt has them (etcd/formation.ts); a damaged record fails it, and with it
 * the run, before anything is rendered.
 */
export function formationFact({
  stateDir,
  isInitializing,
  domainUuids,
}: {
  stateDir: string;
  isInitializing: boolean;
  domainUuids: () => Promise<SeenDomains>;
}): Fact<FormationVerdict, ControlNode> {
  return {
    name: 'formation',
    targets: [CONTROL_NODE],
    ask: async () => formationWithoutAnswer(isInitializing, readFormation(stateDir), await domainUuids()),
  };
}

/**
 * `formed.json` (etcd/formation.ts), on the control node. After etcd said the cluster has formed, it
 * keeps the record saying which VMs the cluster runs on: written when a run first sees the cluster
 * formed, and again when its members' VMs change (a member joins, is replaced or leaves). When no member answered, it
 * reads the record to decide whether the cluster has formed all the same, and changes nothing. A
 * damaged record fails it, and with it the run, before anything is rendered.
 */
export function formationStep({
  stateDir,
  members,
  domainUuids,
}: {
  stateDir: string;
  members: readonly string[];
  domainUuids: () => Promise<SeenDomains>;
}): Step<FormationState, Record<string, string>, ControlNode> {
  return {
    name: 'formation',
    targets: [CONTROL_NODE],
    async check() {
      return { record: readFormation(stateDir), seen: await domainUuids() };
    },
    plan({ record, seen }) {
      const domains = formationToRecord(record, members, seen);
      if (record !== undefined && sameDomains(record.domains, domains)) return [];
      if (Object.keys(domains).length === 0) return [];
      const made = record === undefined ? [] : Object.keys(domains).filter((member) => record.domains[member] !== domains[member]);
      return [
        {
          summary:
            record === undefined
              ? `record that the cluster has formed, on the VMs of ${Object.keys(domains).join(', ')} (formed.json)`
              : `record the cluster's VMs (formed.json)${made.length > 0 ? `: a new VM for ${made.join(', ')}` : ''}`,
          action: domains,
        },
      ];
    },
    async apply([change]) {
      if (change) writeFormation(stateDir, change.action);
    },
  };
}

/** Each member's domain UUID as libvirt has it now (null: no such domain; undefined: its hypervisor did not answer). */
export const domainUuids = (remote: RemoteContext, members: readonly Member[]) => async (): Promise<SeenDomains> =>
  new Map(
    await Promise.all(
      members.map(async (member) => {
        const answer = await remote.probe(member, { info: domainQuestions(member).info }).then(
          ({ info }) => info,
          () => undefined,
        );
        const seen =
          answer === undefined
            ? undefined
            : answer.code === 0
              ? domainUuid(answer.output)
              : isNotFound(answer, 'domain')
                ? null
                : undefined;
        return [member.name, seen] as const;
      }),
    ),
  );

/** Run in the gather stage (deploy/gather.ts), when the cluster is asked, and again by `formed`. */
export const formation = deployStep({
  id: 'formation',
  kind: 'operation',
  on: 'control node',
  selectable: false,
  changes: [],
  doc: 'formed.json: the VMs the cluster formed on, kept while they change',
});
