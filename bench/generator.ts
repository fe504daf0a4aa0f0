/**
 * A load generator: runs in its own process (spawned by `bench/harness.ts`, bundled by
 * `bench/run.mjs`), never in the broker's. It takes one {@link GeneratorSpec} as JSON in argv[2],
 * runs it, and prints one {@link GeneratorResult} as the last line of stdout (or, with `--serve`,
 * runs one spec per stdin line; see {@link main}).
 *
 * Every load is closed-loop: each producer (or consumer) has one request in flight and sends the
 * next as soon as the answer arrives. Requests that complete inside the measured window count;
 * their latency is the time from sending to the answer. The window opens after `warmupMs` and
 * closes after `measureMs`, or later if fewer than `minRequests` requests completed by then (so a
 * tiny `--quick` run always measures something).
 */
import * as fs from "node:fs";
import * as http from "node:http";
import * as https from "node:https";
import * as net from "node:net";
import { join } from "node:path";
import { Kafka, logLevel } from "kafkajs";
import { type FetchReader, IdempotentProducer, TcpClient } from "../src/client/client.ts";
import { encodeProduceRequest } from "../src/protocol/apis/produce.ts";
import { EntryBatchBuilder, type EntryBatch } from "../src/storage/record.ts";
import { Http1Connection, postRequest } from "./clients/http1.ts";
import { NdjsonFetchReader, forEachNdjsonRecord } from "./clients/ndjson-fetch.ts";
import { NatsConnection } from "./clients/nats.ts";
import { RssWatch } from "./proc.ts";
import { RedisConnection, RedisReplyError, command, type RedisReply } from "./clients/resp.ts";
import type {
  E2eSpec,
  FanoutSpec,
  FetchSpec,
  GeneratorResult,
  GeneratorSpec,
  LatencySummary,
  ProduceSpec,
  Target,
} from "./spec.ts";

/** Longest a window waits for its `minRequests`, in ms, before the generator gives up. */
const windowOverrunMsMax = 120_000;

const now = (): number => performance.now();
/** With BENCH_TRACE=1 in the environment, phase timings go to stderr. */
const trace = process.env.BENCH_TRACE
  ? (what: string) => process.stderr.write(`[generator ${now().toFixed(1)} ms] ${what}\n`)
  : () => {};
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Latency samples in ms. */
class Samples {
  #values = new Float64Array(1024);
  #count = 0;

  add(ms: number): void {
    if (this.#count === this.#values.length) {
      const grown = new Float64Array(this.#values.length * 2);
      grown.set(this.#values);
      this.#values = grown;
    }
    this.#values[this.#count++] = ms;
  }

  get count(): number {
    return this.#count;
  }

  summary(): LatencySummary {
    const sorted = this.#values.slice(0, this.#count).sort();
    const at = (q: number) =>
      sorted.length === 0
        ? 0
        : sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)];
    return {
      p50: at(0.5),
      p99: at(0.99),
      max: sorted.length === 0 ? 0 : sorted[sorted.length - 1],
      count: sorted.length,
    };
  }
}

/** The measured window: opened and closed by the main flow, consulted by every loop. */
class Window {
  start = Infinity;
  end = Infinity;
  stopping = false;
  records = 0;
  requests = 0;
  readonly latency = new Samples();

  /** Counts a request that started at `startedMs` and just completed with `records` records. */
  complete(startedMs: number, records: number): void {
    const t = now();
    if (startedMs < this.start || t > this.end) return;
    this.records += records;
    this.requests++;
    this.latency.add(t - startedMs);
  }
}

/** A printable ASCII value of `bytes` bytes (safe inside JSON strings, NDJSON lines and Redis). */
function makeValue(bytes: number, seed: number): Uint8Array {
  const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  const out = new Uint8Array(bytes);
  let x = (seed * 2654435761 + 1) >>> 0;
  for (let i = 0; i < bytes; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out[i] = alphabet.charCodeAt(x % alphabet.length);
  }
  return out;
}

function entryBatch(count: number, value: Uint8Array): EntryBatch {
  const b = new EntryBatchBuilder(count * (value.length + 16) + 64);
  for (let i = 0; i < count; i++) b.add(null, value);
  return b.build();
}

// ---------------------------------------------------------------------------------------------
// HTTP (node:http with keep-alive: one socket per producer)

interface HttpAnswer {
  status: number;
  body: Buffer;
}

function httpRequest(
  agent: http.Agent,
  url: URL,
  options: { method: string; headers?: Record<string, string>; body?: Buffer },
): Promise<HttpAnswer> {
  return new Promise((resolve, reject) => {
    const req = (url.protocol === "https:" ? https : http).request(
      url,
      { method: options.method, agent, headers: options.headers },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () =>
          resolve({
            status: res.statusCode ?? 0,
            body: chunks.length === 1 ? chunks[0] : Buffer.concat(chunks),
          }),
        );
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(options.body);
  });
}

/** A keep-alive agent for an es-broker HTTP target: HTTPS (trusting `caPem`) for `https://` URLs. */
function httpAgent(target: { url: string; caPem?: string }, maxSockets: number): http.Agent {
  return target.url.startsWith("https:")
    ? new https.Agent({ keepAlive: true, maxSockets, ca: target.caPem })
    : new http.Agent({ keepAlive: true, maxSockets });
}

function expectStatus(answer: HttpAnswer, ok: number[], what: string): void {
  if (!ok.includes(answer.status))
    throw new Error(`${what}: HTTP ${answer.status} ${answer.body.toString("utf8").slice(0, 300)}`);
}

