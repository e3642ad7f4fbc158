/**
 * etcdctl's `-w json` answers, read as the e2e scenarios and the benches read them: which endpoint leads, and the
 * keys under a prefix. Free of ava, so scripts (the benches) import it too.
 */

/** One endpoint's line of `etcdctl endpoint status -w json` (the fields read here). */
export interface EndpointStatus {
  Endpoint: string;
  Status: { header: { member_id: number; revision: number }; leader: number; version: string };
}

export const parseEndpointStatuses = (stdout: string): EndpointStatus[] => JSON.parse(stdout) as EndpointStatus[];

/**
 * The endpoint whose member says it is the leader, if one does. (JSON numbers lose a uint64 ID's low bits, the
 * same bits on both sides of the comparison.)
 */
export function leaderEndpoint(statuses: readonly EndpointStatus[]): string | undefined {
  return statuses.find((status) => status.Status.header.member_id === status.Status.leader)?.Endpoint;
}

/** `etcdctl get --prefix PREFIX -w json`'s keys, less the prefix, and their values, as text. */
export function valuesUnder(stdout: string, prefix: string): Record<string, string> {
  const kvs = (JSON.parse(stdout) as { kvs?: { key: string; value: string }[] }).kvs ?? [];
  const text = (base64: string) => Buffer.from(base64, 'base64').toString();
  return Object.fromEntries(kvs.map((kv) => [text(kv.key).replace(prefix, ''), text(kv.value)]));
}
