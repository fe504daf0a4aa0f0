/**
 * SASL/PLAIN on the Kafka listener (docs/kafka.md "SASL/PLAIN and API keys"). The listener hands the PLAIN
 * user and password to a {@link KafkaAuthenticator} ({@link accessAuthenticator}: the broker's
 * API keys, user = the key's id or name, password = the whole key) and serves the connection
 * through the broker view of the key (`auth/access.ts`), which applies the role table to every
 * call. Whether a connection must authenticate is decided when it opens: while the broker has no
 * keys it is served as the anonymous principal (and closed once the first key is created), and
 * SaslHandshake is answered ILLEGAL_SASL_STATE (34), as on a Kafka listener without SASL.
 *
 * Per connection, while the broker has keys:
 *
 * | state          | request                         | outcome                                         |
 * |----------------|---------------------------------|-------------------------------------------------|
 * | start          | ApiVersions                     | answered                                        |
 * | start          | SaslHandshake PLAIN (v0, v1)    | answered 0, `["PLAIN"]`; → handshaken           |
 * | start          | SaslHandshake other mechanism   | answered 33 UNSUPPORTED_SASL_MECHANISM          |
 * | start          | SaslAuthenticate                | connection closed (`auth.failed`, missing)      |
 * | handshaken     | SaslAuthenticate, good token    | answered 0; → authenticated                     |
 * | handshaken     | SaslAuthenticate, anything else | answered 58 SASL_AUTHENTICATION_FAILED (one message whatever was wrong; `auth.failed`); then closed |
 * | handshaken     | SaslHandshake                   | answered 34 ILLEGAL_SASL_STATE                  |
 * | authenticated  | SaslHandshake/SaslAuthenticate  | answered 34 ILLEGAL_SASL_STATE                  |
 * | authenticated  | any other api                   | served through the key's broker view            |
 * | start, handshaken | any other api                | connection closed, nothing served (`auth.failed`, missing) |
 * | start, handshaken | no success within `--read-timeout` of opening | connection closed (`auth.failed`, timeout) |
 *
 * Before success a frame may be at most {@link kafkaSaslFrameBytesMax}; a larger claimed size
 * closes the connection unread. Once the key is revoked or changed, the connection is closed.
 */
import type { AccessControl } from "../../auth/access.ts";
import type { Principal } from "../../auth/principal.ts";
import type { Broker } from "../../broker/types.ts";

/** A connection's right to be served: the broker view it is served through. */
export interface KafkaSession {
  /** The broker as the connection's principal may use it. */
  readonly broker: Broker;
  /** The key's id (logs), or null for the anonymous principal. */
  readonly keyId: string | null;
  /** Stops watching the principal (the connection closed). */
  release(): void;
}

/** Checks PLAIN credentials and says whether connections must present them. */
export interface KafkaAuthenticator {
  /** True while a new connection must authenticate before anything but ApiVersions and SASL is served (the broker has keys). */
  readonly required: boolean;
  /**
   * The session of a connection opened while authentication is not required. `onInvalid` runs
   * once, when that stops being allowed (the first key was created): the connection must close.
   */
  anonymous(remote: string, onInvalid: () => void): KafkaSession;
  /**
   * The session for PLAIN credentials, or null if they do not name a valid key (logged as
   * `auth.failed` with the key's id part at most). Never throws for bad credentials; never logs
   * the password or the user. `onInvalid` runs once, when the key is revoked or changed.
   */
  authenticate(
    credentials: { user: string; password: string; remote: string },
    onInvalid: () => void,
  ): KafkaSession | null;
  /** Logs a connection refused before it authenticated (`auth.failed`): a request before SASL, or no SASL in time. */
  refused(remote: string, reason: "missing" | "timeout"): void;
}

/** Largest request frame before SASL succeeds, in bytes: a PLAIN token of an API key and a client id fit far below it. */
export const kafkaSaslFrameBytesMax = 2048;

/** The authenticator over the broker's API keys and role table (module comment). */
export function accessAuthenticator(access: AccessControl): KafkaAuthenticator {
  const session = (principal: Principal, onInvalid: () => void): KafkaSession => ({
    broker: access.brokerFor(principal),
    keyId: principal.kind === "key" ? principal.id : null,
    release: access.watch(principal, onInvalid),
  });
  return {
    get required() {
      return access.required;
    },
    anonymous(remote, onInvalid) {
      return session(access.authenticate(undefined, remote, "kafka"), onInvalid);
    },
    authenticate({ user, password, remote }, onInvalid) {
      let principal: Principal;
      try {
        principal = access.authenticateUser(user, password, remote, "kafka");
      } catch {
        return null; // logged by authenticateUser; one answer whatever was wrong
      }
      return session(principal, onInvalid);
    },
    refused(remote, reason) {
      access.logFailure(reason, remote, "kafka", null);
    },
  };
}
