import { maskSecret, revealSecret, type SecretWriter } from '../core/secret.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { PkiMaterials } from '../pki/materials.ts';
import {
  guestFragmentsBothWays,
  renderMetaData,
  renderNetworkConfig,
  renderUserData,
  type CloudInitInput,
  type GuestFragments,
} from './cloud-init.ts';
import { desiredGuest, type DesiredGuest } from './guest/desired.ts';
import { renderDomainXml } from './domain.ts';
import type { FirstStart } from './etcd.ts';
import type { CloudConfigFragment } from './guest/fragment.ts';

export interface RenderedFile {
  /** File name as it goes on the cloud-init ISO or into --render-only output. */
  name: string;
  content: string;
  /** The same file with secrets masked: what diffs and logs may show. */
  display: string;
  containsSecrets: boolean;
}

export interface RenderContext {
  inventory: Inventory;
  pki: PkiMaterials;
  firstStart: FirstStart;
  /** Names of the libvirt networks given by network_id, by member, then by UUID (unresolved offline). */
  networkNames?: ReadonlyMap<string, ReadonlyMap<string, string>>;
}

function cloudInitInput(context: RenderContext, member: Member): Omit<CloudInitInput, 'writeSecret'> {
  const { inventory, pki } = context;
  return {
    inventory,
    member,
    tls: pki.members.get(member.name) ?? {},
    ...(pki.adminSshPublicKey ? { toolSshPublicKey: pki.adminSshPublicKey } : {}),
    firstStart: context.firstStart,
    ...(pki.identity.id ? { clusterId: pki.identity.id } : {}),
  };
}

/**
 * Everything rendered for one member: its domain XML and its three cloud-init files. `fragments`: its guest's, when the caller has them.
 */
export function renderMember(
  context: RenderContext,
  member: Member,
  fragments = guestFragmentsBothWays(cloudInitInput(context, member)),
): RenderedFile[] {
  const input = cloudInitInput(context, member);
  const userData = (writeSecret: SecretWriter, rendered: CloudConfigFragment[]) => renderUserData({ ...input, writeSecret }, rendered);
  const plain = (name: string, content: string): RenderedFile => ({ name, content, display: content, containsSecrets: false });
  return [
    plain('domain.xml', renderDomainXml(context.pki.identity, member, context.networkNames?.get(member.name))),
    {
      name: 'user-data',
      content: userData(revealSecret, fragments.real),
      display: userData(maskSecret, fragments.shown),
      containsSecrets: true,
    },
    plain('meta-data', renderMetaData(context.inventory, member)),
    plain('network-config', renderNetworkConfig(member)),
  ];
}

/** What the member contains once it runs: the same fragments as its user-data, as files and services. */
export function renderGuest(context: RenderContext, member: Member, fragments?: GuestFragments): DesiredGuest {
  return desiredGuest(cloudInitInput(context, member), fragments);
}

/** A member's cloud-init files and what its guest contains, from one rendering of its guest's fragments each way. */
export function renderMemberAndGuest(context: RenderContext, member: Member): { files: RenderedFile[]; guest: DesiredGuest } {
  const fragments = guestFragmentsBothWays(cloudInitInput(context, member));
  return { files: renderMember(context, member, fragments), guest: renderGuest(context, member, fragments) };
}
