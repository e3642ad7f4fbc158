import { maskSecret, revealSecret, type SecretWriter } from '../core/secret.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { PkiMaterials } from '../pki/materials.ts';
import { renderMetaData, renderNetworkConfig, renderUserData, type CloudInitInput } from './cloud-init.ts';
import { desiredGuest, type DesiredGuest } from './guest/desired.ts';
import { renderDomainXml } from './domain.ts';
import type { InitialClusterState } from './etcd.ts';

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
  initialClusterState: InitialClusterState;
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
    initialClusterState: context.initialClusterState,
  };
}

/** Everything rendered for one member: its domain XML and its three cloud-init files. */
export function renderMember(context: RenderContext, member: Member): RenderedFile[] {
  const input = cloudInitInput(context, member);
  const userData = (writeSecret: SecretWriter) => renderUserData({ ...input, writeSecret });
  const plain = (name: string, content: string): RenderedFile => ({ name, content, display: content, containsSecrets: false });
  return [
    plain('domain.xml', renderDomainXml(context.pki.identity, member, context.networkNames?.get(member.name))),
    { name: 'user-data', content: userData(revealSecret), display: userData(maskSecret), containsSecrets: true },
    plain('meta-data', renderMetaData(context.inventory, member)),
    plain('network-config', renderNetworkConfig(member)),
  ];
}

/** What the member contains once it runs: the same fragments as its user-data, as files and services. */
export function renderGuest(context: RenderContext, member: Member): DesiredGuest {
  return desiredGuest(cloudInitInput(context, member));
}
