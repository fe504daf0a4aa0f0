import { describe, expect, it } from "vitest";
import { BrokerError, Errors } from "../../src/broker/errors.ts";
import type { Broker, TopicDescription } from "../../src/broker/types.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { decodeFetchResponse, encodeFetchRequest } from "../../src/protocol/apis/fetch.ts";
import {
  decodeListOffsetsResponse,
  encodeListOffsetsRequest,
} from "../../src/protocol/apis/list-offsets.ts";
import { decodeMetadataResponse, encodeMetadataRequest } from "../../src/protocol/apis/metadata.ts";
import { decodeProduceResponse, encodeProduceRequest } from "../../src/protocol/apis/produce.ts";
import {
  decodeErrorBody,
  decodeResponseHeader,
  type ResponseHeader,
} from "../../src/protocol/envelope.ts";
import { FrameDecoder } from "../../src/protocol/frame.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { createTcpTransport, type TcpTransportOptions } from "../../src/transport/tcp/transport.ts";
import type { ByteSocket, ByteSocketHandlers } from "../../src/transport/tcp/socket.ts";

const text = (s: string) => new TextEncoder().encode(s);

/** An in-memory ByteSocket that records what the transport does to it. */
class FakeSocket implements ByteSocket {
  readonly remoteAddress = "test:1";
  handlers: ByteSocketHandlers | null = null;
  /** One entry per write call: the chunks of that gathered write. */
  writes: Uint8Array[][] = [];
  paused = false;
  ended = false;
  destroyed = false;
  /** What write() returns (false simulates a full buffer). */
  writeAccepts = true;
  #closed = false;

  attach(handlers: ByteSocketHandlers): void {
    this.handlers = handlers;
  }
  /** `onWritten` of writes made while the buffer was full: called on {@link drain}. */
  unwritten: (() => void)[] = [];
  write(chunks: readonly Uint8Array[], onWritten?: () => void): boolean {
    if (this.ended || this.destroyed) return true;
    this.writes.push(chunks.map((c) => c.slice()));
    // The contract: called once the kernel took the bytes (at once while it takes them).
    if (onWritten !== undefined) {
      if (this.writeAccepts) onWritten();
      else this.unwritten.push(onWritten);
    }
    return this.writeAccepts;
  }
  pause(): void {
    this.paused = true;
  }
  resume(): void {
    this.paused = false;
  }
  end(): void {
    this.ended = true;
    this.#closeSoon();
  }
  destroy(): void {
    this.destroyed = true;
    this.#closeSoon();
  }
  #closeSoon(): void {
    queueMicrotask(() => this.peerClose());
  }

  /** Delivers bytes as the peer would; refuses while paused (the contract). */
  send(bytes: Uint8Array): void {
    if (this.paused) throw new Error("data delivered while paused");
    if (this.#closed) return;
    this.handlers!.onData(bytes);
  }
  drain(): void {
    this.writeAccepts = true;
    const unwritten = this.unwritten;
    this.unwritten = [];
    for (const f of unwritten) f();
    this.handlers!.onDrain();
  }
  peerClose(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.handlers!.onClose();
  }
  get closed(): boolean {
    return this.#closed;
  }

  /** Every response frame written so far, decoded. */
  responses(): ResponseHeader[] {
    const decoder = new FrameDecoder({ lengthMin: 6, lengthMax: 1 << 30 });
    for (const w of this.writes) for (const c of w) decoder.push(c);
    const out: ResponseHeader[] = [];
    for (let f = decoder.next(); f !== null; f = decoder.next()) out.push(decodeResponseHeader(f));
    expect(decoder.bufferedBytes).toBe(0);
    return out;
  }
}

interface Deferred<T> {
  resolve(value: T): void;
  reject(error: unknown): void;
}

interface Call {
  method: string;
  args: any[];
  deferred: Deferred<any>;
}