/** Reads es-broker's storage counters (`GET /v1/admin/metrics`); null if they cannot be had. */
function readMetrics(url: string): Promise<{ fsyncs: number; records_appended: number } | null> {
  // node:http rather than fetch(): loading undici would cost this short-lived process ~70 ms.
  return new Promise((resolve) => {
    http
      .get(url, (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => {
          try {
            resolve(
              res.statusCode === 200
                ? (JSON.parse(Buffer.concat(chunks).toString("utf8")) as {
                    fsyncs: number;
                    records_appended: number;
                  })
                : null,
            );
          } catch {
            resolve(null);
          }
        });
        res.on("error", () => resolve(null));
      })
      .on("error", () => resolve(null));
  });
}

// ---------------------------------------------------------------------------------------------
// Produce

/** Sends one request of the spec's batch for producer `producer` to `partition`; resolves when acknowledged. */
type Send = (producer: number, partition: number) => Promise<void>;

interface Producer {
  send: Send;
  close(): Promise<void>;
}

async function produceTarget(spec: ProduceSpec): Promise<Producer> {
  const value = makeValue(spec.valueBytes, 1);
  const target = spec.target;
  const { batch, producers, partitions } = spec;
  switch (target.kind) {
    case "es-tcp": {
      const clients = await Promise.all(
        Array.from({ length: producers }, () =>
          TcpClient.connect({
            host: target.host,
            port: target.port,
            apiKey: target.apiKey,
            tls: target.caPem === undefined ? undefined : { ca: target.caPem },
          }),
        ),
      );
      const entries = entryBatch(batch, value);
      if (target.idempotentInFlight !== undefined) {
        // Each load producer is one IdempotentProducer over its connection; its `inFlight` loops
        // call `send` on it, which keeps that many batches of a partition on their way.
        const idempotent = clients.map(
          (c, p) =>
            new IdempotentProducer({
              connect: () => Promise.resolve(c),
              producerId: `bench-${process.pid}-${p}`,
              maxInFlight: target.idempotentInFlight,
            }),
        );
        return {
          send: async (p, partition) => {
            await idempotent[p].send(target.topic, entries, { partition });
          },
          close: async () => {
            await Promise.all(idempotent.map((i) => i.close()));
          },
        };
      }
      return {
        send: async (p, partition) => {
          await clients[p].produce(target.topic, entries, { partition });
        },
        close: async () => {
          await Promise.all(clients.map((c) => c.close()));
        },
      };
    }
    case "es-http": {
      const agent = httpAgent(target, producers);
      const auth: Record<string, string> =
        target.apiKey === undefined ? {} : { authorization: `Bearer ${target.apiKey}` };
      const text = Buffer.from(value).toString("latin1");
      const bodies: Buffer[] = [];
      const urls: URL[] = [];
      for (let partition = 0; partition < partitions; partition++) {
        if (target.body === "json") {
          const record = JSON.stringify({ value: text, partition });
          bodies.push(
            Buffer.from(`{"records":[${Array.from({ length: batch }, () => record).join(",")}]}`),
          );
          urls.push(new URL(`${target.url}/v1/topics/${target.topic}/records`));
        } else {
          bodies.push(Buffer.from(`${text}\n`.repeat(batch)));
          urls.push(
            new URL(`${target.url}/v1/topics/${target.topic}/records?partition=${partition}`),
          );
        }
      }
      const contentType = target.body === "json" ? "application/json" : "application/x-ndjson";
      if (!target.url.startsWith("https:")) {
        // Plain HTTP: the lean client (bench/clients/http1.ts), so the figure is the broker's.
        const conns = await Promise.all(
          Array.from({ length: producers }, () => {
            const u = new URL(target.url);
            return Http1Connection.connect(u.hostname, Number(u.port));
          }),
        );
        const requests = urls.map((url, partition) =>
          postRequest(url, { "content-type": contentType, ...auth }, bodies[partition]),
        );
        return {
          send: async (p, partition) => {
            const answer = await conns[p].send(requests[partition]);
            expectStatus(answer, [200], "es-broker produce");
          },
          close: async () => conns.forEach((c) => c.close()),
        };
      }
      return {
        send: async (_p, partition) => {
          const answer = await httpRequest(agent, urls[partition], {
            method: "POST",
            headers: {
              "content-type": contentType,
              "content-length": String(bodies[partition].length),
              ...auth,
            },
            body: bodies[partition],
          });
          expectStatus(answer, [200], "es-broker produce");
        },
        close: async () => agent.destroy(),
      };
    }
    case "kafka-kafkajs": {
      const kafka = new Kafka({
        brokers: [`${target.host}:${target.port}`],
        clientId: "es-bench",
        logLevel: logLevel.NOTHING,
        retry: { retries: 0 },
      });
      const clients = Array.from({ length: producers }, () =>
        kafka.producer({ allowAutoTopicCreation: false }),
      );
      await Promise.all(clients.map((c) => c.connect()));
      const buffer = Buffer.from(value);
      const messages = Array.from({ length: partitions }, (_, partition) =>
        Array.from({ length: batch }, () => ({ value: buffer, partition })),
      );
      return {
        send: async (p, partition) => {
          await clients[p].send({ topic: target.topic, acks: -1, messages: messages[partition] });
        },
        close: async () => {
          await Promise.all(clients.map((c) => c.disconnect()));
        },
      };
    }
    case "redis": {
      const conns = await Promise.all(
        Array.from({ length: producers }, () => RedisConnection.connect(target)),
      );
      const pipelines = Array.from({ length: partitions }, (_, partition) => {
        const one = command(["XADD", `${target.key}:${partition}`, "*", "v", value]);
        return Buffer.concat(Array.from({ length: batch }, () => one));
      });
      return {
        send: async (p, partition) => {
          const replies = await conns[p].send(pipelines[partition], batch);
          for (const r of replies) if (r instanceof RedisReplyError) throw r;
        },
        close: async () => conns.forEach((c) => c.close()),
      };
    }
    case "nats": {
      const conns = await Promise.all(
        Array.from({ length: producers }, () => NatsConnection.connect(target)),
      );
      return {
        send: (p, partition) => conns[p].publish(`${target.stream}.${partition}`, value, batch),
        close: async () => conns.forEach((c) => c.close()),
      };
    }
    case "ds": {
      const agent = new http.Agent({ keepAlive: true, maxSockets: producers });
      const text = JSON.stringify(Buffer.from(value).toString("latin1"));
      const body = Buffer.from(`[${Array.from({ length: batch }, () => text).join(",")}]`);
      const urls = Array.from(
        { length: partitions },
        (_, partition) => new URL(`${target.url}/v1/stream/${target.stream}-${partition}`),
      );
      return {
        send: async (_p, partition) => {
          const answer = await httpRequest(agent, urls[partition], {
            method: "POST",
            headers: { "content-type": "application/json", "content-length": String(body.length) },
            body,
          });
          expectStatus(answer, [200, 204], "Durable Streams append");
        },
        close: async () => agent.destroy(),
      };
    }
    case "loopback": {
      const conns = await Promise.all(
        Array.from({ length: producers }, () => LoopbackConnection.connect(target)),
      );
      const entries = entryBatch(batch, value);
      const frames = Array.from({ length: partitions }, (_, partition) =>
        Buffer.from(encodeProduceRequest(1, { topic: target.topic, batch: entries, partition })),
      );
      return {
        send: (p, partition) => conns[p].roundTrip(frames[partition]),
        close: async () => conns.forEach((c) => c.close()),
      };
    }
    case "limit":
      throw new Error("the limit loop has no producers");
  }
}

