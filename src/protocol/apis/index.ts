/**
 * The TCP apis: one file per api, and {@link apis}, the dispatch table the transport serves
 * through (`transport/tcp/transport.ts`). The frame around every api's body, and the error body:
 * `../envelope.ts`. Prose, limits and a worked example: `docs/protocol.md`.
 *
 * ## What an api file holds
 *
 * `apis/<name>.ts` opens with its grammar (request and response, field by field, as in
 * `docs/protocol.md`), then exports:
 * - `<name>Api = defineApi({ key, name, versionMax, serve })` (`api.ts`): `serve(body,
 *   correlationId, connection)` decodes the body, calls the broker synchronously and returns the
 *   encoded answer's promise (or, through `answerBy`, the broker's promise and the encoder the
 *   transport applies to its result). Nothing else: the transport owns framing, flow control, ordering
 *   and the mapping of errors to the error table.
 * - `encode<Name>Request` / `decode<Name>Request` / `encode<Name>Response` /
 *   `decode<Name>Response`: the client (`client/client.ts`) and the server use the same codecs.
 *   Encoders return a whole frame and check the caller's values; decoders take the body and
 *   name the field that breaks the grammar (`ProtocolError`).
 * - Structures other apis share (`topic_entry`, `assignments`, `group_entry`, `span`,
 *   `entries`) live in the api whose grammar defines them; the others import them from there.
 *
 * ## Adding an api
 *
 * 1. Write `apis/<name>.ts` as above, with the next unused number (numbers are permanent, never
 *    reused) and version 0.
 * 2. Add one row to {@link apis} below. `ApiKey.<Name>`, {@link isSupportedApi} and the
 *    transport's dispatch follow from the row.
 * 3. Add its golden bytes, request and response, to `test/unit/protocol-apis.test.ts` (the test
 *    fails for an api in this table without them), its section to `docs/protocol.md`, and the
 *    client call if clients need it.
 *
 * Per-connection state an api needs (e.g. whether the connection has authenticated) belongs on
 * `ApiConnection` (`api.ts`), which the transport builds once per connection.
 */
import { assert } from "../../lib/assert.ts";
import type { ApiSpec } from "./api.ts";
import { commitOffsetsApi } from "./commit-offsets.ts";
import { createTopicApi } from "./create-topic.ts";
import { deleteTopicApi } from "./delete-topic.ts";
import { describeGroupApi } from "./describe-group.ts";
import { fetchApi } from "./fetch.ts";
import { heartbeatApi } from "./heartbeat.ts";
import { idempotentProduceApi } from "./idempotent-produce.ts";
import { initProducerEpochApi } from "./init-producer-epoch.ts";
import { joinGroupApi } from "./join-group.ts";
import { leaveGroupApi } from "./leave-group.ts";
import { listGroupsApi } from "./list-groups.ts";
import { listOffsetsApi } from "./list-offsets.ts";
import { metadataApi } from "./metadata.ts";
import { produceApi } from "./produce.ts";
import { authenticateApi } from "./authenticate.ts";
import { replicaFetchApi } from "./replica-fetch.ts";

export type { ApiConnection, ApiSpec, Served } from "./api.ts";

/** The dispatch table: every api the broker serves, one row each, in number order. */
export const apis = [
  produceApi,
  fetchApi,
  createTopicApi,
  metadataApi,
  listOffsetsApi,
  deleteTopicApi,
  joinGroupApi,
  heartbeatApi,
  leaveGroupApi,
  commitOffsetsApi,
  describeGroupApi,
  listGroupsApi,
  idempotentProduceApi,
  authenticateApi,
  replicaFetchApi,
  initProducerEpochApi,
] as const;

type AnyApi = (typeof apis)[number];

/** One of the api numbers of {@link apis}. */
export type ApiKey = AnyApi["key"];

/** Api numbers by name, from {@link apis}: `ApiKey.Fetch` is 1. */
export const ApiKey = Object.freeze(Object.fromEntries(apis.map((a) => [a.name, a.key]))) as {
  readonly [A in AnyApi as A["name"]]: A["key"];
};

/** {@link apis} indexed by number (a hole where no api has that number). */
const byKey: readonly (ApiSpec | undefined)[] = (() => {
  const table: (ApiSpec | undefined)[] = [];
  for (const api of apis) {
    assert(
      Number.isInteger(api.key) && api.key >= 0 && api.key <= 0xffff,
      "an api number is a u16",
    );
    assert(table[api.key] === undefined, `api number ${api.key} is taken once`);
    table[api.key] = api;
  }
  return table;
})();

/** The api `api` names, if this broker speaks `version` of it; undefined otherwise. */
export function supportedApi(api: number, version: number): ApiSpec | undefined {
  const spec = byKey[api];
  return spec !== undefined && version >= 0 && version <= spec.versionMax ? spec : undefined;
}

/** True if `api`/`version` names an api and version this broker speaks. */
export function isSupportedApi(api: number, version: number): api is ApiKey {
  return supportedApi(api, version) !== undefined;
}
