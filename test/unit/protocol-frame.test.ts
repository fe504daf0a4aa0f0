import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { Errors } from "../../src/broker/errors.ts";
import type { TopicDescription } from "../../src/broker/types.ts";
import { decodeCreateTopicRequest } from "../../src/protocol/apis/create-topic.ts";
import { decodeDeleteTopicRequest } from "../../src/protocol/apis/delete-topic.ts";
import {
  decodeFetchRequest,
  decodeFetchResponse,
  encodeFetchRequest,
} from "../../src/protocol/apis/fetch.ts";
import { ApiKey } from "../../src/protocol/apis/index.ts";
import { decodeListOffsetsRequest } from "../../src/protocol/apis/list-offsets.ts";
import {
  decodeMetadataRequest,
  decodeMetadataResponse,
  encodeMetadataResponse,
} from "../../src/protocol/apis/metadata.ts";
import {
  decodeProduceRequest,
  decodeProduceResponse,
  encodeProduceRequest,
  encodeProduceResponse,
} from "../../src/protocol/apis/produce.ts";
import {
  decodeErrorBody,
  decodeRequestHeader,
  decodeResponseHeader,
} from "../../src/protocol/envelope.ts";
import { ProtocolError } from "../../src/protocol/wire.ts";
import { FrameDecoder, FrameLengthError } from "../../src/protocol/frame.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { recordingAllocations } from "../helpers/allocations.ts";
import { text } from "../helpers/wire.ts";

/** A frame: u32 length, then `payload`. */
function frameOf(payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(4 + payload.length);
  new DataView(out.buffer).setUint32(0, payload.length);
  out.set(payload, 4);
  return out;
}

/** Splits `bytes` at the given cut points (any numbers; reduced modulo the length). */
function split(bytes: Uint8Array, cuts: number[]): Uint8Array[] {
  const points = [
    ...new Set(cuts.map((c) => (bytes.length === 0 ? 0 : c % (bytes.length + 1)))),
  ].sort((a, b) => a - b);
  const chunks: Uint8Array[] = [];
  let start = 0;
  for (const p of points) {
    chunks.push(bytes.subarray(start, p));
    start = p;
  }
  chunks.push(bytes.subarray(start));
  return chunks;
}

