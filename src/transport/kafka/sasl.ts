/**
 * SASL/PLAIN on the Kafka listener (docs/kafka.md "SASL/PLAIN"). The listener hands the PLAIN
 * user and password to a {@link KafkaAuthenticator}, which the CLI builds over the broker's API
 * keys (user = the key's id or name, password = the whole key), and serves the connection through
 * the broker view it returns. Without keys there is no authenticator: SaslHandshake is answered
 * ILLEGAL_SASL_STATE (34), as on a Kafka listener without SASL, and every request is served.
 *
 * Per connection, with an authenticator:
 *
 * | state          | request                       | outcome                                        |
 * |----------------|-------------------------------|------------------------------------------------|
 * | start          | ApiVersions                   | answered                                       |
 * | start          | SaslHandshake PLAIN (v0, v1)  | answered 0, `["PLAIN"]`; → handshaken          |
 * | start          | SaslHandshake other mechanism | answered 33 UNSUPPORTED_SASL_MECHANISM          |
 * | handshaken     | SaslAuthenticate, good token  | answered 0; → authenticated                    |
 * | handshaken     | SaslAuthenticate, anything else | answered 58 SASL_AUTHENTICATION_FAILED (one message whatever was wrong); then closed |
 * | authenticated  | SaslHandshake/SaslAuthenticate | answered 34 ILLEGAL_SASL_STATE                |
 * | authenticated  | any other api                 | served through the key's broker view           |
 * | start, handshaken | any other api              | connection closed; nothing served              |
 */
import type { Broker } from "../../broker/types.ts";

/** Checks PLAIN credentials. */
export interface KafkaAuthenticator {
  /**
   * The broker view to serve an authenticated connection through, or null if the user and
   * password do not name a valid key. Never throws for bad credentials; never logs the password.
   * @param remote the peer, for the failure log line.
   */
  authenticate(user: string, password: string, remote: string): Broker | null;
}
