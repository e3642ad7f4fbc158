import { deployStep } from './deploy-step.ts';

/**
 * The gather stage's facts (deploy/gather.ts asks them, before the plan is made and anything
 * changes): what every later step decides from. Entries only: the gather stage is their code.
 */

export const cluster = deployStep({
  id: 'cluster',
  kind: 'fact',
  on: 'etcd',
  selectable: false,
  changes: [],
  doc: 'has the cluster formed? Any member with a leader; when none answers, the VMs recorded in formed.json',
});

export const members = deployStep({
  id: 'members',
  kind: 'fact',
  on: 'etcd',
  selectable: false,
  changes: [],
  doc: "etcd's member list against the inventory: who votes, joins, leaves, is replaced; a mismatch stops the run",
});