describe("FrameDecoder", () => {
  it("returns a frame only once all of it has arrived, across any chunking", () => {
    const payload = text("abcdefghijkl");
    const bytes = frameOf(payload);
    for (let cut = 0; cut <= bytes.length; cut++) {
      const decoder = new FrameDecoder({ lengthMin: 8, lengthMax: 1024 });
      decoder.push(bytes.subarray(0, cut));
      if (cut < bytes.length) {
        expect(decoder.next()).toBeNull();
        expect(decoder.bufferedBytes).toBe(cut);
      }
      decoder.push(bytes.subarray(cut));
      expect(Buffer.from(decoder.next()!).toString()).toBe("abcdefghijkl");
      expect(decoder.next()).toBeNull();
      expect(decoder.bufferedBytes).toBe(0);
    }
  });

  it("nextChunks() hands out a frame that spans chunks as views of them, in order, without joining", () => {
    const first = frameOf(new Uint8Array(100).fill(7));
    const second = frameOf(text("abcdefgh"));
    const stream = new Uint8Array(first.length + second.length);
    stream.set(first);
    stream.set(second, first.length);
    const decoder = new FrameDecoder({ lengthMin: 8, lengthMax: 1024 });
    const pieces = [stream.subarray(0, 2), stream.subarray(2, 50), stream.subarray(50, 100)];
    for (const p of pieces) decoder.push(p);
    expect(decoder.nextChunks()).toBeNull();
    decoder.push(stream.subarray(100));
    const chunks = decoder.nextChunks()!;
    expect(chunks.map((c) => c.buffer === stream.buffer)).toEqual([true, true, true]);
    expect(chunks.map((c) => c.length)).toEqual([46, 50, 4]);
    expect(chunks.flatMap((c) => Array.from(c))).toEqual(Array(100).fill(7));
    expect(decoder.nextChunks()!.map((c) => new TextDecoder().decode(c))).toEqual(["abcdefgh"]);
    expect(decoder.nextChunks()).toBeNull();
    expect(decoder.bufferedBytes).toBe(0);
  });

  it("returns a frame inside one chunk as a view, without copying", () => {
    const bytes = frameOf(text("abcdefgh"));
    const decoder = new FrameDecoder({ lengthMin: 8, lengthMax: 1024 });
    decoder.push(bytes);
    const frame = decoder.next()!;
    expect(frame.buffer).toBe(bytes.buffer);
  });

  it("compact() gives the waiting part of a frame buffers of its own when it is a small view of a shared one, and the frame stays whole", () => {
    const frame = frameOf(text("abcdefghijklmnop"));
    // The first 10 bytes arrive as a view of a large shared slab, the rest on its own.
    const slab = new Uint8Array(4096);
    slab.set(frame.subarray(0, 10), 100);
    const borrowed = slab.subarray(100, 110);
    const own = frame.slice(10);
    const decoder = new FrameDecoder({ lengthMin: 8, lengthMax: 1024 });
    decoder.push(borrowed);
    expect(decoder.next()).toBeNull();
    decoder.compact();
    // The slab is reused for something else: the decoder no longer depends on it.
    slab.fill(0xee);
    decoder.push(own);
    decoder.compact();
    const whole = decoder.next()!;
    expect(new TextDecoder().decode(whole)).toBe("abcdefghijklmnop");
    // A chunk that is its whole buffer is kept, not copied.
    const alone = frame.slice(0, 10);
    const second = new FrameDecoder({ lengthMin: 8, lengthMax: 1024 });
    second.push(alone);
    second.compact();
    second.push(frame.slice(10));
    expect(second.nextChunks()![0].buffer).toBe(alone.buffer);
  });

  it("joins a frame that spans chunks into one buffer of exactly its length, only once complete", () => {
    const bytes = frameOf(new Uint8Array(100).fill(7));
    const decoder = new FrameDecoder({ lengthMin: 8, lengthMax: 1024 });
    const partial = recordingAllocations(() => {
      decoder.push(bytes.subarray(0, 50));
      return decoder.next();
    });
    expect(partial.value).toBeNull();
    expect(partial.sizes).toEqual([]);
    const complete = recordingAllocations(() => {
      decoder.push(bytes.subarray(50));
      return decoder.next();
    });
    expect(complete.value!.length).toBe(100);
    expect(complete.sizes).toEqual([100]);
  });

  it("next() starts copying a frame into its own buffer once half of it has arrived, and copies later chunks straight into it", () => {
    const payload = Uint8Array.from({ length: 100 }, (_, i) => i);
    const bytes = frameOf(payload);
    const decoder = new FrameDecoder({ lengthMin: 8, lengthMax: 1024 });
    // 4 + 49 bytes: 49 of 100 arrived, under half — nothing allocated for the claimed length.
    const early = recordingAllocations(() => {
      decoder.push(bytes.subarray(0, 53));
      return decoder.next();
    });
    expect(early.value).toBeNull();
    expect(early.sizes).toEqual([]);
    // 50 of 100: the frame's buffer is allocated once and the received bytes move into it.
    const half = recordingAllocations(() => {
      decoder.push(bytes.subarray(53, 54));
      return decoder.next();
    });
    expect(half.value).toBeNull();
    expect(half.sizes).toEqual([100]);
    expect(decoder.bufferedBytes).toBe(54);
    // A later chunk is copied (the caller's chunk is not kept): changing it afterwards changes nothing.
    const rest = bytes.slice(54);
    const done = recordingAllocations(() => {
      decoder.push(rest);
      rest.fill(0xff);
      return decoder.next();
    });
    expect(done.sizes).toEqual([]);
    expect(Array.from(done.value!)).toEqual(Array.from(payload));
    expect(decoder.bufferedBytes).toBe(0);
  });

  it("keeps the bytes after an assembled frame for the next frame, and peekBytes still sees the frame's header", () => {
    const first = frameOf(new Uint8Array(40).fill(1));
    const second = frameOf(text("abcdefgh"));
    const decoder = new FrameDecoder({ lengthMin: 8, lengthMax: 1024 });
    decoder.push(first.subarray(0, 30));
    expect(decoder.next()).toBeNull();
    expect(Array.from(decoder.peekBytes(6)!)).toEqual([0, 0, 0, 40, 1, 1]);
    const tail = new Uint8Array(first.length - 30 + second.length);
    tail.set(first.subarray(30));
    tail.set(second, first.length - 30);
    decoder.push(tail);
    expect(decoder.bufferedBytes).toBe(first.length + second.length);
    expect(Array.from(decoder.next()!)).toEqual(Array(40).fill(1));
    expect(new TextDecoder().decode(decoder.next()!)).toBe("abcdefgh");
    expect(decoder.next()).toBeNull();
    expect(decoder.bufferedBytes).toBe(0);
  });

  it("nextChunks() never starts an assembly: a frame that spans chunks stays views of them", () => {
    const bytes = frameOf(new Uint8Array(100).fill(3));
    const decoder = new FrameDecoder({ lengthMin: 8, lengthMax: 1024 });
    decoder.push(bytes.subarray(0, 90));
    expect(decoder.nextChunks()).toBeNull();
    decoder.push(bytes.subarray(90));
    expect(decoder.nextChunks()!.map((c) => c.buffer === bytes.buffer)).toEqual([true, true]);
  });

  it("refuses a length below the minimum at its first four bytes", () => {
    const decoder = new FrameDecoder({ lengthMin: 8, lengthMax: 1024 });
    decoder.push(Uint8Array.of(0, 0, 0, 7));
    const error = (() => {
      try {
        decoder.next();
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(FrameLengthError);
    expect((error as FrameLengthError).tooLarge).toBe(false);
    expect((error as FrameLengthError).kind).toBe(Errors.invalidRequest);
    expect(() => decoder.next()).toThrow(FrameLengthError);
  });

  it('refuses "GET / HTTP/1.1" as a length of 1 195 725 856 without waiting for more bytes', () => {
    const decoder = new FrameDecoder({ lengthMin: 8, lengthMax: 16 * 1024 * 1024 });
    decoder.push(text("GET "));
    let error: unknown;
    try {
      decoder.next();
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(FrameLengthError);
    expect((error as FrameLengthError).length).toBe(0x47455420);
    expect((error as FrameLengthError).kind).toBe(Errors.requestTooLarge);
  });

  it("refuses a TLS ClientHello by its record header", () => {
    const decoder = new FrameDecoder({ lengthMin: 8, lengthMax: 16 * 1024 * 1024 });
    decoder.push(Uint8Array.of(0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03));
    expect(() => decoder.next()).toThrow(/over the limit/);
  });

  it("reads a length split over four one-byte chunks", () => {
    const bytes = frameOf(text("12345678"));
    const decoder = new FrameDecoder({ lengthMin: 8, lengthMax: 64 });
    for (let i = 0; i < bytes.length; i++) {
      expect(decoder.next()).toBeNull();
      decoder.push(bytes.subarray(i, i + 1));
    }
    expect(Buffer.from(decoder.next()!).toString()).toBe("12345678");
  });

  it("peekBytes copies the header of a refused frame", () => {
    const decoder = new FrameDecoder({ lengthMin: 8, lengthMax: 16 });
    decoder.push(Uint8Array.of(0, 0, 1, 0, 0, 0));
    decoder.push(Uint8Array.of(0, 0, 0, 0, 0, 42));
    expect(() => decoder.next()).toThrow(FrameLengthError);
    expect(Array.from(decoder.peekBytes(12)!)).toEqual([0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 42]);
    expect(decoder.peekBytes(13)).toBeNull();
  });

  it("splits any sequence of valid frames, chunked anyhow, back into the same frames", () => {
    fc.assert(
      fc.property(
        fc.array(fc.uint8Array({ minLength: 8, maxLength: 200 }), { maxLength: 20 }),
        fc.array(fc.nat(), { maxLength: 30 }),
        (payloads, cuts) => {
          const stream = new Uint8Array(payloads.reduce((n, p) => n + 4 + p.length, 0));
          let pos = 0;
          for (const p of payloads) {
            stream.set(frameOf(p), pos);
            pos += 4 + p.length;
          }
          const decoder = new FrameDecoder({ lengthMin: 8, lengthMax: 200 });
          const out: Uint8Array[] = [];
          for (const chunk of split(stream, cuts)) {
            decoder.push(chunk);
            for (let f = decoder.next(); f !== null; f = decoder.next()) out.push(f.slice());
          }
          expect(out).toEqual(payloads);
          expect(decoder.bufferedBytes).toBe(0);
        },
      ),
      { numRuns: 300 },
    );
  });

  it("hands back every frame in order, lengths from the minimum (even 0) to exactly the maximum, split at any bytes, under any mix of next(), nextChunks() and peekBytes(), allocating at most twice the bytes received; a frame of maximum + 1 then fails with its header still readable", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 8 }),
        fc.integer({ min: 8, max: 300 }),
        fc.array(fc.tuple(fc.nat(), fc.nat(255)), { maxLength: 12 }),
        fc.boolean(),
        fc.array(
          fc.tuple(
            fc.integer({ min: 1, max: 400 }),
            fc.constantFrom("next", "nextChunks", "peek", "none"),
            fc.nat(40),
          ),
          { minLength: 1, maxLength: 60 },
        ),
        (lengthMin, lengthMax, frameSpecs, endWithOversized, steps) => {
          // Frames whose lengths cover the bounds: the spec's first number picks min, max or anything between.
          const payloads = frameSpecs.map(([pick, fill], i) => {
            const length =
              pick % 3 === 0
                ? lengthMin
                : pick % 3 === 1
                  ? lengthMax
                  : lengthMin + (pick % (lengthMax - lengthMin + 1));
            return Uint8Array.from({ length }, (_, j) => (fill + i * 7 + j) & 0xff);
          });
          const parts = payloads.map(frameOf);
          if (endWithOversized) {
            const head = new Uint8Array(12);
            new DataView(head.buffer).setUint32(0, lengthMax + 1);
            head.set([0, 1, 0, 0, 0, 0, 0, 42], 4);
            parts.push(head);
          }
          const stream = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
          let at = 0;
          for (const p of parts) {
            stream.set(p, at);
            at += p.length;
          }
          const decoder = new FrameDecoder({ lengthMin, lengthMax });
          const out: Uint8Array[] = [];
          let pushed = 0;
          let consumed = 0;
          let failure: unknown = null;
          const take = (how: "next" | "nextChunks") => {
            for (;;) {
              const outstanding = pushed - consumed;
              const { value, sizes } = recordingAllocations(() => {
                if (how === "next") return decoder.next();
                const chunks = decoder.nextChunks();
                return chunks === null
                  ? null
                  : Uint8Array.from(chunks.flatMap((c) => Array.from(c)));
              });
              if (how === "next")
                for (const size of sizes) expect(size).toBeLessThanOrEqual(2 * outstanding);
              const frame: Uint8Array | null = value;
              if (frame === null) return;
              out.push(frame.slice());
              consumed += 4 + frame.length;
            }
          };
          const run = (fn: () => void) => {
            if (failure !== null) return;
            try {
              fn();
            } catch (e) {
              if (!(e instanceof FrameLengthError)) throw e;
              failure = e;
            }
          };
          const stepList = [...steps, [stream.length + 1, "next", 0] as const];
          for (const [size, action, peek] of stepList) {
            if (failure !== null) break;
            const chunk = stream.subarray(pushed, Math.min(stream.length, pushed + size));
            decoder.push(chunk);
            pushed += chunk.length;
            expect(decoder.bufferedBytes).toBe(pushed - consumed);
            if (action === "peek") {
              const got = decoder.peekBytes(peek);
              if (peek > pushed - consumed) expect(got).toBeNull();
              else
                expect(Array.from(got!)).toEqual(
                  Array.from(stream.subarray(consumed, consumed + peek)),
                );
            } else if (action !== "none") {
              run(() => take(action));
            }
            expect(decoder.bufferedBytes).toBe(pushed - consumed);
          }
          // Everything pushed (also after a failure: the header stays readable): the rest comes
          // out, then the oversized frame (if any) fails.
          decoder.push(stream.subarray(pushed));
          pushed = stream.length;
          run(() => take("next"));
          expect(out).toEqual(payloads);
          if (endWithOversized) {
            expect(failure).toBeInstanceOf(FrameLengthError);
            expect((failure as FrameLengthError).tooLarge).toBe(true);
            expect((failure as FrameLengthError).length).toBe(lengthMax + 1);
            expect(Array.from(decoder.peekBytes(12)!)).toEqual(
              Array.from(stream.subarray(consumed, consumed + 12)),
            );
          } else {
            expect(failure).toBeNull();
            expect(decoder.bufferedBytes).toBe(0);
          }
        },
      ),
      { numRuns: 1000 },
    );
  });

  it("fuzz: random bytes only ever raise a FrameLengthError and never allocate past the cap", () => {
    const cap = 4096;
    fc.assert(
      fc.property(
        fc.uint8Array({ maxLength: 20_000 }),
        fc.array(fc.nat(), { maxLength: 20 }),
        (bytes, cuts) => {
          const decoder = new FrameDecoder({ lengthMin: 8, lengthMax: cap });
          let returned = 0;
          let failed = false;
          const { sizes } = recordingAllocations(() => {
            for (const chunk of split(bytes, cuts)) {
              decoder.push(chunk);
              try {
                for (let f = decoder.next(); f !== null; f = decoder.next()) {
                  expect(f.length).toBeGreaterThanOrEqual(8);
                  expect(f.length).toBeLessThanOrEqual(cap);
                  returned += 4 + f.length;
                }
              } catch (error) {
                expect(error).toBeInstanceOf(FrameLengthError);
                failed = true;
                break;
              }
            }
          });
          for (const size of sizes) expect(size).toBeLessThanOrEqual(cap);
          if (!failed) expect(returned + decoder.bufferedBytes).toBe(bytes.length);
        },
      ),
      { numRuns: 500 },
    );
  });

  it("fuzz: a huge claimed length is refused with nothing allocated for it", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 4097, max: 0xffff_ffff }),
        fc.uint8Array({ maxLength: 64 }),
        (length, rest) => {
          const decoder = new FrameDecoder({ lengthMin: 8, lengthMax: 4096 });
          const head = new Uint8Array(4);
          new DataView(head.buffer).setUint32(0, length);
          const { sizes } = recordingAllocations(() => {
            decoder.push(head);
            decoder.push(rest);
            expect(() => decoder.next()).toThrow(FrameLengthError);
          });
          for (const size of sizes) expect(size).toBeLessThanOrEqual(4096);
        },
      ),
    );
  });
});