/** A Broker whose every call waits until the test settles it. */
class DeferredBroker implements Broker {
  calls: Call[] = [];
  #record<T>(method: string, args: any[]): Promise<T> {
    return new Promise<T>((resolve, reject) =>
      this.calls.push({ method, args, deferred: { resolve, reject } }),
    );
  }
  createTopic(...args: any[]) {
    return this.#record<TopicDescription>("createTopic", args);
  }
  listTopics(...args: any[]) {
    return this.#record<TopicDescription[]>("listTopics", args);
  }
  describeTopic(...args: any[]) {
    return this.#record<TopicDescription>("describeTopic", args);
  }
  deleteTopic(...args: any[]) {
    return this.#record<void>("deleteTopic", args);
  }
  produce(...args: any[]) {
    return this.#record<any>("produce", args);
  }
  fetch(...args: any[]) {
    return this.#record<any>("fetch", args);
  }
  listOffsets(...args: any[]) {
    return this.#record<any>("listOffsets", args);
  }
  joinGroup(...args: any[]) {
    return this.#record<any>("joinGroup", args);
  }
  heartbeat(...args: any[]) {
    return this.#record<any>("heartbeat", args);
  }
  leaveGroup(...args: any[]) {
    return this.#record<any>("leaveGroup", args);
  }
  commitOffsets(...args: any[]) {
    return this.#record<any>("commitOffsets", args);
  }
  describeGroup(...args: any[]) {
    return this.#record<any>("describeGroup", args);
  }
  listGroups(...args: any[]) {
    return this.#record<any>("listGroups", args);
  }
  close() {
    return Promise.resolve();
  }
}

/** Lets queued microtasks (and promise chains) run. */
async function settle(): Promise<void> {
  for (let i = 0; i < 10; i++) await Promise.resolve();
}

function setup(options: Partial<TcpTransportOptions> = {}) {
  const broker = new DeferredBroker();
  const clock = new ManualClock();
  const logger = new MemoryLogger();
  const transport = createTcpTransport({ broker, clock, logger, readTimeoutMs: 1000, ...options });
  const socket = new FakeSocket();
  transport.handleConnection(socket);
  return { broker, clock, logger, transport, socket };
}

function produceFrame(id: number, value: string, partition = 0): Uint8Array {
  return encodeProduceRequest(id, {
    topic: "t",
    partition,
    batch: new EntryBatchBuilder().add(null, text(value)).build(),
  });
}

function listOffsetsFrame(id: number): Uint8Array {
  return encodeListOffsetsRequest(id, { topic: "t", partition: 0 });
}

function concat(...parts: Uint8Array[]): Uint8Array {
  return Uint8Array.from(parts.flatMap((p) => Array.from(p)));
}

/** A raw request frame with any api, version and body. */
function rawFrame(
  api: number,
  version: number,
  id: number,
  body: Uint8Array = new Uint8Array(0),
): Uint8Array {
  const out = new Uint8Array(12 + body.length);
  const v = new DataView(out.buffer);
  v.setUint32(0, 8 + body.length);
  v.setUint16(4, api);
  v.setUint16(6, version);
  v.setUint32(8, id);
  out.set(body, 12);
  return out;
}

