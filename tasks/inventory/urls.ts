import type { Inventory, Member } from './model.ts';

/** A member's etcd URLs, as its peers and clients reach it (and as etcd's member list shows them). */
export function peerUrl(inventory: Inventory, member: Member): string {
  return `https://${member.etcdIp}:${inventory.etcd.peer_port}`;
}

export function clientUrl(inventory: Inventory, member: Member): string {
  return `https://${member.etcdIp}:${inventory.etcd.client_port}`;
}