describe("fuzzing the body decoders", () => {
  const requestDecoders: Record<number, (body: Uint8Array) => unknown> = {
    [ApiKey.Produce]: decodeProduceRequest,
    [ApiKey.Fetch]: decodeFetchRequest,
    [ApiKey.CreateTopic]: decodeCreateTopicRequest,
    [ApiKey.Metadata]: decodeMetadataRequest,
    [ApiKey.ListOffsets]: decodeListOffsetsRequest,
    [ApiKey.DeleteTopic]: decodeDeleteTopicRequest,
  };
  const responseDecoders = [
    decodeProduceResponse,
    decodeFetchResponse,
    decodeMetadataResponse,
    decodeErrorBody,
  ];

  function onlyProtocolErrors(fn: () => unknown): void {
    try {
      fn();
    } catch (error) {
      expect(error).toBeInstanceOf(ProtocolError);
      const kind = (error as ProtocolError).kind;
      expect([Errors.invalidRequest, Errors.unsupported]).toContain(kind);
    }
  }

  it("random request bodies decode or raise a ProtocolError, nothing else", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 5 }),
        fc.uint8Array({ maxLength: 300 }),
        (api, body) => {
          onlyProtocolErrors(() => requestDecoders[api](body));
        },
      ),
      { numRuns: 2000 },
    );
  });

  it("random response bodies decode or raise a ProtocolError, nothing else", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: responseDecoders.length - 1 }),
        fc.uint8Array({ maxLength: 300 }),
        (which, body) => {
          onlyProtocolErrors(() => responseDecoders[which](body));
        },
      ),
      { numRuns: 2000 },
    );
  });

  it("single-byte mutations of a valid produce request decode or raise a ProtocolError", () => {
    const batch = new EntryBatchBuilder()
      .add(text("key"), text("value"), 1000)
      .add(null, text(""), -1)
      .build();
    const frame = encodeProduceRequest(1, { topic: "orders", partition: 2, batch });
    const body = decodeRequestHeader(frame.subarray(4)).body;
    fc.assert(
      fc.property(fc.nat(body.length - 1), fc.integer({ min: 0, max: 255 }), (at, value) => {
        const mutated = body.slice();
        mutated[at] = value;
        onlyProtocolErrors(() => decodeProduceRequest(mutated));
      }),
      { numRuns: 2000 },
    );
  });
});