describe("TCP transport: ordering and pipelining", () => {
  it("starts requests synchronously, in the order their frames complete", () => {
    const { broker, socket } = setup();
    const bytes = concat(produceFrame(1, "a"), produceFrame(2, "b"), produceFrame(3, "c"));
    socket.send(bytes.subarray(0, 40));
    expect(broker.calls.map((c) => c.method)).toEqual(["produce"]);
    socket.send(bytes.subarray(40));
    expect(broker.calls.map((c) => c.method)).toEqual(["produce", "produce", "produce"]);
    const values = broker.calls.map((c) => {
      const b: Uint8Array = c.args[0].batch.bytes;
      return String.fromCharCode(b[b.length - 1]);
    });
    expect(values).toEqual(["a", "b", "c"]);
    expect(broker.calls[0].args[0]).toMatchObject({ topic: "t", partition: 0 });
  });

  it("writes each response as it completes, so answers can overtake each other", async () => {
    const { broker, socket } = setup();
    socket.send(concat(produceFrame(1, "a"), produceFrame(2, "b")));
    broker.calls[1].deferred.resolve({ spans: [{ partition: 0, baseOffset: 1, count: 1 }] });
    await settle();
    expect(socket.responses().map((r) => r.correlationId)).toEqual([2]);
    broker.calls[0].deferred.resolve({ spans: [{ partition: 0, baseOffset: 0, count: 1 }] });
    await settle();
    const responses = socket.responses();
    expect(responses.map((r) => r.correlationId)).toEqual([2, 1]);
    expect(decodeProduceResponse(responses[1].body)).toEqual({
      spans: [{ partition: 0, baseOffset: 0, count: 1 }],
    });
  });

  it("responses that finish in the same turn leave in one gathered write", async () => {
    const { broker, socket } = setup();
    socket.send(concat(listOffsetsFrame(1), listOffsetsFrame(2), listOffsetsFrame(3)));
    for (const c of broker.calls) c.deferred.resolve({ logStartOffset: 0, highWatermark: 5 });
    await settle();
    expect(socket.writes.length).toBe(1);
    expect(socket.writes[0].length).toBe(3);
    expect(socket.responses().map((r) => decodeListOffsetsResponse(r.body))).toEqual([
      { logStartOffset: 0, highWatermark: 5 },
      { logStartOffset: 0, highWatermark: 5 },
      { logStartOffset: 0, highWatermark: 5 },
    ]);
  });

  it("stops reading at the in-flight limit and starts the waiting frames as answers go out", async () => {
    const { broker, socket } = setup({ maxInFlightRequests: 2 });
    socket.send(concat(listOffsetsFrame(1), listOffsetsFrame(2), listOffsetsFrame(3)));
    expect(broker.calls.length).toBe(2);
    expect(socket.paused).toBe(true);
    broker.calls[0].deferred.resolve({ logStartOffset: 0, highWatermark: 1 });
    await settle();
    expect(broker.calls.length).toBe(3);
    expect(socket.paused).toBe(true);
    broker.calls[1].deferred.resolve({ logStartOffset: 0, highWatermark: 1 });
    await settle();
    expect(socket.paused).toBe(false);
  });

  it("counts each fetch's max_bytes against the in-flight byte budget", async () => {
    const { broker, socket } = setup({ maxInFlightBytes: 1500 });
    socket.send(
      concat(
        encodeFetchRequest(1, { topic: "t", partition: 0, offset: 0, maxBytes: 1000 }),
        encodeFetchRequest(2, { topic: "t", partition: 0, offset: 0, maxBytes: 1000 }),
        encodeFetchRequest(3, { topic: "t", partition: 0, offset: 0, maxBytes: 1000 }),
      ),
    );
    expect(broker.calls.length).toBe(2);
    expect(socket.paused).toBe(true);
    broker.calls[0].deferred.resolve({
      records: { bytes: new Uint8Array(0), count: 0 },
      nextOffset: 0,
      highWatermark: 0,
      logStartOffset: 0,
    });
    await settle();
    expect(broker.calls.length).toBe(3);
  });

  it("stops reading while the socket's write buffer is full, until it drains", async () => {
    const { broker, socket } = setup();
    socket.writeAccepts = false;
    socket.send(listOffsetsFrame(1));
    broker.calls[0].deferred.resolve({ logStartOffset: 0, highWatermark: 1 });
    await settle();
    expect(socket.paused).toBe(true);
    socket.drain();
    expect(socket.paused).toBe(false);
    socket.send(listOffsetsFrame(2));
    expect(broker.calls.length).toBe(2);
  });

  it("passes an abort signal to fetch that fires when the connection closes", () => {
    const { broker, socket } = setup();
    socket.send(encodeFetchRequest(1, { topic: "t", partition: 0, offset: 0, waitMs: 5000 }));
    const signal: AbortSignal = broker.calls[0].args[0].signal;
    expect(broker.calls[0].args[0]).toMatchObject({
      topic: "t",
      partition: 0,
      offset: 0,
      waitMs: 5000,
    });
    expect(signal.aborted).toBe(false);
    socket.peerClose();
    expect(signal.aborted).toBe(true);
  });

  it("answers a fetch with the stored bytes verbatim", async () => {
    const { broker, socket } = setup();
    socket.send(encodeFetchRequest(4, { topic: "t", partition: 0, offset: 0 }));
    const stored = Uint8Array.of(1, 2, 3);
    broker.calls[0].deferred.resolve({
      records: { bytes: stored, count: 1 },
      nextOffset: 1,
      highWatermark: 1,
      logStartOffset: 0,
    });
    await settle();
    const result = decodeFetchResponse(socket.responses()[0].body);
    expect(Array.from(result.records.bytes)).toEqual([1, 2, 3]);
  });

  it("releases a fetch's read buffer only once the socket says its answer was written", async () => {
    const { broker, socket } = setup();
    const done: (() => void)[] = [];
    const write = socket.write.bind(socket);
    socket.write = (c: readonly Uint8Array[], onWritten?: () => void) => {
      if (onWritten !== undefined) done.push(onWritten);
      return write(c);
    };
    socket.send(encodeFetchRequest(4, { topic: "t", partition: 0, offset: 0 }));
    let released = 0;
    broker.calls[0].deferred.resolve({
      records: { bytes: Uint8Array.of(5, 6), count: 1 },
      nextOffset: 1,
      highWatermark: 1,
      logStartOffset: 0,
      release: () => void released++,
    });
    await settle();
    expect(socket.responses()).toHaveLength(1);
    expect(done).toHaveLength(1);
    expect(released).toBe(0);
    done[0]();
    expect(released).toBe(1);
  });

  it("writes a fetch's stored records as a chunk of their own after the header, not copied into a frame", async () => {
    const { broker, socket } = setup();
    const chunks: (readonly Uint8Array[])[] = [];
    const write = socket.write.bind(socket);
    socket.write = (c) => {
      chunks.push(c);
      return write(c);
    };
    socket.send(encodeFetchRequest(4, { topic: "t", partition: 0, offset: 0 }));
    const stored = Uint8Array.of(9, 8, 7, 6);
    broker.calls[0].deferred.resolve({
      records: { bytes: stored, count: 1 },
      nextOffset: 1,
      highWatermark: 1,
      logStartOffset: 0,
    });
    await settle();
    expect(chunks).toHaveLength(1);
    expect(chunks[0]).toHaveLength(2);
    expect(chunks[0][1]).toBe(stored);
    const result = decodeFetchResponse(socket.responses()[0].body);
    expect(Array.from(result.records.bytes)).toEqual([9, 8, 7, 6]);
  });

  it("Metadata with no topics lists all; with names describes each", async () => {
    const { broker, socket } = setup();
    socket.send(encodeMetadataRequest(1, { topics: [] }));
    socket.send(encodeMetadataRequest(2, { topics: ["a", "b"] }));
    expect(broker.calls.map((c) => [c.method, c.args[0]])).toEqual([
      ["listTopics", undefined],
      ["describeTopic", "a"],
      ["describeTopic", "b"],
    ]);
    const topic = (name: string): TopicDescription => ({
      name,
      config: {} as TopicDescription["config"],
      partitions: [],
    });
    broker.calls[0].deferred.resolve([]);
    broker.calls[1].deferred.resolve(topic("a"));
    broker.calls[2].deferred.resolve(topic("b"));
    await settle();
    const [all, named] = socket.responses();
    expect(decodeMetadataResponse(all.body)).toEqual([]);
    expect(decodeMetadataResponse(named.body).map((t) => t.name)).toEqual(["a", "b"]);
  });
});

