/**
 * What this broker knows of its connections to other brokers (docs/cluster.md "TLS between
 * brokers"): for each peer TCP address it fetched from, whether the connection speaks TLS, whether
 * the last attempt worked, and if not why, with TLS failures (a peer certificate this broker does
 * not trust or that does not name the advertised host, a client certificate the peer refused, a
 * peer that speaks plain TCP) told apart from the rest (refused, reset, timed out).
 *
 * A TLS failure is logged at `error` as `cluster.peer_tls_failed` once per peer and reason (again
 * if it comes back after the link worked), with what to check; the link working again after a
 * failure is logged `cluster.peer_connected`. Other failures are the follower's to log
 * (`replication.fetch_failed`). Shown in `GET /v1/cluster` (`peer_links`), `cluster status` and
 * `/metrics` (`esb_cluster_peer_tls_failing`). Never any fallback: a TLS broker only ever
 * connects to peers with TLS.
 *
 * Layer rule: time through {@link Clock}; no `node:*`.
 */
import type { Clock } from "../lib/clock.ts";
import type { Logger } from "../lib/logger.ts";

/**
 * A link not tried for this long, in ms, is no longer in use (this broker stopped following that
 * peer) and leaves the snapshot. A follower in use tries at least every second (its backoff is at
 * most 1 s, the leader's long-poll 500 ms).
 */
export const peerLinkIdleMs = 30_000;

/**
 * A failing link not tried for this long, in ms, is no longer in use either: a follower retries
 * a failing leader at least every second, so after 5 s nobody is (the peer came back leading
 * nothing, or this broker follows another leader now) and `cluster status` stops listing it.
 */
export const failingPeerLinkIdleMs = 5_000;

/** One peer link as {@link PeerLinks.snapshot} reports it (snake_case: shown as JSON). */
export interface PeerLinkStatus {
  /** The peer's advertised TCP address (`host:port`). */
  tcp: string;
  /** Whether connections to it speak TLS (every one does on a broker whose listener serves TLS). */
  tls: boolean;
  /** Whether the last connection or fetch worked. */
  ok: boolean;
  /** Why the last attempt failed (null while ok). */
  error: string | null;
  /** The failure was in TLS: certificate not trusted or not naming the host, refused client certificate, a plain peer. */
  tls_failure: boolean;
  /** Ms since the link last changed between ok and failing. */
  since_ms_ago: number;
}

/** A failure as the runtime classifies it. */
export interface PeerFailure {
  /** The error's message. */
  message: string;
  /** Set when the failure was in TLS (`runtime/tls.ts` `tlsFailure`): what went wrong there. */
  tls: { kind: "verify" | "handshake"; reason: string } | null;
}

interface Link {
  ok: boolean;
  error: string | null;
  tlsFailure: boolean;
  changedMs: number;
  /** When a connection or fetch to the peer was last tried (succeeded or failed). */
  triedMs: number;
  /** The TLS reason last logged (so a repeating failure is logged once). */
  logged: string | null;
}

/** See the module comment. */
export class PeerLinks {
  readonly #links = new Map<string, Link>();
  readonly #clock: Clock;
  readonly #logger: Logger;
  /** Whether this broker connects to peers with TLS. */
  readonly tls: boolean;

  constructor(options: { clock: Clock; logger: Logger; tls: boolean }) {
    this.#clock = options.clock;
    this.#logger = options.logger;
    this.tls = options.tls;
  }

  #link(tcp: string): Link {
    let link = this.#links.get(tcp);
    if (link === undefined) {
      link = {
        ok: true,
        error: null,
        tlsFailure: false,
        changedMs: this.#clock.nowMs(),
        triedMs: this.#clock.nowMs(),
        logged: null,
      };
      this.#links.set(tcp, link);
    }
    link.triedMs = this.#clock.nowMs();
    return link;
  }

  /** A fetch from `tcp` was answered (over TLS: the peer's certificate was verified). */
  succeeded(tcp: string): void {
    const link = this.#link(tcp);
    if (link.ok) return;
    this.#logger.log("info", "cluster.peer_connected", {
      peer: tcp,
      tls: this.tls,
      after: link.error,
    });
    link.ok = true;
    link.error = null;
    link.tlsFailure = false;
    link.logged = null;
    link.changedMs = this.#clock.nowMs();
  }

  /** A connection to `tcp`, or a fetch over it, failed. */
  failed(tcp: string, failure: PeerFailure): void {
    const link = this.#link(tcp);
    if (link.ok) link.changedMs = this.#clock.nowMs();
    link.ok = false;
    link.error = failure.tls?.reason ?? failure.message;
    link.tlsFailure = failure.tls !== null;
    if (failure.tls === null || link.logged === failure.tls.reason) return;
    link.logged = failure.tls.reason;
    this.#logger.log("error", "cluster.peer_tls_failed", {
      peer: tcp,
      reason: failure.tls.reason,
      action:
        failure.tls.kind === "verify"
          ? "the peer's certificate is not trusted or does not name its advertised host: check --cluster-tls-ca (the CA that signed the other brokers' certificates) and that the peer's certificate lists the host of its --advertise-tcp; this broker does not replicate from it until then, and never over plain TCP"
          : "the TLS handshake with the peer failed: check that it serves TLS on its TCP port (--tls-cert) and, if it requires client certificates (--tls-client-ca), that this broker's --tls-cert is issued by that CA and allows client authentication; never retried over plain TCP",
    });
  }

  /**
   * Every peer link in use (tried within {@link peerLinkIdleMs}, or {@link failingPeerLinkIdleMs}
   * while failing), by address.
   */
  snapshot(): PeerLinkStatus[] {
    const now = this.#clock.nowMs();
    for (const [tcp, l] of this.#links)
      if (now - l.triedMs > (l.ok ? peerLinkIdleMs : failingPeerLinkIdleMs))
        this.#links.delete(tcp);
    return [...this.#links]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([tcp, l]) => ({
        tcp,
        tls: this.tls,
        ok: l.ok,
        error: l.error,
        tls_failure: l.tlsFailure,
        since_ms_ago: Math.max(0, now - l.changedMs),
      }));
  }
}
