/**
 * The replica-fetch connection a follower uses (`cluster/follower.ts`, docs/cluster.md
 * "Followers"): the TCP client (`client/client.ts`) to a leader's advertised `host:port`,
 * connected on the first fetch. A failed connect rejects that fetch with `connection_closed`; the
 * follower closes the connection and asks for a new one.
 */
import type { ReplicaFetchConnection } from "../cluster/follower.ts";
import { TcpClient, type TcpClientOptions } from "../client/client.ts";
import { ClientError } from "../client/errors.ts";

/**
 * Parses `host:port` (`[v6]:port` for an IPv6 host).
 * @throws ClientError `invalid_request` naming the address if it is not one.
 */
export function parseTcpAddress(address: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(address);
  const port = m === null ? Number.NaN : Number(m[3]);
  if (m === null || port < 1 || port > 65535)
    throw new ClientError(
      "invalid_request",
      1,
      false,
      `Invalid TCP address ${JSON.stringify(address)}: expected host:port`,
    );
  return { host: m[1] ?? m[2], port };
}

/**
 * A `connect` for the replica manager: each call gives a connection to `address` that connects
 * on its first fetch. `options` adds TLS and time limits to every connection.
 */
export function replicaConnector(
  options: Omit<TcpClientOptions, "host" | "port" | "apiKey"> = {},
): (address: string) => ReplicaFetchConnection {
  return (address) => {
    let client: Promise<TcpClient> | null = null;
    let closed = false;
    const open = (): Promise<TcpClient> => {
      client ??= TcpClient.connect({ ...options, ...parseTcpAddress(address) });
      return client;
    };
    return {
      async replicaFetch(request) {
        if (closed) throw ClientError.connectionClosed("Replica connection closed");
        const c = await open();
        return c.replicaFetch(request);
      },
      async close() {
        closed = true;
        const c = client;
        client = null;
        if (c !== null) await c.then((x) => x.close()).catch(() => {});
      },
    };
  };
}
