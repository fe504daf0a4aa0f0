/**
 * api 15 InitProducerEpoch, version 0: the broker hands out the next epoch of an idempotent
 * producer id (`Broker.initProducerEpoch`; docs/decisions.md §20, Kafka's InitProducerId).
 *
 * ```
 * request       = producer_id str16
 *                 at_least u32          the lowest epoch the caller takes; 0 = none; above
 *                                       2^31 − 1 the broker refuses invalid_request
 * response      = epoch u32             0 … 2^31 − 1, durable before it is sent
 * ```
 *
 * A broker without producer epochs (an older one, or a broker view without the method) answers
 * `unsupported_api`; the client then falls back to a clock epoch.
 */
import { quote } from "../../lib/quote.ts";
import { BrokerError, Errors } from "../../broker/errors.ts";
import { finishFrame, startRequest, startResponse } from "../envelope.ts";
import { requireInt, strBytes, WireReader } from "../wire.ts";
import { defineApi } from "./api.ts";

/** InitProducerEpoch: decode, `broker.initProducerEpoch`, encode. */
export const initProducerEpochApi = defineApi({
  key: 15,
  name: "InitProducerEpoch",
  versionMax: 0,
  serve(body, correlationId, { broker }) {
    const request = decodeInitProducerEpochRequest(body);
    const init = broker.initProducerEpoch?.bind(broker);
    if (init === undefined) {
      return {
        response: Promise.reject(
          new BrokerError(
            Errors.unsupportedApi,
            `Cannot allocate an epoch for producer ${quote(request.producerId)}: this broker does not hand out producer epochs`,
          ),
        ),
      };
    }
    return {
      response: init(request).then((result) =>
        encodeInitProducerEpochResponse(correlationId, result),
      ),
    };
  },
});

/** What an InitProducerEpoch request carries. */
export interface InitProducerEpochRequestFields {
  producerId: string;
  /** The lowest epoch the caller takes, 0 … 2^32 − 1 on the wire (0 = none). */
  atLeast: number;
}

/** Encodes an InitProducerEpoch request frame. @throws ProtocolError `invalid_request` for a field that does not fit. */
export function encodeInitProducerEpochRequest(
  correlationId: number,
  request: InitProducerEpochRequestFields,
): Uint8Array {
  const id = strBytes(request.producerId, "init_producer_epoch.producer_id");
  requireInt(request.atLeast, 0, 0xffff_ffff, "init_producer_epoch.at_least");
  const w = startRequest(initProducerEpochApi.key, correlationId, 24 + id.length);
  w.u16(id.length).bytes(id).u32(request.atLeast);
  return finishFrame(w);
}

/** Decodes an InitProducerEpoch request body. @throws ProtocolError naming the field. */
export function decodeInitProducerEpochRequest(body: Uint8Array): InitProducerEpochRequestFields {
  const r = new WireReader(body, "InitProducerEpoch request");
  const producerId = r.str16("producer_id");
  const atLeast = r.u32("at_least");
  r.end("at_least");
  return { producerId, atLeast };
}

/** Encodes an InitProducerEpoch response frame. */
export function encodeInitProducerEpochResponse(
  correlationId: number,
  result: { epoch: number },
): Uint8Array {
  const w = startResponse(correlationId, 0, 16);
  w.u32(result.epoch);
  return finishFrame(w);
}

/** Decodes an InitProducerEpoch response body. @throws ProtocolError if malformed. */
export function decodeInitProducerEpochResponse(body: Uint8Array): { epoch: number } {
  const r = new WireReader(body, "InitProducerEpoch response");
  const epoch = r.u32("epoch");
  r.end("epoch");
  return { epoch };
}