/**
 * One connection to the loopback ceiling's server: writes a frame, resolves once the 30-byte
 * answer has arrived. As little work per round trip as a client can do.
 */
class LoopbackConnection {
  readonly #socket: net.Socket;
  #waiting = 0;
  #done: (() => void) | null = null;

  private constructor(socket: net.Socket) {
    this.#socket = socket;
    socket.on("data", (chunk: Buffer) => {
      this.#waiting -= chunk.length;
      if (this.#waiting <= 0 && this.#done !== null) {
        const done = this.#done;
        this.#done = null;
        done();
      }
    });
  }

  static connect(target: { host: string; port: number }): Promise<LoopbackConnection> {
    return new Promise((resolve, reject) => {
      const socket = net.connect({ host: target.host, port: target.port, noDelay: true });
      socket.once("error", reject);
      socket.once("connect", () => {
        socket.off("error", reject);
        socket.on("error", () => {});
        resolve(new LoopbackConnection(socket));
      });
    });
  }

  roundTrip(frame: Buffer): Promise<void> {
    return new Promise((resolve) => {
      this.#waiting = 30;
      this.#done = resolve;
      this.#socket.write(frame);
    });
  }

  close(): void {
    this.#socket.destroy();
  }
}

async function runProduce(spec: ProduceSpec): Promise<GeneratorResult> {
  if (spec.target.kind === "limit") return runLimit(spec, spec.target.dir);
  const idle = await openIdleConnections(spec);
  const producer = await produceTarget(spec);
  const win = new Window();
  const rss = new RssWatch(spec.serverPid);
  let failure: unknown = null;
  // With a pace: each producer sends one request every `intervalMs`, the producers spread evenly.
  const intervalMs =
    spec.recordsPerSec === undefined
      ? 0
      : (spec.batch * spec.producers * 1000) / spec.recordsPerSec;
  // An idempotent producer with several batches in flight (`idempotentInFlight`) is driven by as
  // many loops, each with one request outstanding, all sending through that one producer.
  const inFlight = spec.target.kind === "es-tcp" ? (spec.target.idempotentInFlight ?? 1) : 1;
  const loops = Array.from({ length: spec.producers * inFlight }, async (_, loop) => {
    const p = Math.floor(loop / inFlight);
    let seq = p;
    let next = now() + (intervalMs * p) / spec.producers;
    while (!win.stopping) {
      if (intervalMs > 0) {
        const wait = next - now();
        if (wait > 0) await sleep(wait);
        next = Math.max(next + intervalMs, now() - intervalMs);
        if (win.stopping) break;
      }
      const partition = spec.partitionPerProducer ? p % spec.partitions : seq++ % spec.partitions;
      const t = now();
      try {
        await producer.send(p, partition);
      } catch (err) {
        failure ??= err;
        win.stopping = true;
        return;
      }
      win.complete(t, spec.batch);
    }
  });
  trace("producers connected");
  const result = await measure(spec, win, rss, () => failure, spec.metricsUrl, spec.rssSampleMs);
  trace("window closed");
  await Promise.all(loops);
  trace("producers stopped");
  await producer.close();
  await Promise.all(idle.map((c) => c.close()));
  trace("connections closed");
  if (failure) throw failure;
  return result;
}

