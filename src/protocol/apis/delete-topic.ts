/**
 * api 5 DeleteTopic, version 0: deletes a topic (`Broker.deleteTopic`).
 *
 * ```
 * request       = topic str16
 * response      = (empty)
 * ```
 */
import { finishFrame, startRequest, startResponse } from "../envelope.ts";
import { strBytes, WireReader } from "../wire.ts";
import { defineApi } from "./api.ts";

/** DeleteTopic: decode, `broker.deleteTopic`, encode. */
export const deleteTopicApi = defineApi({
  key: 5,
  name: "DeleteTopic",
  versionMax: 0,
  serve(body, correlationId, { broker }) {
    const { topic } = decodeDeleteTopicRequest(body);
    return {
      response: broker.deleteTopic(topic).then(() => encodeDeleteTopicResponse(correlationId)),
    };
  },
});

/** Encodes a DeleteTopic request frame. @throws ProtocolError `invalid_request` for a topic over 65 535 bytes. */
export function encodeDeleteTopicRequest(
  correlationId: number,
  request: { topic: string },
): Uint8Array {
  const topic = strBytes(request.topic, "delete_topic.topic");
  const w = startRequest(deleteTopicApi.key, correlationId, 12 + 2 + topic.length);
  w.u16(topic.length).bytes(topic);
  return finishFrame(w);
}

/** Decodes a DeleteTopic request body. @throws ProtocolError `invalid_request` naming the field. */
export function decodeDeleteTopicRequest(body: Uint8Array): { topic: string } {
  const r = new WireReader(body, "DeleteTopic request");
  const topic = r.str16("topic");
  r.end("topic");
  return { topic };
}

/** Encodes a DeleteTopic response frame (empty body). */
export function encodeDeleteTopicResponse(correlationId: number): Uint8Array {
  return finishFrame(startResponse(correlationId, 0, 10));
}

/** Decodes a DeleteTopic response body (must be empty). @throws ProtocolError if not. */
export function decodeDeleteTopicResponse(body: Uint8Array): void {
  new WireReader(body, "DeleteTopic response").end("error");
}
