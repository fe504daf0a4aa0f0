/**
 * HTTP routes of consumer groups and producer epochs, and the idempotent-producer headers of produce. Like the rest
 * of the HTTP front door they only decode, call the {@link Broker} and encode (shapes:
 * `docs/http-api.md`).
 *
 * | method & path                                          | body                                             | success |
 * |--------------------------------------------------------|--------------------------------------------------|---------|
 * | `POST /v1/groups/{group}/members`                      | `{"topics":[…],"session_timeout_ms"?,"member_id"?}` | 200 `{"member_id","generation","session_timeout_ms","assignments":[{"topic","partition"}]}` |
 * | `POST /v1/groups/{group}/members/{member}/heartbeat`   | none, or `{"generation"?}`                       | 200 `{"generation","rejoin","assignments"}` |
 * | `DELETE /v1/groups/{group}/members/{member}`           | —                                                | 204 |
 * | `POST /v1/groups/{group}/offsets`                      | `{"member_id"?,"generation"?,"offsets":[{"topic","partition","offset"}]}` | 204 |
 * | `GET /v1/groups/{group}`                               | —                                                | 200 `{"group","generation","members":[…],"offsets":[{"topic","partition","committed","high_watermark","lag","owner"}]}` |
 * | `GET /v1/groups`                                       | —                                                | 200 `{"groups":[…]}` |
 * | `POST /v1/producers/{producer_id}/epoch`               | none, or `{"at_least"?}`                         | 200 `{"epoch"}` (docs/decisions.md §20) |
 *
 * Idempotent produce: `Producer-Id`, `Producer-Epoch` and `Producer-Seq` (names from the Durable
 * Streams protocol) on `POST /v1/topics/{topic}/records`, all three or none.
 */
import type { Context, Hono } from "hono";
import type { Broker, ProducerIdentity } from "../../broker/types.ts";
import { producerEpochMax } from "../../lib/limits.ts";
import { clip, quote } from "../../lib/quote.ts";
import { assignmentsJson, groupJson } from "./encode.ts";
import { invalidRequest } from "./errors.ts";
import { BrokerError, Errors } from "../../broker/errors.ts";
import { parseInteger } from "./params.ts";

/** The app's body helpers: read the bytes (400 if the client breaks off), parse strict UTF-8 JSON (400 naming the problem). */
export interface BodyReaders {
  readBody: (c: Context, action: string) => Promise<Uint8Array>;
  parseJson: (bytes: Uint8Array, action: string) => unknown;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function onlyFields(
  body: Record<string, unknown>,
  allowed: readonly string[],
  action: string,
): void {
  for (const field of Object.keys(body)) {
    if (!allowed.includes(field))
      throw invalidRequest(
        action,
        `unknown field ${quote(field)} (expected ${allowed.join(", ")})`,
        { field: clip(field) },
      );
  }
}

function optionalInteger(
  body: Record<string, unknown>,
  field: string,
  action: string,
): number | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "number" || !Number.isSafeInteger(value))
    throw invalidRequest(action, `"${field}" must be an integer`, { field });
  return value;
}

function optionalString(
  body: Record<string, unknown>,
  field: string,
  action: string,
): string | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string" || value.length === 0)
    throw invalidRequest(action, `"${field}" must be a non-empty string`, { field });
  return value;
}