/**
 * The idle connections of a growth case (`spec.idleConnections`): opened 200 at a time, each
 * sending one produce to partition i % partitions, then left open and silent.
 */
async function openIdleConnections(spec: ProduceSpec): Promise<TcpClient[]> {
  const target = spec.target;
  const count = spec.idleConnections ?? 0;
  if (count === 0) return [];
  if (target.kind !== "es-tcp") throw new Error("idle connections are for es-tcp only");
  const entries = entryBatch(spec.batch, makeValue(spec.valueBytes, 2));
  const clients: TcpClient[] = [];
  try {
    for (let i = 0; i < count; i += 200) {
      const chunk = await Promise.all(
        Array.from({ length: Math.min(200, count - i) }, async (_, j) => {
          const c = await TcpClient.connect({ host: target.host, port: target.port });
          clients.push(c);
          await c.produce(target.topic, entries, { partition: (i + j) % spec.partitions });
          return c;
        }),
      );
      trace(`${i + chunk.length} idle connections`);
    }
  } catch (err) {
    await Promise.all(clients.map((c) => c.close()));
    throw err;
  }
  return clients;
}

/**
 * Runs the window: warm-up, open, wait (sampling RSS), close. Metrics are read just before the
 * window opens and just after it closes.
 */
async function measure(
  spec: { warmupMs: number; measureMs: number; minRequests: number },
  win: Window,
  rss: RssWatch,
  failed: () => unknown,
  metricsUrl?: string,
  rssSampleMs?: number,
): Promise<GeneratorResult> {
  await sleep(spec.warmupMs);
  const before = metricsUrl ? await readMetrics(metricsUrl) : null;
  trace("window opens");
  rss.start();
  const cpuBefore = process.cpuUsage();
  win.start = now();
  const samples: [number, number][] = [];
  const tick = rssSampleMs ?? 100;
  let nextSample = win.start;
  for (;;) {
    const t = now();
    if (failed()) break;
    if (t >= nextSample) {
      const v = rss.sample();
      if (rssSampleMs !== undefined && v !== null) samples.push([Math.round(t - win.start), v]);
      nextSample += tick;
    }
    const elapsed = t - win.start;
    if (elapsed >= spec.measureMs && win.requests >= spec.minRequests) break;
    if (elapsed >= spec.measureMs + windowOverrunMsMax)
      throw new Error(
        `only ${win.requests} of ${spec.minRequests} requests completed in ${Math.round(elapsed)} ms`,
      );
    await sleep(Math.min(20, Math.max(1, nextSample - t)));
  }
  win.end = now();
  const cpu = process.cpuUsage(cpuBefore);
  win.stopping = true;
  const after = metricsUrl ? await readMetrics(metricsUrl) : null;
  const fsyncs = before && after ? after.fsyncs - before.fsyncs : null;
  const recordsAppended = before && after ? after.records_appended - before.records_appended : null;
  return {
    records: win.records,
    requests: win.requests,
    seconds: (win.end - win.start) / 1000,
    latencyMs: win.latency.summary(),
    fsyncs,
    recordsAppended,
    rssPeakBytes: rss.peak(),
    serverCpuMs: rss.cpuMs(),
    serverUserCpuMs: rss.userCpuMs(),
    generatorCpuMs: (cpu.user + cpu.system) / 1000,
    generatorUserCpuMs: cpu.user / 1000,
    serverFds: rss.fds(),
    ...(rssSampleMs !== undefined ? { rssSamples: samples } : {}),
  };
}

/**
 * The disk limit: append the batch's stored size (records as the broker stores them: 28 bytes of
 * framing + value) with one positional write and one fdatasync per batch, rolling to a new file
 * every 128 MiB like a segment. Synchronous calls: nothing else runs in this loop.
 */
function runLimit(spec: ProduceSpec, dir: string): GeneratorResult {
  const storedBytes = spec.batch * (28 + spec.valueBytes);
  const buf = Buffer.alloc(storedBytes);
  const value = makeValue(spec.valueBytes, 1);
  for (let i = 0; i < spec.batch; i++) buf.set(value, i * (28 + spec.valueBytes) + 24);
  const rollBytes = 128 * 1024 * 1024;
  let fileNo = 0;
  let fd = -1;
  let position = 0;
  const open = () => {
    if (fd >= 0) {
      fs.closeSync(fd);
      fs.unlinkSync(join(dir, `limit-${fileNo - 1}.log`));
    }
    fd = fs.openSync(join(dir, `limit-${fileNo++}.log`), "w", 0o600);
    position = 0;
  };
  open();
  const latency = new Samples();
  let iterations = 0;
  const t0 = now();
  let start = Infinity;
  let end = 0;
  for (;;) {
    const t = now();
    if (start === Infinity && t - t0 >= spec.warmupMs) start = t;
    if (start !== Infinity && t - start >= spec.measureMs && iterations >= spec.minRequests) {
      end = t;
      break;
    }
    if (position + storedBytes > rollBytes) open();
    fs.writeSync(fd, buf, 0, storedBytes, position);
    fs.fdatasyncSync(fd);
    position += storedBytes;
    if (start !== Infinity) {
      iterations++;
      latency.add(now() - t);
    }
  }
  fs.closeSync(fd);
  fs.unlinkSync(join(dir, `limit-${fileNo - 1}.log`));
  return {
    records: iterations * spec.batch,
    requests: iterations,
    seconds: (end - start) / 1000,
    latencyMs: latency.summary(),
    fsyncs: iterations,
    recordsAppended: iterations * spec.batch,
    rssPeakBytes: null,
    serverCpuMs: null,
  };
}

