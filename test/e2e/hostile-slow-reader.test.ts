/**
 * End-to-end: clients that pipeline fetches and never read their answers (attack17 F1). Each
 * connection holds at most its in-flight budget, answers included until the kernel takes them, and
 * every TCP connection together at most `--max-in-flight-bytes` (docs/protocol.md "Pipelining and
 * ordering"): the real process's memory stays within that bound however many answers wait, and
 * every answer arrives whole once the clients read.
 */
import { readFileSync } from "node:fs";
import * as net from "node:net";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { TcpClient } from "../../src/client/client.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { decodeFetchResponse, encodeFetchRequest } from "../../src/protocol/apis/fetch.ts";
import { DecodeStatus, EntryBatchBuilder, RecordCursor } from "../../src/storage/record.ts";
import {
  decodeFetchResponse as decodeKafkaFetchResponse,
  writeFetchRequest as writeKafkaFetchRequest,
} from "../../src/protocol/kafka/fetch.ts";
import { encodeRequest as encodeKafkaRequest } from "../../src/protocol/kafka/header.ts";
import { tempDir } from "../helpers/tmp.ts";
import { type BrokerProcess, startBroker, target } from "./harness.ts";

const MiB = 1024 * 1024;
/** The cap the broker runs with: small, so that the bound shows against the old behaviour. */
const capBytes = 32 * MiB;
const connections = 4;
const fetchesPerConnection = 64;
const maxBytes = 1 * MiB;
const records = 2048;
const valueBytes = 4096;

const running: BrokerProcess[] = [];
const sockets: net.Socket[] = [];
afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

