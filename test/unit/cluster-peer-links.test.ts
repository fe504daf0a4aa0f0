/**
 * The replica-fetch links of a broker (`cluster/peer-links.ts`) and how a failure is found to be a
 * TLS one (`runtime/tls.ts` `tlsFailure`): docs/cluster.md "TLS between brokers".
 */
import { describe, expect, it } from "vitest";
import { failingPeerLinkIdleMs, PeerLinks, peerLinkIdleMs } from "../../src/cluster/peer-links.ts";
import { ClientError } from "../../src/client/errors.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { tlsFailure } from "../../src/runtime/tls.ts";

function coded(code: string, message: string): Error {
  return Object.assign(new Error(message), { code });
}

describe("tlsFailure", () => {
  it("finds a certificate check that failed, through the client's wrapping error", () => {
    const cause = coded(
      "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
      "unable to verify the first certificate",
    );
    const err = ClientError.connectionClosed(
      "Cannot connect to 127.0.0.1:9: unable to verify the first certificate",
      cause,
    );
    expect(tlsFailure(err)).toEqual({
      kind: "verify",
      reason: "UNABLE_TO_VERIFY_LEAF_SIGNATURE: unable to verify the first certificate",
    });
    expect(
      tlsFailure(coded("ERR_TLS_CERT_ALTNAME_INVALID", "Hostname/IP does not match"))?.kind,
    ).toBe("verify");
  });

  it("finds a refused handshake and a peer that closed it (plain TCP), and nothing else", () => {
    expect(
      tlsFailure(coded("ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED", "alert certificate required"))
        ?.kind,
    ).toBe("handshake");
    const closed = coded(
      "ECONNRESET",
      "Client network socket disconnected before secure TLS connection was established",
    );
    expect(tlsFailure(closed)?.reason).toMatch(/does its TCP listener serve plain TCP\?/);
    expect(tlsFailure(coded("ECONNREFUSED", "connect ECONNREFUSED 127.0.0.1:9"))).toBeNull();
    expect(tlsFailure(ClientError.timeout("no answer"))).toBeNull();
    expect(tlsFailure("not an error")).toBeNull();
  });
});

describe("PeerLinks", () => {
  it("drops a link no longer tried (the broker stopped following that peer), keeps one in use", () => {
    const clock = new ManualClock(1000);
    const links = new PeerLinks({ clock, logger: new MemoryLogger(), tls: false });
    links.failed("h:3", { message: "connect ECONNREFUSED", tls: null });
    links.failed("h:4", { message: "connect ECONNREFUSED", tls: null });
    for (let t = 0; t < peerLinkIdleMs + 1000; t += 1000) {
      clock.advance(1000);
      links.failed("h:4", { message: "connect ECONNREFUSED", tls: null });
    }
    expect(links.snapshot().map((l) => [l.tcp, l.ok])).toEqual([["h:4", false]]);
  });

  it("stops listing a failing link soon after nobody retries it, an ok one only after the idle time", () => {
    const clock = new ManualClock(1000);
    const links = new PeerLinks({ clock, logger: new MemoryLogger(), tls: false });
    links.failed("h:3", { message: "connect ECONNREFUSED", tls: null });
    links.succeeded("h:4");
    clock.advance(failingPeerLinkIdleMs - 1);
    expect(links.snapshot().map((l) => [l.tcp, l.ok])).toEqual([
      ["h:3", false],
      ["h:4", true],
    ]);
    clock.advance(2);
    expect(links.snapshot().map((l) => [l.tcp, l.ok])).toEqual([["h:4", true]]);
    clock.advance(peerLinkIdleMs);
    expect(links.snapshot()).toEqual([]);
  });

  it("tells TLS failures apart, logs each reason once, and reports the link working again", () => {
    const clock = new ManualClock(1000);
    const logger = new MemoryLogger();
    const links = new PeerLinks({ clock, logger, tls: true });
    const untrusted = { kind: "verify" as const, reason: "SELF_SIGNED_CERT_IN_CHAIN: self-signed" };
    links.failed("h:1", { message: "Cannot connect", tls: untrusted });
    clock.advance(500);
    links.failed("h:1", { message: "Cannot connect", tls: untrusted });
    links.failed("h:2", { message: "connect ECONNREFUSED", tls: null });
    expect(logger.named("cluster.peer_tls_failed")).toMatchObject([
      {
        peer: "h:1",
        reason: untrusted.reason,
        action: expect.stringContaining("--cluster-tls-ca"),
      },
    ]);
    expect(links.snapshot()).toEqual([
      {
        tcp: "h:1",
        tls: true,
        ok: false,
        error: untrusted.reason,
        tls_failure: true,
        since_ms_ago: 500,
      },
      {
        tcp: "h:2",
        tls: true,
        ok: false,
        error: "connect ECONNREFUSED",
        tls_failure: false,
        since_ms_ago: 0,
      },
    ]);
    links.succeeded("h:1");
    expect(logger.named("cluster.peer_connected")).toMatchObject([{ peer: "h:1" }]);
    expect(links.snapshot()[0]).toMatchObject({ ok: true, error: null, tls_failure: false });
    // Failing again after it worked is logged again.
    links.failed("h:1", { message: "Cannot connect", tls: untrusted });
    expect(logger.named("cluster.peer_tls_failed")).toHaveLength(2);
  });
});