describe("TCP transport: errors", () => {
  it("answers an unknown api with unsupported_api and keeps the connection working", async () => {
    const { broker, socket } = setup();
    socket.send(rawFrame(42, 0, 7, Uint8Array.of(1, 2, 3)));
    socket.send(rawFrame(0, 9, 8));
    socket.send(listOffsetsFrame(9));
    expect(broker.calls.length).toBe(1);
    broker.calls[0].deferred.resolve({ logStartOffset: 0, highWatermark: 0 });
    await settle();
    const [unknownApi, unknownVersion, ok] = socket.responses();
    expect(unknownApi).toMatchObject({ correlationId: 7, error: Errors.unsupportedApi.tcp });
    expect(decodeErrorBody(unknownApi.body).code).toBe("unsupported_api");
    expect(decodeErrorBody(unknownApi.body).message).toContain("api 42 version 0");
    expect(unknownVersion).toMatchObject({ correlationId: 8, error: Errors.unsupportedApi.tcp });
    expect(ok).toMatchObject({ correlationId: 9, error: 0 });
    expect(socket.closed).toBe(false);
  });

  it("answers a body that breaks the grammar with invalid_request naming the field", async () => {
    const { broker, socket } = setup();
    socket.send(rawFrame(4, 0, 5, Uint8Array.of(0, 1, 0x74, 0, 0)));
    await settle();
    expect(broker.calls.length).toBe(0);
    const [response] = socket.responses();
    expect(response).toMatchObject({ correlationId: 5, error: Errors.invalidRequest.tcp });
    expect(decodeErrorBody(response.body).message).toContain('"partition"');
    expect(socket.closed).toBe(false);
  });

  it("answers an offset above 2^53 − 1 with unsupported", async () => {
    const { socket } = setup();
    socket.send(
      rawFrame(
        1,
        0,
        5,
        Uint8Array.of(
          0,
          1,
          0x74,
          0,
          0,
          0,
          0,
          0xff,
          0xff,
          0xff,
          0xff,
          0xff,
          0xff,
          0xff,
          0xff,
          0,
          0,
          0,
          0,
          0,
          0,
          0,
          0,
          0,
          0,
          0,
          0,
        ),
      ),
    );
    await settle();
    expect(socket.responses()[0]).toMatchObject({ error: Errors.unsupported.tcp });
  });

  it("answers a BrokerError with its row of the table and its message", async () => {
    const { broker, socket } = setup();
    socket.send(listOffsetsFrame(3));
    broker.calls[0].deferred.reject(
      new BrokerError(Errors.partitionNotFound, 'Cannot list offsets of "t/0": no such partition'),
    );
    await settle();
    const [response] = socket.responses();
    expect(response).toMatchObject({ correlationId: 3, error: Errors.partitionNotFound.tcp });
    expect(decodeErrorBody(response.body)).toEqual({
      code: "partition_not_found",
      message: 'Cannot list offsets of "t/0": no such partition',
    });
  });

  it("answers any other failure with internal and a generic message, and logs the detail", async () => {
    const { broker, socket, logger } = setup();
    socket.send(listOffsetsFrame(3));
    broker.calls[0].deferred.reject(new TypeError("secret detail"));
    await settle();
    const [response] = socket.responses();
    expect(response).toMatchObject({ correlationId: 3, error: Errors.internal.tcp });
    expect(decodeErrorBody(response.body).message).not.toContain("secret");
    expect(logger.named("tcp.internal_error")).toMatchObject([
      { error: "secret detail", api: "ListOffsets" },
    ]);
  });

  it("answers a result its api cannot encode with internal, and the connection keeps working", async () => {
    // Produce encodes in the transport's own reaction (`answerBy`): a throw there is answered.
    const { broker, socket, logger } = setup();
    socket.send(produceFrame(4, "a"));
    broker.calls[0].deferred.resolve({ spans: [{ partition: -1, baseOffset: 0, count: 1 }] });
    await settle();
    expect(socket.responses()).toMatchObject([{ correlationId: 4, error: Errors.internal.tcp }]);
    expect(logger.named("tcp.internal_error")).toMatchObject([{ api: "Produce" }]);
    socket.send(produceFrame(5, "b"));
    broker.calls[1].deferred.resolve({ spans: [{ partition: 0, baseOffset: 1, count: 1 }] });
    await settle();
    expect(socket.responses()[1]).toMatchObject({ correlationId: 5, error: 0 });
  });

  it("answers thousands of pipelined Produce refusals answered synchronously, without nesting a call per frame (attack14 F1)", async () => {
    // The sink path answers a refusal before produceTo returns; each answer makes room for the
    // next buffered frame. 5 000 frames in one read once overflowed the stack.
    const { broker, socket } = setup();
    const refused = new BrokerError(
      Errors.topicNotFound,
      'Cannot produce to topic "t": no such topic',
    );
    (broker as unknown as Broker).produceTo = (_request, sink) => sink.failed(refused);
    const frames = Array.from({ length: 5000 }, (_, i) => produceFrame(i + 1, "a"));
    const all = new Uint8Array(frames.reduce((n, f) => n + f.length, 0));
    let at = 0;
    for (const f of frames) {
      all.set(f, at);
      at += f.length;
    }
    socket.send(all);
    await settle();
    const responses = socket.responses();
    expect(responses.length).toBe(5000);
    expect(responses.map((r) => r.correlationId)).toEqual(frames.map((_, i) => i + 1));
    expect(new Set(responses.map((r) => r.error))).toEqual(new Set([Errors.topicNotFound.tcp]));
  });

  it("answers a broker method that throws synchronously like one that rejects", async () => {
    const { broker, socket } = setup();
    broker.listOffsets = () => {
      throw new BrokerError(Errors.unavailable, "Cannot list offsets: broker is shutting down");
    };
    socket.send(listOffsetsFrame(1));
    await settle();
    expect(socket.responses()[0]).toMatchObject({ error: Errors.unavailable.tcp });
  });
});