// ---------------------------------------------------------------------------------------------
// Fetch

/** Reads `batch` records at `position` of `partition`; resolves with how many came and where to go next. */
type Read<P> = (
  consumer: number,
  partition: number,
  position: P,
) => Promise<{ count: number; next: P }>;

async function preloadEs(
  target: Extract<Target, { kind: "es-tcp" | "es-http" }>,
  spec: FetchSpec,
  host: { host: string; port: number },
): Promise<void> {
  const client = await TcpClient.connect(host);
  const value = makeValue(spec.valueBytes, 2);
  const chunk = 1000;
  const entries = entryBatch(chunk, value);
  const tail = entryBatch(spec.records % chunk || chunk, value);
  for (let partition = 0; partition < spec.partitions; partition++) {
    const sends: Promise<unknown>[] = [];
    for (let done = 0; done < spec.records; done += chunk) {
      sends.push(
        client.produce(target.topic, spec.records - done >= chunk ? entries : tail, { partition }),
      );
      if (sends.length >= 16) await Promise.all(sends.splice(0));
    }
    await Promise.all(sends);
  }
  await client.close();
}

async function runFetch(spec: FetchSpec): Promise<GeneratorResult> {
  const target = spec.target;
  const cleanups: (() => Promise<void> | void)[] = [];
  let read: Read<number | string>;
  let first: number | string;
  switch (target.kind) {
    case "es-tcp": {
      await preloadEs(target, spec, target);
      const clients = await Promise.all(
        Array.from({ length: spec.consumers }, () => TcpClient.connect(target)),
      );
      cleanups.push(() => Promise.all(clients.map((c) => c.close())).then(() => {}));
      first = 0;
      // Each consumer reads with the client's reader (one fetch ahead), started again at offset 0
      // when it wraps around.
      const readers: { reader: FetchReader; offset: number }[] = [];
      read = async (c, partition, offset) => {
        let r = readers[c];
        if (r === undefined || r.offset !== offset) {
          r?.reader.close();
          r = readers[c] = {
            offset: offset as number,
            reader: clients[c].reader({
              topic: target.topic,
              partition,
              offset: offset as number,
              maxRecords: spec.batch,
              maxBytes: spec.batch * (spec.valueBytes + 64),
            }),
          };
        }
        const res = await r.reader.next();
        r.offset = res.nextOffset;
        // Look at every record as a consumer would: its offset (the preload left no gaps) and its value.
        let expected = offset as number;
        for (const record = res.cursor(); record.next(); expected++) {
          if (record.offset !== expected)
            throw new Error(
              `fetch from ${offset}: record at offset ${record.offset}, expected ${expected}`,
            );
          if (record.value().length !== spec.valueBytes)
            throw new Error(
              `fetch from ${offset}: record ${record.offset} has a ${record.value().length}-byte value, expected ${spec.valueBytes}`,
            );
        }
        return {
          count: res.recordCount,
          next: res.nextOffset >= spec.records ? 0 : res.nextOffset,
        };
      };
      break;
    }
    case "redis": {
      const conns = await Promise.all(
        Array.from({ length: spec.consumers }, () => RedisConnection.connect(target)),
      );
      const loader = conns[0];
      const value = makeValue(spec.valueBytes, 2);
      for (let partition = 0; partition < spec.partitions; partition++) {
        const one = command(["XADD", `${target.key}:${partition}`, "*", "v", value]);
        for (let done = 0; done < spec.records; done += 1000) {
          const n = Math.min(1000, spec.records - done);
          await loader.send(Buffer.concat(Array.from({ length: n }, () => one)), n);
        }
      }
      cleanups.push(() => conns.forEach((c) => c.close()));
      first = "-";
      read = async (c, partition, from) => {
        const reply = (await conns[c].call(
          "XRANGE",
          `${target.key}:${partition}`,
          from as string,
          "+",
          "COUNT",
          String(spec.batch),
        )) as RedisReply[];
        if (reply.length === 0) return { count: 0, next: "-" };
        const lastId = (reply[reply.length - 1] as RedisReply[])[0] as string;
        return { count: reply.length, next: reply.length < spec.batch ? "-" : `(${lastId}` };
      };
      break;
    }
    default:
      throw new Error(`fetch is not measured for ${target.kind}`);
  }
  return runReaders(spec, read, first, cleanups);
}

/** es-broker over HTTP: preload through TCP (`tcp` address), read with GET …/records. */
async function runFetchHttp(
  spec: FetchSpec,
  target: Extract<Target, { kind: "es-http" }>,
  tcp: { host: string; port: number },
): Promise<GeneratorResult> {
  await preloadEs(target, spec, tcp);
  const base = `${target.url}/v1/topics/${target.topic}/partitions`;
  const encoding = spec.encoding === "base64" ? "&encoding=base64" : "";
  if (spec.ndjson === true) return runFetchNdjson(spec, target, encoding);
  const agent = new http.Agent({ keepAlive: true, maxSockets: spec.consumers });
  const read: Read<number | string> = async (_c, partition, offset) => {
    const answer = await httpRequest(
      agent,
      new URL(
        `${base}/${partition}/records?offset=${offset}&max_records=${spec.batch}&max_bytes=${spec.batch * (spec.valueBytes + 64)}${encoding}`,
      ),
      { method: "GET" },
    );
    expectStatus(answer, [200], "es-broker fetch");
    const body = JSON.parse(answer.body.toString("utf8")) as {
      records: unknown[];
      next_offset: number;
    };
    return {
      count: body.records.length,
      next: body.next_offset >= spec.records ? 0 : body.next_offset,
    };
  };
  return runReaders(spec, read, 0, [() => agent.destroy()]);
}

