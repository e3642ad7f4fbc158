import type { Inventory, Member } from './model.ts';

/** A member's etcd URLs, as its peers and clients reach it (and as etcd's member list shows them). */
export function peerUrl(inventory: Inventory, member: Member): string {
  return `https://${member.etcdIp}:${inventory.etcd.peerPort}`;
}

export function clientUrl(inventory: Inventory, member: Member): string {
  return `https://${member.etcdIp}:${inventory.etcd.clientPort}`;
}

/** The node exporter's port on every member (the Prometheus convention). */
export const NODE_EXPORTER_PORT = 9100;
