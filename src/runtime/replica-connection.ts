/**
 * The replica-fetch connection a follower uses (`cluster/follower.ts`, docs/cluster.md
 * "Followers"): the TCP client (`client/client.ts`) to a leader's advertised `host:port`,
 * connected on the first fetch. A failed connect rejects that fetch with `connection_closed`; the
 * follower closes the connection and asks for a new one.
 *
 * With `tls` (a broker whose TCP listener serves TLS: docs/cluster.md "TLS between brokers") every
 * connection speaks TLS, checks the peer's certificate against the given CA and the advertised
 * host name, and presents this broker's certificate; there is no plain-TCP fallback. Each
 * outcome goes to `links` (a failure classified by `tlsFailure`).
 */
import type { ConnectionOptions } from "node:tls";
import type { ReplicaFetchConnection } from "../cluster/follower.ts";
import type { PeerLinks } from "../cluster/peer-links.ts";
import { TcpClient, type TcpClientOptions } from "../client/client.ts";
import { ClientError } from "../client/errors.ts";
import { errorMessage } from "../lib/errors.ts";
import { tlsFailure } from "./tls.ts";

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
 * on its first fetch. `options` adds time limits to every connection; `peers.tls` gives the TLS
 * options of each new connection (read at every connect, so new material after SIGHUP applies),
 * and `peers.links` records each connection's outcome.
 */
export function replicaConnector(
  options: Omit<TcpClientOptions, "host" | "port" | "apiKey" | "tls"> = {},
  peers: { tls?: () => ConnectionOptions; links?: PeerLinks } = {},
): (address: string) => ReplicaFetchConnection {
  const links = peers.links;
  return (address) => {
    let client: Promise<TcpClient> | null = null;
    let closed = false;
    const open = (): Promise<TcpClient> => {
      client ??= TcpClient.connect({
        ...options,
        ...(peers.tls === undefined ? {} : { tls: peers.tls() }),
        ...parseTcpAddress(address),
      });
      return client;
    };
    return {
      async replicaFetch(request) {
        if (closed) throw ClientError.connectionClosed("Replica connection closed");
        try {
          const answer = await (await open()).replicaFetch(request);
          links?.succeeded(address);
          return answer;
        } catch (err) {
          // The link is down only when the connection failed or the peer refused this broker's
          // credential; an error answer (not_leader, ...) came over a working link.
          const code = (err as { code?: unknown })?.code;
          if (closed) throw err;
          if (code === "connection_closed" || code === "timeout" || code === "unauthenticated")
            links?.failed(address, { message: errorMessage(err), tls: tlsFailure(err) });
          else links?.succeeded(address);
          throw err;
        }
      },
      async close() {
        closed = true;
        const c = client;
        client = null;
        // At once, no linger: nothing the follower sent needs protecting, and a leader that is
        // paused never closes its side, which held a shutdown up by 2 s (attack15b F2).
        if (c !== null) await c.then((x) => x.destroy()).catch(() => {});
      },
    };
  };
}
