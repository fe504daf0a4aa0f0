/**
 * The shape every TCP api file exports ({@link ApiSpec}, built with {@link defineApi}) and what
 * the transport hands it. How to add an api: `index.ts`.
 */
import type { Broker, ProduceRequest } from "../../broker/types.ts";

/** What the transport gives every request of one connection (built once per connection). */
export interface ApiConnection {
  /** The broker that serves the request. */
  broker: Broker;
  /** Aborted when the connection closes or shuts down: ends long-polling fetches. */
  signal: AbortSignal;
  /**
   * Authenticates the connection with an API key (api 13, `authenticate.ts`): the transport
   * checks the key, makes its principal the connection's (from then on `broker` is that
   * principal's view of the broker) and returns who it is. Synchronous, so frames pipelined
   * behind it start with the key's rights.
   * @throws BrokerError `unauthenticated` for a refused key (the transport then closes the
   *   connection), `invalid_request` if the connection has already authenticated.
   */
  authenticate(key: string): { keyId: string; name: string; role: string };
}

/** An answer: the response frame, or chunks that written in order make it. */
export type Answer = Uint8Array | readonly Uint8Array[];

/**
 * A started request, as {@link ApiSpec.serve} returns it: either the answer's promise, or the
 * broker's promise and how its result is encoded ({@link answerBy}).
 */
export type Served =
  | {
      /**
       * The response frame, or chunks that written in order make it (a fetch's stored records go
       * out as their own chunk). Rejects with the error to answer: a BrokerError is answered with
       * its row of the error table, anything else as `internal`.
       */
      response: Promise<Answer>;
      encode?: undefined;
      /**
       * Bytes the answer may reach beyond the request frame (a fetch's `max_bytes`), charged to
       * the connection's in-flight budget until it is written; 0 if omitted.
       */
      answerBytes?: number;
      written?: undefined;
    }
  | {
      /** The broker's result; rejects as above. */
      response: Promise<unknown>;
      /**
       * Encodes the result into the answer of the request with `correlationId` (the transport
       * calls it; it may throw as a rejection would).
       */
      encode: (correlationId: number, result: unknown) => Answer;
      answerBytes?: number;
      /**
       * Called with the result once the answer encoded from it has been written whole to the
       * socket (the kernel has every byte), when the socket layer can tell: e.g. to give a
       * fetch's read buffer back for reuse (`FetchResult.release`). Never called if the
       * connection closes first, or the socket cannot tell.
       */
      written?: (result: unknown) => void;
    };

/**
 * A {@link Served} whose result the transport encodes with `encode` in its own reaction to
 * `result`, rather than in one more promise between them: the small-request path (Produce,
 * Fetch) saves a promise and a microtask per request (docs/benchmarks.md "Small requests
 * (issue #22)"). `encode` gets the correlation id from the transport, so a row passes its
 * encoder itself rather than a closure made per request.
 */
export function answerBy<R>(
  result: Promise<R>,
  encode: (correlationId: number, result: R) => Answer,
  answerBytes?: number,
): Served {
  return {
    response: result,
    encode: encode as (correlationId: number, result: unknown) => Answer,
    answerBytes,
  };
}

/** One TCP api: its number, name, highest version and how a request of it is served. */
export interface ApiSpec<Key extends number = number, Name extends string = string> {
  /** The `api` number of its frames; permanent, never reused. */
  readonly key: Key;
  /** Its name in messages, logs and `ApiKey` (`index.ts`). */
  readonly name: Name;
  /** Highest version this codec speaks (most apis are at version 0; Metadata has 1). */
  readonly versionMax: number;
  /**
   * Decodes `body`, calls the broker, and encodes its answer. The broker must be called
   * synchronously (before any await): the transport starts requests in frame order, so two
   * produces to one partition are appended in the order they were sent.
   * @throws ProtocolError when the body breaks the grammar; the transport answers it.
   */
  serve(
    body: Uint8Array,
    correlationId: number,
    connection: ApiConnection,
    /** The request's version (0 … versionMax; most apis only have 0). */
    version: number,
  ): Served;
  /**
   * Present on Produce: decodes `body` into the request {@link serve} would start, for a
   * transport that starts it itself through `Broker.produceTo` and encodes its answer without a
   * promise per request (docs/benchmarks.md "Small requests (issue #22)").
   * @throws ProtocolError as `serve` does.
   */
  decodeProduce?(body: Uint8Array): ProduceRequest;
}

/** Declares an api, keeping its number and name as literal types (so `ApiKey.Fetch` is `1`). */
export function defineApi<const Key extends number, const Name extends string>(
  api: ApiSpec<Key, Name>,
): ApiSpec<Key, Name> {
  return Object.freeze(api);
}
