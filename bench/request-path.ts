/**
 * The TCP request path's CPU per request, in one process, with no socket and no other process:
 * `node bench/request-path.mjs [--connections 64] [--records 1] [--requests 200000] [--rounds 3]
 * [--fsync] [--http]`. With `--http` the same over HTTP/1.1 produce on the raw path
 * (`transport/http/raw-connection.ts` over the app's fast produce route behind the authenticating
 * wrapper and the front door's metering, as `serve` wires them; a JSON body of the same records:
 * what Node serves without `node:http`). Each of `connections` in-memory connections (a {@link ByteSocket} that hands frames
 * straight to the transport) keeps one Produce request of `records` records in flight against a
 * `LocalBroker` on a temporary directory; a connection's next frame is delivered in the next
 * turn of the event loop after its answer, as a socket read would be (copied into a read slab, as
 * the runtime's shared reads copy every read: `lib/read-slab.ts`). Without `--fsync` the broker
 * acknowledges after the write (`flushEveryRecords` 10^9), so the figure is the request path's
 * own work — frame decoding, the broker call, the partition's write, the answer's encoding and
 * the transport's write — not the disk's; with it, every answer waits for its fsync.
 *
 * Prints, per round, requests/s and the process's CPU time (user + system, `process.cpuUsage`)
 * per request. CPU per request is the figure to compare between two versions of the code: the
 * machine's other load changes how fast a round runs much more than what it costs.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { LocalBroker } from "../src/broker/broker.ts";
import { silentLogger } from "../src/lib/logger.ts";
import { encodeProduceRequest } from "../src/protocol/apis/produce.ts";
import { systemClock } from "../src/runtime/clock.ts";
import { installFastCrc32 } from "../src/runtime/crc.ts";
import { NodeFileSystem } from "../src/runtime/node-fs.ts";
import { EntryBatchBuilder } from "../src/storage/record.ts";
import type { ByteSocket, ByteSocketHandlers } from "../src/transport/tcp/socket.ts";
import { createTcpTransport } from "../src/transport/tcp/transport.ts";
import { createAuthenticatedHttpApp } from "../src/transport/http/auth.ts";
import { RawHttpConnection, type RawHttpSocket } from "../src/transport/http/raw-connection.ts";
import { httpDate } from "../src/runtime/http-raw.ts";
import { AccessControl } from "../src/auth/access.ts";
import { createMetricsRegistry } from "../src/runtime/process-metrics.ts";
import { FrontDoorMetrics } from "../src/transport/metered-broker.ts";
import { copyRead } from "../src/lib/read-slab.ts";

/** What the in-memory socket sees of an HTTP answer: a TCP success answer's bytes. */
const answerBytes = new Uint8Array(10);

/** {@link MemorySocket}'s handlers over a {@link RawHttpConnection} serving `take`. */
function httpConnection(
  socket: MemorySocket,
  take: ConstructorParameters<typeof RawHttpConnection>[1]["take"],
): void {
  const raw: RawHttpSocket = {
    // One request in flight per connection: a write is one answer, `HTTP/1.1 200 …`.
    write: (text) => {
      if (!text.startsWith("HTTP/1.1 200 "))
        throw new Error(`the broker answered: ${text.slice(0, 300)}`);
      return socket.write([answerBytes]);
    },
    pause: () => {},
    resume: () => {},
    handOver: () => {
      throw new Error("the raw path handed a produce over");
    },
    end: () => {},
    destroy: () => {},
  };
  const connection = new RawHttpConnection(raw, {
    take,
    date: httpDate,
    reason: () => "OK",
    keepAliveSeconds: 5,
    maxInFlight: 128,
  });
  socket.attach({ onData: (chunk) => connection.onData(chunk), onDrain() {}, onClose() {} });
}

/** One in-memory connection: frames in through `onData`, answers counted as they are written. */
class MemorySocket implements ByteSocket {
  readonly remoteAddress = "memory:0";
  handlers: ByteSocketHandlers | null = null;
  answers = 0;
  constructor(readonly onAnswer: (socket: MemorySocket) => void) {}
  attach(handlers: ByteSocketHandlers): void {
    this.handlers = handlers;
  }
  write(chunks: readonly Uint8Array[], onWritten?: () => void): boolean {
    for (const chunk of chunks) {
      // Every answer is one frame; a success answer has error 0 at bytes 8–9.
      if (chunk[8] !== 0 || chunk[9] !== 0) throw new Error("the broker answered with an error");
      this.answers++;
      this.onAnswer(this);
    }
    // As a socket whose kernel buffer takes the bytes at once (`client/handle-writes.ts`).
    onWritten?.();
    return true;
  }
  pause(): void {}
  resume(): void {}
  end(): void {
    this.handlers?.onClose();
  }
  destroy(): void {
    this.handlers?.onClose();
  }
}

