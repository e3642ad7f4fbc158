import { join } from 'node:path';
import { InputError } from '../core/errors.ts';
import { PUBLIC_FILE_MODE, readIfExists, writeFileAtomic } from '../core/files.ts';

/**
 * Who a member trusts on its peer port. Members talk raft to each other with certificates of a peer CA
 * of their own, which signs nothing else: an application user's certificate (signed by the cluster CA)
 * fails the TLS handshake there, so no user can reach /raft or /members.
 *
 * A cluster deployed before the peer CA moves to it in three stages, each rolled over every member
 * (etcd reads a CA bundle only when it starts, and keeps talking to members not rolled yet):
 *   trust-both    – the peer port trusts the cluster CA and the peer CA, and still presents the member's
 *                   server certificate (restart, one member at a time);
 *   present-peer  – it presents the peer certificate (no restart: etcd reads its certificate anew for every
 *                   connection; every member already trusts the peer CA);
 *   peer-only     – it trusts the peer CA alone, and only its common name (restart, one at a time).
 * A stage starts only once every member runs the one before: the run that finishes a stage on every
 * member records the next in the state directory and rolls it. A new cluster starts at peer-only.
 */

export const PEER_STAGES = ['trust-both', 'present-peer', 'peer-only'] as const;
export type PeerTrustStage = (typeof PEER_STAGES)[number];

/** The common name of every member's peer certificate: `peer-cert-allowed-cn` admits it alone. */
export const PEER_COMMON_NAME = 'etcd-kvm-peer';

const RECORD = join('pki', 'peer-trust.json');

export function readPeerTrust(stateDir: string): PeerTrustStage | undefined {
  const text = readIfExists(join(stateDir, RECORD));
  if (text === undefined) return undefined;
  let stage: unknown;
  try {
    stage = (JSON.parse(text) as { stage?: unknown }).stage;
  } catch {
    stage = undefined;
  }
  if (!(PEER_STAGES as readonly unknown[]).includes(stage))
    throw new Error(
      `${join(stateDir, RECORD)} is damaged: its stage must be one of ${PEER_STAGES.join(', ')}; ` +
        `restore it from where the state directory came from`,
    );
  return stage as PeerTrustStage;
}

export function writePeerTrust(stateDir: string, stage: PeerTrustStage): void {
  writeFileAtomic(join(stateDir, RECORD), `${JSON.stringify({ stage })}\n`, PUBLIC_FILE_MODE);
}

/**
 * The stage members are rendered for: the recorded one. Without a record, before the pki step made the peer
 * CA (a dry-run, or a state directory from before it): the first stage when members were deployed before
 * (their certificates exist), else peer-only. The pki step writes the record before the peer CA, so a peer
 * CA without one is a record lost (a merge of a shared state directory, say): the run stops there, since
 * guessing trust-both would open the peer port again to every certificate the cluster CA signed.
 */
export function peerStageOf(known: {
  recorded: PeerTrustStage | undefined;
  membersDeployedBefore: boolean;
  peerCaMade: boolean;
  stateDir: string;
}): PeerTrustStage {
  if (known.recorded) return known.recorded;
  if (known.peerCaMade)
    throw new InputError(
      `${join(known.stateDir, RECORD)} is missing, though the peer CA was made: which stage the members' peer ` +
        `ports run is unknown, and none is guessed (trust-both would admit every certificate the cluster CA signed)`,
      [
        'put the file back from where the state directory came from (a backup, the repository it is kept in)',
        `or, if every member's etcd.env sets ETCD_PEER_CERT_ALLOWED_CN=` +
          `${PEER_COMMON_NAME} (the move finished), write {"stage":"peer-only"} into it`,
      ],
    );
  return known.membersDeployedBefore ? 'trust-both' : 'peer-only';
}

/** What each stage means, for the run's output. */
export const PEER_STAGE_DOC: Record<PeerTrustStage, string> = {
  'trust-both': 'the peer port trusts the cluster CA and the peer CA',
  'present-peer': 'members present their peer certificates; no restart',
  'peer-only': 'the peer port trusts the peer CA alone; etcd restarts one member at a time',
};

export const nextPeerStage = (stage: PeerTrustStage): PeerTrustStage | undefined => PEER_STAGES[PEER_STAGES.indexOf(stage) + 1];