/** The gauges and counters of one scrape, by series name (no labels). */
async function scrape(broker: BrokerProcess): Promise<Record<string, number>> {
  const text = await (await fetch(`${broker.httpUrl}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const line of text.split("\n")) {
    const m = /^(esb_[a-z_]+) (\S+)$/.exec(line);
    if (m) out[m[1]] = Number(m[2]);
  }
  return out;
}

/** Resident set of the broker process, in bytes (Linux). */
function rss(broker: BrokerProcess): number {
  const status = readFileSync(`/proc/${broker.proc.pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) * 1024;
}

/** The offset fetch `i` asks for: spread over the topic, as the attacker's script did. */
const offsetOf = (i: number) => (i * 37) % (records - 64);

/** Reads `count` response frames from a socket that was not read so far. */
function readFrames(socket: net.Socket, count: number): Promise<Buffer[]> {
  return new Promise((resolve, reject) => {
    const frames: Buffer[] = [];
    // Chunks not yet framed, joined only once the next frame is whole (answers are ~1 MiB).
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    let need = 4;
    const timer = setTimeout(
      () => reject(new Error(`only ${frames.length} of ${count} answers within 60 s`)),
      60_000,
    );
    socket.on("data", (data: Buffer) => {
      pending.push(data);
      pendingBytes += data.length;
      while (pendingBytes >= need) {
        let received = pending.length === 1 ? pending[0] : Buffer.concat(pending);
        pending = [];
        while (received.length >= 4) {
          const length = received.readUInt32BE(0);
          if (received.length < 4 + length) break;
          frames.push(received.subarray(4, 4 + length));
          received = received.subarray(4 + length);
        }
        need = received.length >= 4 ? 4 + received.readUInt32BE(0) : 4;
        if (received.length > 0) pending.push(received);
        pendingBytes = received.length;
        if (pendingBytes < need) break;
      }
      if (frames.length >= count) {
        clearTimeout(timer);
        resolve(frames);
      }
    });
    socket.once("close", () => reject(new Error("the broker closed the connection")));
    socket.resume();
  });
}

/** Starts a broker capped at {@link capBytes} (with `extra` options) holding the topic `big`. */
async function startWithTopic(extra: string[] = []): Promise<BrokerProcess> {
  const { dir } = tempDir();
  const broker = await startBroker(join(dir, "data"), [
    "--max-in-flight-bytes",
    String(capBytes),
    ...extra,
  ]);
  running.push(broker);
  const client = await TcpClient.connect({ host: broker.tcp.host, port: broker.tcp.port });
  try {
    await client.createTopic({ name: "big", partitions: 1 });
    const value = new Uint8Array(valueBytes).fill(0x61);
    for (let at = 0; at < records; at += 128) {
      const b = new EntryBatchBuilder();
      for (let i = 0; i < 128; i++) b.add(utf8(`k${at + i}`), value);
      await client.produce("big", b.build(), { partition: 0 });
    }
  } finally {
    await client.close();
  }
  return broker;
}

/**
 * Opens {@link connections} connections to `port`, each pipelining every fetch (`fetchFrame(i)`)
 * at once and reading nothing; once the answers stop moving, checks the broker's accounting and
 * memory against the bound. Returns the sockets, still unread.
 */
async function stallAndCheck(
  broker: BrokerProcess,
  address: { host: string; port: number },
  fetchFrame: (i: number) => Uint8Array,
): Promise<net.Socket[]> {
  const before = await scrape(broker);
  expect(before.esb_in_flight_bytes_limit).toBe(capBytes);
  const rssBefore = rss(broker);
  const opened: net.Socket[] = [];
  for (let c = 0; c < connections; c++) {
    const socket = net.connect(address.port, address.host);
    socket.on("error", () => {});
    sockets.push(socket);
    await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
    socket.pause();
    const frames = [];
    for (let i = 0; i < fetchesPerConnection; i++) frames.push(fetchFrame(i));
    socket.write(Buffer.concat(frames));
    opened.push(socket);
  }

  // Until the answers stop moving: the broker holds what it may, the clients read nothing.
  let peak = { inFlight: 0, queued: 0, external: 0, rss: 0 };
  let last = -1;
  for (let round = 0; round < 40; round++) {
    await new Promise((r) => setTimeout(r, 250));
    const m = await scrape(broker);
    peak = {
      inFlight: Math.max(peak.inFlight, m.esb_in_flight_bytes),
      queued: Math.max(peak.queued, m.esb_queued_answer_bytes),
      external: Math.max(peak.external, m.esb_external_memory_bytes),
      rss: Math.max(peak.rss, rss(broker)),
    };
    if (round >= 8 && m.esb_in_flight_bytes === last) break;
    last = m.esb_in_flight_bytes;
  }
  const stalled = await scrape(broker);
  // The clients' unread answers are there, and the cap made connections wait.
  expect(peak.queued).toBeGreaterThan(0);
  expect(stalled.esb_in_flight_waits_total).toBeGreaterThan(0);
  // The bound: the cap plus at most one request per connection (its frame and max_bytes).
  const bound = capBytes + connections * (maxBytes + 256);
  expect(peak.inFlight).toBeLessThanOrEqual(bound);
  // The process: what it holds for answers, plus room for buffers the kernel took and the GC
  // has not collected yet. Before the fix these clients pinned ~200 MiB (4 × 64 MiB of answers
  // less what the kernel took).
  const slack = 64 * MiB;
  expect(peak.external - before.esb_external_memory_bytes).toBeLessThan(bound + slack);
  expect(peak.rss - rssBefore).toBeLessThan(bound + 2 * slack);
  return opened;
}

/** Once every answer was read, the broker holds nothing. */
async function expectNothingHeld(broker: BrokerProcess): Promise<void> {
  let after = await scrape(broker);
  for (let i = 0; i < 40 && after.esb_in_flight_bytes !== 0; i++) {
    await new Promise((r) => setTimeout(r, 50));
    after = await scrape(broker);
  }
  expect(after.esb_in_flight_bytes).toBe(0);
  expect(after.esb_queued_answer_bytes).toBe(0);
}

describe(`[${target}] clients that do not read their answers`, () => {
  it("hold at most --max-in-flight-bytes in the broker, and get every answer whole once they read", async () => {
    const broker = await startWithTopic();
    const opened = await stallAndCheck(broker, broker.tcp, (i) =>
      encodeFetchRequest(i, { topic: "big", partition: 0, offset: offsetOf(i), maxBytes }),
    );

    // Now they read: every answer is there, in full, each the records asked for.
    const cursor = new RecordCursor();
    for (const socket of opened) {
      const frames = await readFrames(socket, fetchesPerConnection);
      const seen = new Set<number>();
      for (const frame of frames) {
        const correlationId = frame.readUInt32BE(0);
        expect(frame.readUInt16BE(4), `answer ${correlationId}`).toBe(0);
        seen.add(correlationId);
        const answer = decodeFetchResponse(frame.subarray(6));
        const bytes = answer.records.bytes;
        expect(answer.records.count).toBeGreaterThan(0);
        expect(bytes.length).toBeLessThanOrEqual(maxBytes);
        cursor.reset(bytes);
        let pos = 0;
        let expected = offsetOf(correlationId);
        const bad: string[] = [];
        for (let n = 0; n < answer.records.count; n++) {
          if (cursor.decode(pos) !== DecodeStatus.Ok) bad.push(`record ${n}: ${cursor.reason}`);
          else if (cursor.offset !== expected || cursor.valueLen !== valueBytes)
            bad.push(`record ${n}: offset ${cursor.offset}, value ${cursor.valueLen} bytes`);
          expected++;
          pos += cursor.sizeBytes;
        }
        expect(bad, `answer ${correlationId}`).toEqual([]);
        expect(pos).toBe(bytes.length);
        expect(answer.nextOffset).toBe(expected);
      }
      expect(seen.size).toBe(fetchesPerConnection);
    }
    await expectNothingHeld(broker);
  }, 120_000);

  it("over Kafka too: the listener shares the core, the cap and the answers' order", async () => {
    const broker = await startWithTopic(["--kafka-port", "0"]);
    const opened = await stallAndCheck(broker, broker.kafka!, (i) =>
      encodeKafkaRequest(
        { apiKey: 1, apiVersion: 4, correlationId: i, clientId: "slow-reader" },
        (w) =>
          writeKafkaFetchRequest(w, {
            maxWaitMs: 0,
            minBytes: 0,
            maxBytes,
            isolationLevel: 0,
            topics: [
              {
                topic: "big",
                partitions: [
                  { partition: 0, fetchOffset: offsetOf(i), partitionMaxBytes: maxBytes },
                ],
              },
            ],
          }),
      ),
    );
    for (const socket of opened) {
      const frames = await readFrames(socket, fetchesPerConnection);
      // Kafka answers in request order, each the batch asked for.
      expect(frames.map((f) => f.readInt32BE(0))).toEqual(
        Array.from({ length: fetchesPerConnection }, (_, i) => i),
      );
      for (const frame of frames) {
        const correlationId = frame.readInt32BE(0);
        const [topic] = decodeKafkaFetchResponse(frame.subarray(4));
        const [partition] = topic.partitions;
        expect(partition.errorCode, `answer ${correlationId}`).toBe(0);
        const batch = Buffer.from(partition.records);
        expect(batch.length).toBeGreaterThan(0);
        expect(batch.length).toBeLessThanOrEqual(maxBytes + 1024);
        // RecordBatch v2: base_offset int64, batch_length int32 (the bytes after it).
        expect(Number(batch.readBigInt64BE(0)), `answer ${correlationId}`).toBe(
          offsetOf(correlationId),
        );
        expect(12 + batch.readInt32BE(8)).toBeLessThanOrEqual(batch.length);
      }
    }
    await expectNothingHeld(broker);
  }, 120_000);
});