/** Runs the benchmark (module comment). Resolves with the exit code. */
export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      connections: { type: "string", default: "64" },
      records: { type: "string", default: "1" },
      requests: { type: "string", default: "200000" },
      rounds: { type: "string", default: "3" },
      fsync: { type: "boolean", default: false },
      http: { type: "boolean", default: false },
    },
  });
  const connections = Number(values.connections);
  const records = Number(values.records);
  const requests = Number(values.requests);
  const rounds = Number(values.rounds);
  installFastCrc32();
  const dir = fs.mkdtempSync(join(os.tmpdir(), "es-request-path-"));
  // Wired as `serve` wires them (cli/serve.ts): storage counters, access control without keys,
  // and the front door's metered view.
  const metrics = createMetricsRegistry();
  const broker = await LocalBroker.open({
    fs: new NodeFileSystem(),
    dataDir: dir,
    clock: systemClock,
    logger: silentLogger,
    metrics,
    flushEveryRecords: values.fsync ? 1 : 1_000_000_000,
  });
  try {
    await broker.createTopic({ name: "path", partitions: 1 });
    const tcpDoor = new FrontDoorMetrics(metrics, "tcp");
    const transport = createTcpTransport({
      broker,
      clock: systemClock,
      logger: silentLogger,
      access: new AccessControl({ broker, keys: null, logger: silentLogger }),
      meter: (b) => tcpDoor.wrap(b),
    });
    const batch = new EntryBatchBuilder();
    for (let i = 0; i < records; i++) batch.add(null, new Uint8Array(256).fill(0x61));
    const built = batch.build();
    let frame = encodeProduceRequest(1, { topic: "path", partition: 0, batch: built });
    // As `serve` builds it: the authenticating wrapper (no keys), the front door's metered view,
    // the DNS-rebinding check of a loopback listener.
    const httpDoor = new FrontDoorMetrics(metrics, "http");
    const app = createAuthenticatedHttpApp({
      access: new AccessControl({ broker, keys: null, logger: silentLogger }),
      logger: silentLogger,
      meter: (b) => httpDoor.wrap(b),
      checkHost: true,
    });
    if (values.http) {
      const body = JSON.stringify({
        records: Array.from({ length: records }, () => ({ value: "a".repeat(256) })),
      });
      frame = new TextEncoder().encode(
        `POST /v1/topics/path/records HTTP/1.1\r\nhost: 127.0.0.1:8080\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
      );
    }
    const take = (request: Parameters<typeof app.fastRoute>[0]) => app.fastRoute(request);
    for (let round = 1; round <= rounds; round++) {
      let sent = 0;
      let answered = 0;
      let ready: MemorySocket[] = [];
      let scheduled = false;
      let done: () => void = () => {};
      const finished = new Promise<void>((resolve) => (done = resolve));
      // Frames for the connections answered in one turn arrive together in the next, as one
      // readiness of many sockets would deliver them.
      const deliver = (): void => {
        scheduled = false;
        const now = ready;
        ready = [];
        for (const socket of now) {
          if (sent >= requests) continue;
          sent++;
          socket.handlers!.onData(copyRead(frame));
        }
      };
      const onAnswer = (socket: MemorySocket): void => {
        answered++;
        if (answered === requests) return done();
        ready.push(socket);
        if (!scheduled) {
          scheduled = true;
          setImmediate(deliver);
        }
      };
      const sockets = Array.from({ length: connections }, () => new MemorySocket(onAnswer));
      for (const socket of sockets)
        if (values.http) httpConnection(socket, take);
        else transport.handleConnection(socket);
      const storageBefore = broker.metrics();
      const cpuBefore = process.cpuUsage();
      const started = performance.now();
      ready = sockets.slice();
      deliver();
      await finished;
      const seconds = (performance.now() - started) / 1000;
      const cpu = process.cpuUsage(cpuBefore);
      const storage = broker.metrics();
      const fsyncs = storage.fsyncs - storageBefore.fsyncs;
      const writes = storage.writes - storageBefore.writes;
      for (const socket of sockets) socket.destroy();
      process.stdout.write(
        `round ${round}: ${values.http ? "HTTP" : "TCP"}, ${connections} connections x ${records} record(s), ${requests} requests: ${Math.round(requests / seconds)} requests/s, CPU ${((cpu.user + cpu.system) / requests).toFixed(2)} µs/request (user ${(cpu.user / requests).toFixed(2)}, system ${(cpu.system / requests).toFixed(2)}); ${fsyncs} fsyncs, ${writes} writes to the log (${(requests / Math.max(1, writes)).toFixed(1)} requests each)\n`,
      );
    }
    await transport.close({ graceMs: 1000 });
  } finally {
    await broker.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
  return 0;
}
