/** IdempotentProduce (api 12) and error details on the TCP wire: round trips, golden bytes, grammar violations. */
import { describe, expect, it } from "vitest";
import { Errors } from "../../src/broker/errors.ts";
import {
  decodeIdempotentProduceRequest,
  decodeIdempotentProduceResponse,
  encodeIdempotentProduceRequest,
  encodeIdempotentProduceResponse,
} from "../../src/protocol/apis/idempotent-produce.ts";
import {
  decodeInitProducerEpochRequest,
  decodeInitProducerEpochResponse,
  encodeInitProducerEpochRequest,
  encodeInitProducerEpochResponse,
} from "../../src/protocol/apis/init-producer-epoch.ts";
import {
  decodeErrorBody,
  decodeRequestHeader,
  decodeResponseHeader,
  encodeErrorResponse,
} from "../../src/protocol/envelope.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { protocolDocExample, protocolError, requestBody, text } from "../helpers/wire.ts";

describe("IdempotentProduce (api 12)", () => {
  const batch = new EntryBatchBuilder().add(text("k"), text("v1")).add(null, text("v2")).build();

  it("round-trips a request with its producer identity and entries", () => {
    const frame = encodeIdempotentProduceRequest(9, {
      topic: "orders",
      partition: 3,
      batch,
      producer: { id: "svc:1", epoch: 7, sequence: 2 ** 40 },
    });
    const header = decodeRequestHeader(frame.subarray(4));
    expect(header).toMatchObject({ api: 12, version: 0, correlationId: 9 });
    const decoded = decodeIdempotentProduceRequest(header.body);
    expect(decoded.topic).toBe("orders");
    expect(decoded.partition).toBe(3);
    expect(decoded.producer).toEqual({ id: "svc:1", epoch: 7, sequence: 2 ** 40 });
    expect(decoded.batch.count).toBe(2);
    expect(Buffer.from(decoded.batch.bytes)).toEqual(Buffer.from(batch.bytes));
  });

  it("leaves the partition out when the broker picks (−1)", () => {
    const decoded = decodeIdempotentProduceRequest(
      requestBody(
        encodeIdempotentProduceRequest(1, {
          topic: "t",
          batch,
          producer: { id: "p", epoch: 0, sequence: 0 },
        }),
      ),
    );
    expect(decoded.partition).toBeUndefined();
  });

  it("shows the docs/protocol.md example exactly as the encoder writes it", () => {
    const one = new EntryBatchBuilder().add(null, text("a")).build();
    const frame = encodeIdempotentProduceRequest(7, {
      topic: "t",
      partition: 0,
      batch: one,
      producer: { id: "p1", epoch: 3, sequence: 5 },
    });
    expect(protocolDocExample("idempotent-produce-request")).toBe(
      Buffer.from(frame).toString("hex"),
    );
  });

  it("round-trips a response with its duplicate flag", () => {
    const result = { spans: [{ partition: 1, baseOffset: 40, count: 2 }], duplicate: true };
    const frame = encodeIdempotentProduceResponse(5, result);
    const header = decodeResponseHeader(frame.subarray(4));
    expect(header).toMatchObject({ correlationId: 5, error: 0 });
    expect(decodeIdempotentProduceResponse(header.body)).toEqual(result);
    expect(
      decodeIdempotentProduceResponse(
        decodeResponseHeader(encodeIdempotentProduceResponse(5, { spans: [] }).subarray(4)).body,
      ),
    ).toEqual({ spans: [], duplicate: false });
  });

  it("refuses a record count that disagrees with the entries, a bad partition, and a bad duplicate flag, naming the field", () => {
    const good = requestBody(
      encodeIdempotentProduceRequest(1, {
        topic: "t",
        batch,
        producer: { id: "p", epoch: 0, sequence: 0 },
      }),
    );
    const wrongCount = good.slice();
    // record_count sits after topic (2+1), partition (4), producer_id (2+1), epoch (4), sequence (8).
    new DataView(wrongCount.buffer).setUint32(22, 3);
    expect(protocolError(() => decodeIdempotentProduceRequest(wrongCount)).field).toBe(
      "record_count",
    );
    // record_count 0 and no entries: refused as an empty produce (the body ends after the count).
    const empty = good.slice(0, 26);
    new DataView(empty.buffer).setUint32(22, 0);
    const emptyError = protocolError(() => decodeIdempotentProduceRequest(empty));
    expect(emptyError.kind).toBe(Errors.invalidRequest);
    expect(emptyError.field).toBe("record_count");
    expect(emptyError.message).toContain("the request holds no records");
    const badPartition = good.slice();
    new DataView(badPartition.buffer).setInt32(3, -2);
    expect(protocolError(() => decodeIdempotentProduceRequest(badPartition)).field).toBe(
      "partition",
    );
    expect(protocolError(() => decodeIdempotentProduceRequest(good.subarray(0, 10))).kind).toBe(
      Errors.invalidRequest,
    );
    const response = decodeResponseHeader(
      encodeIdempotentProduceResponse(1, { spans: [], duplicate: false }).subarray(4),
    ).body.slice();
    response[0] = 2;
    expect(protocolError(() => decodeIdempotentProduceResponse(response)).field).toBe("duplicate");
  });

  it("refuses to encode an identity that does not fit the wire", () => {
    expect(
      protocolError(() =>
        encodeIdempotentProduceRequest(1, {
          topic: "t",
          batch,
          producer: { id: "p", epoch: -1, sequence: 0 },
        }),
      ).field,
    ).toBe("idempotent_produce.producer_epoch");
    expect(
      protocolError(() =>
        encodeIdempotentProduceRequest(1, {
          topic: "t",
          batch,
          producer: { id: "p", epoch: 0, sequence: -1 },
        }),
      ).field,
    ).toBe("idempotent_produce.base_sequence");
  });
});

