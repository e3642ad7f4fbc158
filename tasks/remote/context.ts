import type { Member } from '../inventory/model.ts';
import { Virsh } from '../libvirt/virsh.ts';
import { HypervisorConnections } from './hypervisors.ts';

/** What the remote steps share during one run: the hypervisor connections. */
export class RemoteContext {
  readonly connections = new HypervisorConnections();

  async virshFor(member: Member): Promise<Virsh> {
    return new Virsh(await this.connections.get(member.hypervisor), member.hypervisor.libvirt_uri);
  }

  close(): Promise<void> {
    return this.connections.closeAll();
  }
}
