/**
 * api 2 CreateTopic, version 0: creates a topic (`Broker.createTopic`).
 *
 * ```
 * request       = topic str16
 *                 partitions u32
 *                 config_len u32        0 = no config (all defaults)
 *                 config [u8]           a JSON object, UTF-8
 * response      = topic_entry           as in Metadata (`metadata.ts`)
 * ```
 */
import { Errors } from "../../broker/errors.ts";
import type { CreateTopicRequest, TopicDescription } from "../../broker/types.ts";
import { finishFrame, startRequest, startResponse } from "../envelope.ts";
import { parseJsonObject, requireInt, strBytes, WireReader } from "../wire.ts";
import { defineApi } from "./api.ts";
import { readTopicEntry, topicEntryBytesEstimate, writeTopicEntry } from "./metadata.ts";

/** CreateTopic: decode, `broker.createTopic`, encode. */
export const createTopicApi = defineApi({
  key: 2,
  name: "CreateTopic",
  versionMax: 0,
  serve(body, correlationId, { broker }) {
    const request = decodeCreateTopicRequest(body);
    return {
      response: broker
        .createTopic(request)
        .then((topic) => encodeCreateTopicResponse(correlationId, topic)),
    };
  },
});

const encoder = new TextEncoder();

/**
 * Encodes a CreateTopic request frame. An omitted config is sent as `config_len` 0.
 * @throws ProtocolError `invalid_request` for a bad topic or partition count.
 */
export function encodeCreateTopicRequest(
  correlationId: number,
  request: CreateTopicRequest,
): Uint8Array {
  const topic = strBytes(request.name, "create_topic.topic");
  requireInt(request.partitions, 0, 0xffff_ffff, "create_topic.partitions");
  const config =
    request.config === undefined
      ? new Uint8Array(0)
      : encoder.encode(JSON.stringify(request.config));
  const w = startRequest(
    createTopicApi.key,
    correlationId,
    12 + 2 + topic.length + 8 + config.length,
  );
  w.u16(topic.length).bytes(topic).u32(request.partitions).u32(config.length).bytes(config);
  return finishFrame(w);
}

/**
 * Decodes a CreateTopic request body. `config_len` 0 means no config.
 * @throws ProtocolError `invalid_request` naming the field, e.g. a config that is not a JSON object.
 */
export function decodeCreateTopicRequest(body: Uint8Array): CreateTopicRequest {
  const r = new WireReader(body, "CreateTopic request");
  const name = r.str16("topic");
  const partitions = r.u32("partitions");
  const configText = r.str32("config", "config_len");
  r.end("config");
  const request: CreateTopicRequest = { name, partitions };
  if (configText.length > 0)
    request.config = parseJsonObject(
      configText,
      "CreateTopic request",
      "config",
      Errors.invalidConfig,
    );
  return request;
}

/** Encodes a CreateTopic response frame: one topic_entry. */
export function encodeCreateTopicResponse(
  correlationId: number,
  topic: TopicDescription,
): Uint8Array {
  const w = startResponse(correlationId, 0, 10 + topicEntryBytesEstimate(topic));
  writeTopicEntry(w, topic);
  return finishFrame(w);
}

/** Decodes a CreateTopic response body. @throws ProtocolError if malformed. */
export function decodeCreateTopicResponse(body: Uint8Array): TopicDescription {
  const r = new WireReader(body, "CreateTopic response");
  const topic = readTopicEntry(r, "topic");
  r.end("topic");
  return topic;
}