/** es-broker over HTTP, NDJSON answers read one fetch ahead (`NdjsonFetchReader`). */
async function runFetchNdjson(
  spec: FetchSpec,
  target: Extract<Target, { kind: "es-http" }>,
  encoding: string,
): Promise<GeneratorResult> {
  const url = new URL(target.url);
  const base64 = spec.encoding === "base64";
  const readers: NdjsonFetchReader[] = [];
  const read: Read<number | string> = async (c, partition, offset) => {
    readers[c] ??= await NdjsonFetchReader.connect(
      url,
      (o) =>
        `/v1/topics/${target.topic}/partitions/${partition}/records?offset=${o}&max_records=${spec.batch}&max_bytes=${spec.batch * (spec.valueBytes + 64)}${encoding}`,
      offset as number,
      spec.records,
    );
    const page = await readers[c].next();
    if (page.offset !== offset)
      throw new Error(`an NDJSON answer for offset ${page.offset}, expected ${offset}`);
    // Look at every record as the TCP case does: its offset (no gaps) and its value.
    let expected = page.offset;
    const count = forEachNdjsonRecord(page.body, base64, (recordOffset, value) => {
      if (recordOffset !== expected)
        throw new Error(
          `fetch from ${offset}: record at offset ${recordOffset}, expected ${expected}`,
        );
      if (value.length !== spec.valueBytes)
        throw new Error(
          `fetch from ${offset}: record ${recordOffset} has a ${value.length}-byte value, expected ${spec.valueBytes}`,
        );
      expected++;
    });
    return { count, next: page.nextOffset >= spec.records ? 0 : page.nextOffset };
  };
  return runReaders(spec, read, 0, [() => readers.forEach((r) => r.close())]);
}

async function runReaders(
  spec: FetchSpec,
  read: Read<number | string>,
  first: number | string,
  cleanups: (() => Promise<void> | void)[],
): Promise<GeneratorResult> {
  const win = new Window();
  const rss = new RssWatch(spec.serverPid);
  let failure: unknown = null;
  const loops = Array.from({ length: spec.consumers }, async (_, c) => {
    const partition = c % spec.partitions;
    let position = first;
    while (!win.stopping) {
      const t = now();
      try {
        const res = await read(c, partition, position);
        position = res.next;
        win.complete(t, res.count);
      } catch (err) {
        failure ??= err;
        win.stopping = true;
      }
    }
  });
  const result = await measure(spec, win, rss, () => failure);
  await Promise.all(loops);
  for (const c of cleanups) await c();
  if (failure) throw failure;
  return result;
}

// ---------------------------------------------------------------------------------------------
// End-to-end latency

async function runE2e(spec: E2eSpec): Promise<GeneratorResult> {
  const target = spec.target;
  const value = makeValue(spec.valueBytes, 3);
  const waitMs = 5000;
  let produce: () => Promise<void>;
  let consume: () => Promise<number>;
  const cleanups: (() => Promise<void> | void)[] = [];
  switch (target.kind) {
    case "es-tcp": {
      const producer = await TcpClient.connect(target);
      const consumer = await TcpClient.connect(target);
      cleanups.push(
        () => producer.close(),
        () => consumer.close(),
      );
      const entries = entryBatch(1, value);
      let offset = 0;
      produce = async () => {
        await producer.produce(target.topic, entries, { partition: 0 });
      };
      consume = async () => {
        for (;;) {
          const res = await consumer.fetch({ topic: target.topic, partition: 0, offset, waitMs });
          if (res.records.length > 0) {
            offset = res.nextOffset;
            return res.records.length;
          }
        }
      };
      break;
    }
    case "es-http": {
      const agent = new http.Agent({ keepAlive: true, maxSockets: 2 });
      const body = Buffer.from(`${Buffer.from(value).toString("latin1")}\n`);
      const produceUrl = new URL(`${target.url}/v1/topics/${target.topic}/records?partition=0`);
      let offset = 0;
      cleanups.push(() => agent.destroy());
      produce = async () => {
        const answer = await httpRequest(agent, produceUrl, {
          method: "POST",
          headers: {
            "content-type": "application/x-ndjson",
            "content-length": String(body.length),
          },
          body,
        });
        expectStatus(answer, [200], "es-broker produce");
      };
      consume = async () => {
        for (;;) {
          const answer = await httpRequest(
            agent,
            new URL(
              `${target.url}/v1/topics/${target.topic}/partitions/0/records?offset=${offset}&wait_ms=${waitMs}`,
            ),
            { method: "GET" },
          );
          expectStatus(answer, [200], "es-broker fetch");
          const res = JSON.parse(answer.body.toString("utf8")) as {
            records: unknown[];
            next_offset: number;
          };
          if (res.records.length > 0) {
            offset = res.next_offset;
            return res.records.length;
          }
        }
      };
      break;
    }
    case "redis": {
      const producer = await RedisConnection.connect(target);
      const consumer = await RedisConnection.connect(target);
      cleanups.push(
        () => producer.close(),
        () => consumer.close(),
      );
      const key = `${target.key}:0`;
      const xadd = command(["XADD", key, "*", "v", value]);
      let lastId = "0";
      produce = async () => {
        const [r] = await producer.send(xadd, 1);
        if (r instanceof RedisReplyError) throw r;
      };
      consume = async () => {
        for (;;) {
          const reply = (await consumer.call(
            "XREAD",
            "BLOCK",
            String(waitMs),
            "STREAMS",
            key,
            lastId,
          )) as RedisReply[][] | null;
          if (reply === null) continue;
          const entries = reply[0][1] as RedisReply[][];
          lastId = entries[entries.length - 1][0] as string;
          return entries.length;
        }
      };
      break;
    }
    default:
      throw new Error(`end-to-end latency is not measured for ${target.kind}`);
  }

  const win = new Window();
  const acks = new Samples();
  const rss = new RssWatch(spec.serverPid);
  let failure: unknown = null;
  const loop = (async () => {
    while (!win.stopping) {
      try {
        // The consumer's long-poll goes out first, so it waits for the record on the broker.
        const seen = consume().then((n) => ({ n, at: now() }));
        await sleep(1);
        const t = now();
        await produce();
        const acked = now();
        const { n, at } = await seen;
        if (t >= win.start && at <= win.end) {
          win.records += n;
          win.requests++;
          win.latency.add(at - t);
          acks.add(acked - t);
        }
      } catch (err) {
        failure ??= err;
        win.stopping = true;
      }
    }
  })();
  const result = await measure(spec, win, rss, () => failure);
  await loop;
  for (const c of cleanups) await c();
  if (failure) throw failure;
  return { ...result, ackLatencyMs: acks.summary() };
}

