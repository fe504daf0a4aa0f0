/**
 * The mirror's connection to its upstream from a list of bootstrap brokers (`--mirror-to
 * H:P[,H:P…]`, docs/edge.md "An upstream cluster"): the first that connects (and accepts the key)
 * serves as the `--mirror-to` broker, so an edge started while one broker of the upstream cluster
 * is down still forwards through the others.
 */
import type { TcpClient } from "../client/client.ts";
import { ClientError } from "../client/errors.ts";

/**
 * Why one bootstrap broker did not connect, short: the system's error code (`ECONNREFUSED`…) when
 * the connect failed with one, else the message without its "Cannot connect to host:port: ".
 */
function failureReason(error: unknown): string {
  const cause = error instanceof Error ? error.cause : undefined;
  const code = (cause as { code?: unknown } | undefined)?.code;
  if (typeof code === "string" && /^E[A-Z0-9_]+$/.test(code)) return code;
  const message = error instanceof Error ? error.message : String(error);
  return message.replace(/^Cannot connect to \S+: /, "");
}

/**
 * Connections to the first of `addresses` ("host:port" each, at least one) that connects,
 * through `open`; each try begins with the one that connected last (a lost connection goes back to
 * the same broker first), then the others in order.
 */
export class BootstrapConnector {
  readonly #addresses: readonly string[];
  readonly #open: (address: string) => Promise<TcpClient>;
  #next = 0;
  #connected: string | null = null;

  /** @throws Error when `addresses` is empty. */
  constructor(addresses: readonly string[], open: (address: string) => Promise<TcpClient>) {
    if (addresses.length === 0) throw new Error("no bootstrap broker given");
    this.#addresses = addresses;
    this.#open = open;
  }

  /**
   * The broker the last connection went to, or, before one (or after every broker failed), the
   * whole list joined with ",": for log lines.
   */
  get address(): string {
    return this.#connected ?? this.#addresses.join(",");
  }

  /**
   * Connects to one broker, trying each once.
   * @throws ClientError the first error a retry at another broker would not fix (a refused key:
   *   the brokers of a cluster share their keys), as that broker gave it; when none connects, the
   *   last error's code (`connection_closed`, `timeout`) with a message naming every broker and why
   *   ("Cannot connect to any of the 3 --mirror-to brokers: 10.0.0.1:9092 (ECONNREFUSED), …"; one
   *   broker: its own error).
   */
  async connect(): Promise<TcpClient> {
    const n = this.#addresses.length;
    const failures: string[] = [];
    let last: unknown = null;
    for (let i = 0; i < n; i++) {
      const index = (this.#next + i) % n;
      const address = this.#addresses[index];
      try {
        const client = await this.#open(address);
        this.#next = index;
        this.#connected = address;
        return client;
      } catch (err) {
        if (!(err instanceof ClientError) || !err.retriable) throw err;
        failures.push(`${address} (${failureReason(err)})`);
        last = err;
      }
    }
    this.#connected = null;
    const error = last as ClientError;
    if (n === 1) throw error;
    throw new ClientError(
      error.code,
      error.tcp,
      error.retriable,
      `Cannot connect to any of the ${n} --mirror-to brokers: ${failures.join(", ")}`,
    );
  }
}
