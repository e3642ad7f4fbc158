import type { Etcd3 } from 'etcd3';

/** What a member's HashKV answers: etcd's hash of its MVCC keys up to the revision asked, and its compaction then. */
export interface HashKV {
  hash: number;
  compactRevision: number;
}

/** The part of etcd3's connection pool a call needs: its generic call of a service's method. */
interface Callable {
  exec<T>(service: 'Maintenance', method: string, params: unknown): Promise<T>;
}

/**
 * A member's HashKV at `revision`. etcd3 (1.1) has `maintenance.hashKV`, but it asks its gRPC client for the method
 * `hashKV`, which @grpc/proto-loader names `hashKv` (and `HashKV`): every call throws "client[method] is not a
 * function" (seen on the lab). The same call, under the method's name in etcd's rpc.proto.
 */
export async function hashKV(client: Etcd3, revision: number): Promise<HashKV> {
  const pool = (client.maintenance as unknown as { client: Callable }).client;
  const answer = await pool.exec<{ hash: string | number; compact_revision: string }>('Maintenance', 'HashKV', { revision });
  return { hash: Number(answer.hash), compactRevision: Number(answer.compact_revision) };
}