// ---------------------------------------------------------------------------------------------
// Fan-out: one producer, many readers tailing its partition

/**
 * A reader tailing partition 0: counts the records and answers it receives and notes when each
 * run of offsets arrived (for the delivery latency); `stop` closes its connection.
 */
interface TailReader {
  /** Records received so far. */
  received: number;
  /** Answers received so far: fetch responses (long-poll), data chunks (SSE). */
  answers: number;
  /** Per answer with records: its first offset, its record count and when it arrived (`now()`), flat. */
  deliveries: number[];
  stop(): void;
}

/** Notes an answer of `count` records from `offset` on `reader`, arrived now. */
function delivered(reader: TailReader, offset: number, count: number): void {
  reader.answers++;
  if (count === 0) return;
  reader.received += count;
  reader.deliveries.push(offset, count, now());
}

/**
 * Opens an SSE stream of partition 0 from offset 0; resolves once its opening comment arrived.
 * Counts `event: record` lines as they come (split across chunks is fine: a line is counted at its
 * end).
 */
function sseReader(
  httpUrl: string,
  topic: string,
  fail: (err: unknown) => void,
): Promise<TailReader> {
  return new Promise((resolve, reject) => {
    const reader: TailReader = {
      received: 0,
      answers: 0,
      deliveries: [],
      stop: () => req.destroy(),
    };
    let opened = false;
    let stopped = false;
    let carry = "";
    const req = http.get(
      `${httpUrl}/v1/topics/${topic}/partitions/0/stream?offset=0`,
      { agent: false },
      (res) => {
        if (res.statusCode !== 200) {
          reject(new Error(`SSE stream: HTTP ${res.statusCode}`));
          res.resume();
          return;
        }
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          const text = carry + chunk;
          let from = 0;
          let count = 0;
          for (
            let at = text.indexOf("event: record\n", from);
            at >= 0;
            at = text.indexOf("event: record\n", from)
          ) {
            count++;
            from = at + 14;
          }
          // From offset 0 with no gaps (no compaction here), the records received so far are the next offset.
          if (opened) delivered(reader, reader.received, count);
          else reader.received += count;
          const lastNewline = text.lastIndexOf("\n");
          carry = text.slice(Math.max(from, lastNewline + 1));
          if (!opened && text.includes("\n\n")) {
            opened = true;
            resolve(reader);
          }
        });
        res.on("error", (err) => {
          if (!stopped) fail(err);
        });
      },
    );
    reader.stop = () => {
      stopped = true;
      req.destroy();
    };
    req.on("error", (err) => (opened ? !stopped && fail(err) : reject(err)));
  });
}

/** A TCP consumer long-polling partition 0 from offset 0, one fetch in flight. */
async function longPollReader(
  target: FanoutSpec["target"],
  fail: (err: unknown) => void,
): Promise<TailReader> {
  const client = await TcpClient.connect(target);
  let stopped = false;
  const reader: TailReader = {
    received: 0,
    answers: 0,
    deliveries: [],
    stop: () => {
      stopped = true;
      void client.close().catch(() => {});
    },
  };
  void (async () => {
    let offset = 0;
    while (!stopped) {
      try {
        const res = await client.fetch({
          topic: target.topic,
          partition: 0,
          offset,
          maxRecords: 1000,
          waitMs: 1000,
        });
        delivered(reader, offset, res.recordCount);
        offset = res.nextOffset;
      } catch (err) {
        if (!stopped) fail(err);
        return;
      }
    }
  })();
  return reader;
}

