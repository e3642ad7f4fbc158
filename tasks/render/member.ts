import { maskSecret, revealSecret, type SecretWriter } from '../core/secret.ts';
import type { Inventory, Member } from '../inventory/model.ts';
import type { PkiMaterials } from '../pki/materials.ts';
import { renderMetaData, renderNetworkConfig, renderUserData } from './cloud-init.ts';
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
}

/** Everything rendered for one member: its domain XML and its three cloud-init files. */
export function renderMember(context: RenderContext, member: Member): RenderedFile[] {
  const { inventory, pki } = context;
  const userData = (writeSecret: SecretWriter) =>
    renderUserData({
      inventory,
      member,
      tls: pki.members.get(member.name) ?? {},
      ...(pki.adminSshPublicKey ? { toolSshPublicKey: pki.adminSshPublicKey } : {}),
      initialClusterState: context.initialClusterState,
      writeSecret,
    });
  const plain = (name: string, content: string): RenderedFile => ({ name, content, display: content, containsSecrets: false });
  return [
    plain('domain.xml', renderDomainXml(inventory.cluster.name, member)),
    { name: 'user-data', content: userData(revealSecret), display: userData(maskSecret), containsSecrets: true },
    plain('meta-data', renderMetaData(inventory, member)),
    plain('network-config', renderNetworkConfig(member)),
  ];
}