describe("round trips", () => {
  const topicName = fc.string({ minLength: 1, maxLength: 40 });
  const offset = fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER });

  it("Produce requests round-trip topic, partition and every entry", () => {
    const record = fc.record({
      key: fc.option(fc.uint8Array({ maxLength: 20 }), { nil: null }),
      value: fc.uint8Array({ maxLength: 50 }),
      timestampMs: fc.oneof(fc.constant(-1), fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER })),
    });
    fc.assert(
      fc.property(
        topicName,
        fc.integer({ min: -1, max: 0x7fff_ffff }),
        fc.array(record, { minLength: 1, maxLength: 10 }),
        fc.nat(0xffff_ffff),
        (topic, partition, records, id) => {
          const builder = new EntryBatchBuilder();
          for (const r of records) builder.add(r.key, r.value, r.timestampMs);
          const batch = builder.build();
          const header = decodeRequestHeader(
            encodeProduceRequest(id, { topic, partition, batch }).subarray(4),
          );
          expect(header.correlationId).toBe(id);
          const decoded = decodeProduceRequest(header.body);
          expect(decoded.topic).toBe(topic);
          expect(decoded.partition).toBe(partition === -1 ? undefined : partition);
          expect(decoded.batch.count).toBe(records.length);
          expect(Array.from(decoded.batch.bytes)).toEqual(Array.from(batch.bytes));
        },
      ),
    );
  });

  it("Fetch requests round-trip every field, including offsets up to 2^53 − 1", () => {
    fc.assert(
      fc.property(
        topicName,
        fc.nat(0xffff_ffff),
        offset,
        fc.nat(0xffff_ffff),
        fc.nat(0xffff_ffff),
        fc.nat(0xffff_ffff),
        (topic, partition, off, maxRecords, maxBytes, waitMs) => {
          const request = { topic, partition, offset: off, maxRecords, maxBytes, waitMs };
          const decoded = decodeFetchRequest(
            decodeRequestHeader(encodeFetchRequest(1, request).subarray(4)).body,
          );
          expect(decoded).toEqual({
            topic,
            partition,
            offset: off,
            waitMs,
            ...(maxRecords === 0 ? {} : { maxRecords }),
            ...(maxBytes === 0 ? {} : { maxBytes }),
          });
        },
      ),
    );
  });

  it("Produce responses round-trip their spans", () => {
    const span = fc.record({
      partition: fc.nat(0xffff_ffff),
      baseOffset: offset,
      count: fc.nat(0xffff_ffff),
    });
    fc.assert(
      fc.property(fc.array(span, { maxLength: 20 }), (spans) => {
        const frame = encodeProduceResponse(3, { spans });
        expect(decodeProduceResponse(decodeResponseHeader(frame.subarray(4)).body)).toEqual({
          spans,
        });
      }),
    );
  });

  it("Metadata responses round-trip names, configs and partition bounds", () => {
    const partition = fc.record({
      partition: fc.nat(0xffff_ffff),
      logStartOffset: offset,
      highWatermark: offset,
      sizeBytes: offset,
      segmentCount: fc.nat(0xffff_ffff),
      fenced: fc.boolean(),
    });
    const topic = fc.record({
      name: topicName,
      config: fc.dictionary(
        fc.string({ maxLength: 10 }),
        fc.oneof(fc.integer(), fc.string({ maxLength: 10 })),
      ),
      partitions: fc.array(partition, { maxLength: 5 }),
    });
    fc.assert(
      fc.property(fc.array(topic, { maxLength: 5 }), (topics) => {
        const list = topics as unknown as TopicDescription[];
        const frame = encodeMetadataResponse(1, list);
        expect(decodeMetadataResponse(decodeResponseHeader(frame.subarray(4)).body)).toEqual(list);
      }),
    );
  });
});