async function runFanout(spec: FanoutSpec): Promise<GeneratorResult> {
  let failure: unknown = null;
  const fail = (err: unknown) => {
    failure ??= err;
    win.stopping = true;
  };
  const win = new Window();
  const readers: TailReader[] = [];
  try {
    // Readers first, in groups so that a hundred connections do not all open at once.
    for (let i = 0; i < spec.readers; i += 20) {
      const group = Array.from({ length: Math.min(20, spec.readers - i) }, () =>
        spec.readerKind === "sse"
          ? sseReader(spec.httpUrl, spec.target.topic, fail)
          : longPollReader(spec.target, fail),
      );
      readers.push(...(await Promise.all(group)));
    }
    if (spec.readerKind === "none" && spec.readers !== 0)
      throw new Error("fan-out: readerKind none with readers");
    // The producer's own client, for the offsets of its records: the delivery latency of a
    // record is from its produce request's start to a reader's receiving it.
    const target = spec.target;
    const producer = await TcpClient.connect({
      host: target.host,
      port: target.port,
      apiKey: target.apiKey,
      tls: target.caPem === undefined ? undefined : { ca: target.caPem },
    });
    const entries = entryBatch(spec.batch, makeValue(spec.valueBytes, 1));
    const sentAt = new Map<number, number>();
    const rss = new RssWatch(spec.serverPid);
    const interval = spec.paceRequestsPerSec === undefined ? 0 : 1000 / spec.paceRequestsPerSec;
    let next = now();
    const loop = (async () => {
      while (!win.stopping) {
        if (interval > 0) {
          next += interval;
          const ahead = next - now();
          if (ahead >= 1) await sleep(ahead);
          else if (ahead < -100) next = now(); // fell behind: no burst to catch up
        }
        const t = now();
        try {
          const { spans } = await producer.produce(target.topic, entries, { partition: 0 });
          for (const span of spans)
            for (let i = 0; i < span.count; i++) sentAt.set(span.baseOffset + i, t);
        } catch (err) {
          fail(err);
          return;
        }
        win.complete(t, spec.batch);
      }
    })();
    // The warm-up runs here rather than in measure(), so the readers' counts are taken as the window opens.
    await sleep(spec.warmupMs);
    const atStart = readers.map((r) => [r.received, r.answers]);
    const result = await measure(
      { ...spec, warmupMs: 0 },
      win,
      rss,
      () => failure,
      spec.metricsUrl,
    );
    const delivered = readers.map((r, i) => r.received - atStart[i][0]);
    const answers = readers.reduce((sum, r, i) => sum + r.answers - atStart[i][1], 0);
    await loop;
    await producer.close();
    if (failure) throw failure;
    // Every record sent inside the window, as each reader received it.
    const latency = new Samples();
    for (const r of readers) {
      const d = r.deliveries;
      for (let j = 0; j < d.length; j += 3)
        for (let o = d[j]; o < d[j] + d[j + 1]; o++) {
          const sent = sentAt.get(o);
          if (sent !== undefined && sent >= win.start && sent <= win.end)
            latency.add(d[j + 2] - sent);
        }
    }
    return {
      ...result,
      readerRecords: {
        total: delivered.reduce((a, b) => a + b, 0),
        min: delivered.length === 0 ? 0 : Math.min(...delivered),
        answers,
      },
      ...(readers.length > 0 ? { deliveryLatencyMs: latency.summary() } : {}),
    };
  } finally {
    for (const r of readers) r.stop();
  }
}

// ---------------------------------------------------------------------------------------------

/** Runs one job. */
async function run(spec: GeneratorSpec): Promise<GeneratorResult> {
  if (spec.mode === "produce") return runProduce(spec);
  if (spec.mode === "fanout") return runFanout(spec);
  if (spec.mode === "fetch") {
    if (spec.target.kind !== "es-http") return runFetch(spec);
    if (spec.tcp === undefined)
      throw new Error("an es-http fetch needs es-broker's TCP address (spec.tcp) to preload");
    return runFetchHttp(spec, spec.target, spec.tcp);
  }
  return runE2e(spec);
}

/**
 * Two ways to run: `generator.mjs SPEC_JSON` runs one job and prints its result as the last line;
 * `generator.mjs --serve` (what `--quick` uses, to save a process start per case) reads one spec
 * per line on stdin and answers each with one line, `{"result":…}` or `{"error":"…"}`, until
 * stdin closes.
 *
 * The consumers are the client as a user runs it: `TcpClient.connect` installs the runtime's
 * native CRC-32 itself (`src/client/crc.ts`), as the CLI's start does; nothing here changes it.
 */
async function main(): Promise<void> {
  if (process.argv[2] === "--serve") {
    let pending = "";
    let chain = Promise.resolve();
    process.stdin.setEncoding("utf8");
    process.stdin.on("data", (chunk: string) => {
      pending += chunk;
      for (let nl = pending.indexOf("\n"); nl >= 0; nl = pending.indexOf("\n")) {
        const line = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        chain = chain.then(async () => {
          try {
            const result = await run(JSON.parse(line) as GeneratorSpec);
            process.stdout.write(`${JSON.stringify({ result })}\n`);
          } catch (err) {
            process.stdout.write(
              `${JSON.stringify({ error: err instanceof Error ? (err.stack ?? err.message) : String(err) })}\n`,
            );
          }
        });
      }
    });
    await new Promise<void>((resolve) => process.stdin.on("end", () => resolve()));
    await chain;
    return;
  }
  const spec = JSON.parse(process.argv[2] ?? "null") as GeneratorSpec | null;
  if (spec === null) throw new Error("usage: generator.mjs SPEC_JSON | generator.mjs --serve");
  const result = await run(spec);
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(
      `generator failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    process.exit(1);
  },
);