describe("TCP transport: framing limits and the read timeout", () => {
  it("destroys a connection whose half frame stalls past the read timeout", () => {
    const { clock, socket, logger } = setup({ readTimeoutMs: 1000 });
    socket.send(listOffsetsFrame(1).subarray(0, 6));
    clock.advance(999);
    expect(socket.destroyed).toBe(false);
    clock.advance(1);
    expect(socket.destroyed).toBe(true);
    expect(logger.named("tcp.read_timeout")).toMatchObject([
      { buffered_bytes: 6, read_timeout_ms: 1000 },
    ]);
  });

  it("gives a frame the read timeout from its first byte, however slowly the rest trickles in", () => {
    const { clock, socket } = setup({ readTimeoutMs: 1000 });
    const frame = listOffsetsFrame(1);
    for (let i = 0; i < 4; i++) {
      socket.send(frame.subarray(i, i + 1));
      clock.advance(300);
    }
    expect(socket.destroyed).toBe(true);
  });

  it("never times out an idle connection between frames", () => {
    const { clock, socket, broker } = setup({ readTimeoutMs: 1000 });
    const frame = listOffsetsFrame(1);
    socket.send(frame.subarray(0, 5));
    clock.advance(900);
    socket.send(frame.subarray(5));
    clock.advance(10_000);
    expect(socket.destroyed).toBe(false);
    expect(broker.calls.length).toBe(1);
  });

  it("does not count time the transport itself paused reading against the client", async () => {
    const { clock, socket, broker } = setup({ readTimeoutMs: 1000, maxInFlightRequests: 1 });
    socket.send(concat(listOffsetsFrame(1), listOffsetsFrame(2).subarray(0, 3)));
    expect(socket.paused).toBe(true);
    clock.advance(5000);
    expect(socket.destroyed).toBe(false);
    broker.calls[0].deferred.resolve({ logStartOffset: 0, highWatermark: 0 });
    await settle();
    expect(socket.paused).toBe(false);
    clock.advance(1000);
    expect(socket.destroyed).toBe(true);
  });

  it("destroys the connection on a length below 8", () => {
    const { socket } = setup();
    socket.send(Uint8Array.of(0, 0, 0, 4, 0, 0, 0, 0));
    expect(socket.destroyed).toBe(true);
    expect(socket.writes).toEqual([]);
  });

  it("closes an HTTP request sent to the TCP port without answering or buffering it", () => {
    const { socket, broker, logger } = setup();
    socket.send(text("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
    expect(socket.destroyed).toBe(true);
    expect(socket.writes).toEqual([]);
    expect(broker.calls).toEqual([]);
    expect(logger.named("tcp.frame_refused")).toMatchObject([{ length: 0x47455420 }]);
  });

  it("answers a TLS ClientHello with one line of plain text (not TLS), then ends", () => {
    const { socket } = setup();
    socket.send(
      Uint8Array.of(0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03, 0xaa, 0xbb),
    );
    expect(socket.ended).toBe(true);
    const text = new TextDecoder().decode(Buffer.concat(socket.writes.flat()));
    expect(text).toBe("es-broker: this port is plain TCP, not TLS: connect without TLS\n");
  });

  it("answers an oversize frame of a known api with request_too_large, then ends the connection", () => {
    const { socket, broker } = setup({ maxRequestBytes: 1024 });
    const header = rawFrame(0, 0, 77);
    new DataView(header.buffer).setUint32(0, 1025);
    socket.send(header);
    expect(broker.calls).toEqual([]);
    expect(socket.ended).toBe(true);
    const [response] = socket.responses();
    expect(response).toMatchObject({ correlationId: 77, error: Errors.requestTooLarge.tcp });
    expect(decodeErrorBody(response.body).message).toContain("1025");
  });

  it("accepts a frame of exactly maxRequestBytes", () => {
    const { socket, broker } = setup({ maxRequestBytes: 1024 });
    const value = "x".repeat(1024 - 8 - 2 - 1 - 8 - 16);
    const frame = produceFrame(1, value);
    expect(frame.length - 4).toBe(1024);
    socket.send(frame);
    expect(broker.calls.length).toBe(1);
  });
});

describe("TCP transport: shutdown", () => {
  it("close() answers in-flight requests, ends each connection and resolves when all are closed", async () => {
    const { broker, socket, transport } = setup();
    socket.send(listOffsetsFrame(1));
    let closed = false;
    const done = transport.close().then(() => (closed = true));
    expect(socket.paused).toBe(true);
    await settle();
    expect(socket.ended).toBe(false);
    broker.calls[0].deferred.resolve({ logStartOffset: 0, highWatermark: 0 });
    await settle();
    expect(socket.ended).toBe(true);
    expect(socket.responses().map((r) => r.correlationId)).toEqual([1]);
    await done;
    expect(closed).toBe(true);
    expect(transport.connectionCount).toBe(0);
  });

  it("close() aborts long-polling fetches", () => {
    const { broker, socket, transport } = setup();
    socket.send(encodeFetchRequest(1, { topic: "t", partition: 0, offset: 0, waitMs: 60_000 }));
    void transport.close();
    expect((broker.calls[0].args[0].signal as AbortSignal).aborted).toBe(true);
  });

  it("close() destroys connections still busy when the grace period ends", async () => {
    const { socket, transport, clock } = setup();
    socket.send(listOffsetsFrame(1));
    const done = transport.close({ graceMs: 100 });
    clock.advance(100);
    expect(socket.destroyed).toBe(true);
    await done;
    expect(transport.connectionCount).toBe(0);
  });

  it("after close(), new connections are destroyed at once", async () => {
    const { transport } = setup();
    await transport.close({ graceMs: 0 });
    const late = new FakeSocket();
    transport.handleConnection(late);
    expect(late.destroyed).toBe(true);
  });
});