/** Registers the consumer-group routes on `app`. */
export function registerGroupRoutes<E extends { Bindings: object }>(
  app: Hono<E>,
  options: { broker: Broker; limitBody: (c: Context) => void } & BodyReaders,
): void {
  const { broker, limitBody, readBody, parseJson } = options;
  const readJson = async (c: Context, action: string) =>
    parseJson(await readBody(c, action), action);

  app.post("/v1/groups/:group/members", async (c) => {
    limitBody(c);
    const group = c.req.param("group");
    const action = `Cannot join group ${quote(group)}`;
    const body = await readJson(c, action);
    if (!isObject(body))
      throw invalidRequest(action, 'the body must be a JSON object like {"topics":["orders"]}');
    onlyFields(body, ["topics", "session_timeout_ms", "member_id"], action);
    const topics = body.topics;
    if (!Array.isArray(topics) || !topics.every((t) => typeof t === "string"))
      throw invalidRequest(action, '"topics" must be an array of topic names', { field: "topics" });
    const result = await broker.joinGroup({
      group,
      topics: topics as string[],
      sessionTimeoutMs: optionalInteger(body, "session_timeout_ms", action),
      memberId: optionalString(body, "member_id", action),
    });
    return c.json({
      member_id: result.memberId,
      generation: result.generation,
      session_timeout_ms: result.sessionTimeoutMs,
      assignments: assignmentsJson(result.assignments),
    });
  });

  app.post("/v1/groups/:group/members/:member/heartbeat", async (c) => {
    limitBody(c);
    const group = c.req.param("group");
    const memberId = c.req.param("member");
    const action = `Cannot heartbeat in group ${quote(group)}`;
    const raw = await readBody(c, action);
    let generation: number | undefined;
    if (raw.length > 0) {
      const parsed = parseJson(raw, action);
      if (!isObject(parsed))
        throw invalidRequest(
          action,
          'the body must be empty or a JSON object like {"generation":3}',
        );
      onlyFields(parsed, ["generation"], action);
      generation = optionalInteger(parsed, "generation", action);
    }
    const result = await broker.heartbeat({ group, memberId, generation });
    return c.json({
      generation: result.generation,
      rejoin: result.rejoin,
      assignments: assignmentsJson(result.assignments),
    });
  });

  app.delete("/v1/groups/:group/members/:member", async (c) => {
    await broker.leaveGroup({ group: c.req.param("group"), memberId: c.req.param("member") });
    return c.body(null, 204);
  });

  app.post("/v1/producers/:producer_id/epoch", async (c) => {
    limitBody(c);
    const producerId = c.req.param("producer_id");
    const action = `Cannot allocate an epoch for producer ${quote(producerId)}`;
    const init = broker.initProducerEpoch?.bind(broker);
    if (init === undefined)
      throw new BrokerError(Errors.notFound, `${action}: this broker does not hand out epochs`);
    const raw = await readBody(c, action);
    let atLeast: number | undefined;
    if (raw.length > 0) {
      const parsed = parseJson(raw, action);
      if (!isObject(parsed))
        throw invalidRequest(action, 'the body must be empty or a JSON object like {"at_least":7}');
      onlyFields(parsed, ["at_least"], action);
      atLeast = optionalInteger(parsed, "at_least", action);
    }
    return c.json(await init({ producerId, atLeast }));
  });

  app.post("/v1/groups/:group/offsets", async (c) => {
    limitBody(c);
    const group = c.req.param("group");
    const action = `Cannot commit offsets of group ${quote(group)}`;
    const body = await readJson(c, action);
    if (!isObject(body))
      throw invalidRequest(
        action,
        'the body must be a JSON object like {"offsets":[{"topic":"orders","partition":0,"offset":42}]}',
      );
    onlyFields(body, ["member_id", "generation", "offsets"], action);
    if (!Array.isArray(body.offsets))
      throw invalidRequest(action, '"offsets" must be an array', { field: "offsets" });
    body.offsets.forEach((o: unknown, i: number) => {
      if (isObject(o)) onlyFields(o, ["topic", "partition", "offset"], `${action}: offsets[${i}]`);
    });
    await broker.commitOffsets({
      group,
      memberId: optionalString(body, "member_id", action),
      generation: optionalInteger(body, "generation", action),
      offsets: body.offsets as { topic: string; partition: number; offset: number }[],
    });
    return c.body(null, 204);
  });

  app.get("/v1/groups/:group", async (c) =>
    c.json(groupJson(await broker.describeGroup(c.req.param("group")))),
  );

  app.get("/v1/groups", async (c) =>
    c.json({ groups: (await broker.listGroups()).map(groupJson) }),
  );
}

/**
 * The producer identity from `Producer-Id`, `Producer-Epoch` and `Producer-Seq`, or undefined
 * when none is given.
 * @throws BrokerError invalid_request naming the header when only some are given or one is malformed.
 */
export function producerFromHeaders(c: Context, action: string): ProducerIdentity | undefined {
  const id = c.req.header("producer-id");
  const epoch = c.req.header("producer-epoch");
  const seq = c.req.header("producer-seq");
  if (id === undefined && epoch === undefined && seq === undefined) return undefined;
  for (const [name, value] of [
    ["Producer-Id", id],
    ["Producer-Epoch", epoch],
    ["Producer-Seq", seq],
  ] as const) {
    if (value === undefined)
      throw invalidRequest(
        action,
        `header "${name}" is missing: an idempotent produce needs Producer-Id, Producer-Epoch and Producer-Seq`,
        { parameter: name },
      );
  }
  return {
    id: id!.trim(),
    epoch: parseInteger(epoch!.trim(), {
      label: 'header "Producer-Epoch"',
      name: "Producer-Epoch",
      min: 0,
      max: producerEpochMax,
      action,
    }),
    sequence: parseInteger(seq!.trim(), {
      label: 'header "Producer-Seq"',
      name: "Producer-Seq",
      min: 0,
      max: Number.MAX_SAFE_INTEGER,
      action,
    }),
  };
}