describe("error details on the wire", () => {
  it("carries details after the message when the error has them, and decodes either form", () => {
    const plain = decodeResponseHeader(
      encodeErrorResponse(3, Errors.topicNotFound, "Cannot produce: no topic").subarray(4),
    );
    expect(decodeErrorBody(plain.body)).toEqual({
      code: "topic_not_found",
      message: "Cannot produce: no topic",
    });
    const detailed = decodeResponseHeader(
      encodeErrorResponse(4, Errors.outOfOrderSequence, "gap", { expected_sequence: 12 }).subarray(
        4,
      ),
    );
    expect(detailed.error).toBe(22);
    expect(decodeErrorBody(detailed.body)).toEqual({
      code: "out_of_order_sequence",
      message: "gap",
      details: { expected_sequence: 12 },
    });
    // Empty details are left out, so the bytes equal the plain form.
    expect(Buffer.from(encodeErrorResponse(3, Errors.topicNotFound, "x", {}))).toEqual(
      Buffer.from(encodeErrorResponse(3, Errors.topicNotFound, "x")),
    );
  });

  it("refuses details that are not a JSON object", () => {
    const frame = encodeErrorResponse(4, Errors.outOfOrderSequence, "gap", {
      expected_sequence: 1,
    });
    const b = decodeResponseHeader(frame.subarray(4)).body.slice();
    b[b.length - 1] = 0x20; // the closing brace of the JSON becomes a space
    expect(protocolError(() => decodeErrorBody(b)).field).toBe("details");
  });
});

describe("InitProducerEpoch (api 15)", () => {
  it("shows the docs/protocol.md example exactly as the encoder writes it", () => {
    const frame = encodeInitProducerEpochRequest(7, { producerId: "p1", atLeast: 0 });
    expect(protocolDocExample("init-producer-epoch-request")).toBe(
      Buffer.from(frame).toString("hex"),
    );
  });

  it("decodes at_least up to 2^32 − 1 (the broker refuses past 2^31 − 1) and refuses a body cut short or too long, naming the field", () => {
    const body = requestBody(
      encodeInitProducerEpochRequest(1, { producerId: "p", atLeast: 0xffff_ffff }),
    );
    expect(decodeInitProducerEpochRequest(body)).toEqual({
      producerId: "p",
      atLeast: 0xffff_ffff,
    });
    expect(protocolError(() => decodeInitProducerEpochRequest(body.subarray(0, 5)))).toMatchObject({
      field: "at_least",
    });
    const longer = new Uint8Array(body.length + 1);
    longer.set(body);
    expect(protocolError(() => decodeInitProducerEpochRequest(longer)).message).toContain(
      "at_least",
    );
    expect(() => encodeInitProducerEpochRequest(1, { producerId: "p", atLeast: -1 })).toThrow(
      /at_least/,
    );
  });

  it("round-trips the answer's epoch", () => {
    const frame = encodeInitProducerEpochResponse(3, { epoch: 0x7fff_ffff });
    const header = decodeResponseHeader(frame.subarray(4));
    expect(decodeInitProducerEpochResponse(header.body)).toEqual({ epoch: 0x7fff_ffff });
  });
});
