/**
 * `es-broker serve`: opens the data directory, starts the HTTP and TCP front doors, prints one line
 * saying where it listens, and shuts down gracefully on SIGTERM or SIGINT (stop accepting, finish
 * in-flight requests, fsync, close files, exit 0); a second signal exits at once.
 */
import { dirname, resolve } from "node:path";
import { LocalBroker } from "../broker/broker.ts";
import { NodeFileSystem } from "../runtime/node-fs.ts";
import { acquireDataDirLock } from "../runtime/lock.ts";
import { systemClock } from "../runtime/clock.ts";
import { serveHttp } from "../runtime/http.ts";
import { listenTcp } from "../runtime/tcp.ts";
import { runtimeDescription } from "../runtime/info.ts";
import { createHttpApp } from "../transport/http/index.ts";
import { createTcpTransport } from "../transport/tcp/transport.ts";
import { jsonLineLogger, type LogLevel } from "../lib/logger.ts";
import { RefusalLog } from "../lib/refusals.ts";
import {
  cleanupIntervalMsDefault,
  producerExpiryMsDefault,
  flushIntervalMsDefault,
  readTimeoutMsDefault,
  requestBytesDefault,
  requestBytesMax,
  requestBytesMin,
} from "../lib/limits.ts";
import { version } from "../version.ts";
import { UsageError, intOption, isLoopback, parseCli } from "./args.ts";
import { errorMessage } from "../lib/errors.ts";

/** Help text of `es-broker serve`. */
export const serveHelp = `Usage: es-broker serve [options]

Runs the broker. Data is fsynced before every acknowledgement unless --flush-every-records > 1.

Options:
  --data-dir DIR              data directory (default ./data)
  --host HOST                 address to listen on (default 127.0.0.1)
  --http-port PORT            HTTP port, 0 = any free port (default 8080)
  --tcp-port PORT             TCP protocol port, 0 = any free port (default 9092)
  --flush-every-records N     fsync once N records wait (default 1: fsync before every ack)
  --flush-interval MS         with N > 1, fsync at least this often (default ${flushIntervalMsDefault})
  --max-request-bytes BYTES   largest HTTP body or TCP frame (default ${requestBytesDefault})
  --read-timeout MS           close a TCP connection stalled inside a frame (default ${readTimeoutMsDefault})
  --cold-storage-dir DIR      move segments that retention removes there (and serve them from there)
                              instead of deleting them; topic config cold_retention_ms says how long
  --cleanup-interval-ms MS    run retention and compaction over every partition this often
                              (default ${cleanupIntervalMsDefault}; 0 = only on POST /v1/admin/topics/{topic}/cleanup)
  --producer-expiry-ms MS     forget an idempotent producer idle this long (default ${producerExpiryMsDefault}, 7 days)
  --allow-anonymous           allow listening on a non-loopback address without authentication
  --log-level LEVEL           debug | info | warn | error (default info); logs are JSON lines on stderr
  -h, --help                  show this help
`;

/** Runs `serve` until a signal stops it. Resolves with the exit code. */
export async function serve(argv: string[]): Promise<number> {
  const { values } = parseCli({
    args: argv,
    options: {
      "data-dir": { type: "string", default: "./data" },
      host: { type: "string", default: "127.0.0.1" },
      "http-port": { type: "string" },
      "tcp-port": { type: "string" },
      "flush-every-records": { type: "string" },
      "flush-interval": { type: "string" },
      "max-request-bytes": { type: "string" },
      "read-timeout": { type: "string" },
      "cold-storage-dir": { type: "string" },
      "cleanup-interval-ms": { type: "string" },
      "producer-expiry-ms": { type: "string" },
      "allow-anonymous": { type: "boolean", default: false },
      "log-level": { type: "string", default: "info" },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
    allowPositionals: false,
  });
  if (values.help) {
    process.stdout.write(serveHelp);
    return 0;
  }
  const host = values.host!;
  const httpPort = intOption("http-port", values["http-port"], 8080, 0, 65535);
  const tcpPort = intOption("tcp-port", values["tcp-port"], 9092, 0, 65535);
  const flushEveryRecords = intOption(
    "flush-every-records",
    values["flush-every-records"],
    1,
    1,
    1_000_000,
  );
  const flushIntervalMs = intOption(
    "flush-interval",
    values["flush-interval"],
    flushIntervalMsDefault,
    1,
    3_600_000,
  );
  const maxRequestBytes = intOption(
    "max-request-bytes",
    values["max-request-bytes"],
    requestBytesDefault,
    requestBytesMin,
    requestBytesMax,
  );
  const readTimeoutMs = intOption(
    "read-timeout",
    values["read-timeout"],
    readTimeoutMsDefault,
    1,
    3_600_000,
  );
  const cleanupIntervalMs = intOption(
    "cleanup-interval-ms",
    values["cleanup-interval-ms"],
    cleanupIntervalMsDefault,
    0,
    86_400_000,
  );
  const producerExpiryMs = intOption(
    "producer-expiry-ms",
    values["producer-expiry-ms"],
    producerExpiryMsDefault,
    1000,
    365 * 86_400_000,
  );
  const coldStorageDir =
    values["cold-storage-dir"] === undefined ? undefined : resolve(values["cold-storage-dir"]);
  const level = values["log-level"] as LogLevel;
  if (!["debug", "info", "warn", "error"].includes(level))
    throw new UsageError(
      `--log-level must be debug, info, warn or error, got ${JSON.stringify(level)}`,
    );
  if (!isLoopback(host) && !values["allow-anonymous"]) {
    throw new UsageError(
      `refusing to listen on non-loopback address ${host} without authentication; pass --allow-anonymous to allow it`,
    );
  }
  const dataDir = resolve(values["data-dir"]!);
  const logger = jsonLineLogger(
    (line) => process.stderr.write(line),
    () => Date.now(),
    level,
  );

  // One broker per data directory: take its lock before recovery touches anything. The directory
  // chain is created durably first (each new directory's parent fsynced).
  const nodeFs = new NodeFileSystem();
  const existing = await nodeFs.stat(dataDir);
  if (existing !== null && !existing.isDirectory)
    throw new Error(`Cannot use data directory ${dataDir}: it is not a directory`);
  const missing: string[] = [];
  for (
    let dir = dataDir;
    (await nodeFs.stat(dir)) === null && dirname(dir) !== dir;
    dir = dirname(dir)
  )
    missing.push(dir);
  await nodeFs.mkdir(dataDir);
  for (const dir of missing.reverse()) await nodeFs.syncDir(dirname(dir));
  const lock = acquireDataDirLock(dataDir);

  let broker: LocalBroker;
  try {
    broker = await LocalBroker.open({
      fs: nodeFs,
      dataDir,
      clock: systemClock,
      logger,
      flushEveryRecords,
      flushIntervalMs,
      coldStorageDir,
      cleanupIntervalMs,
      producerExpiryMs,
    });
  } catch (err) {
    lock.release();
    throw err;
  }
  // One count of refused client input for both front doors, logged at most every few seconds per kind.
  const refusals = new RefusalLog({ logger, clock: systemClock });
  let http;
  let tcp;
  let listener;
  try {
    http = await serveHttp(createHttpApp({ broker, logger, maxRequestBytes, refusals }), {
      host,
      port: httpPort,
      maxRequestBytes,
      refusals,
    });
    tcp = createTcpTransport({
      broker,
      clock: systemClock,
      logger,
      refusals,
      maxRequestBytes,
      readTimeoutMs,
    });
    listener = await listenTcp({ host, port: tcpPort }, (socket) => tcp!.handleConnection(socket));
  } catch (err) {
    await http?.close().catch(() => {});
    await broker.close();
    lock.release();
    throw err;
  }
  const shownHost = host.includes(":") ? `[${host}]` : host;
  const listening = `es-broker ${version} (${runtimeDescription()}) listening: http=http://${shownHost}:${http.port} tcp=${shownHost}:${listener.port} data=${dataDir}\n`;

  return await new Promise<number>((done) => {
    let stopping = false;
    const stop = (signal: string) => {
      if (stopping) {
        process.stderr.write(`es-broker: second ${signal}, exiting now\n`);
        process.exit(130);
      }
      stopping = true;
      logger.log("info", "broker.shutdown", { signal });
      void (async () => {
        let code = 0;
        try {
          // Stop accepting on both ports, let in-flight requests finish, then fsync and close files.
          const listenerClosed = listener!.close();
          await Promise.all([http!.close(), tcp!.close()]);
          await listenerClosed;
          refusals.flush();
          await broker.close();
          lock.release();
        } catch (err) {
          code = 1;
          process.stderr.write(`es-broker: shutdown failed: ${errorMessage(err)}\n`);
        }
        process.off("SIGTERM", onTerm);
        process.off("SIGINT", onInt);
        done(code);
      })();
    };
    const onTerm = () => stop("SIGTERM");
    const onInt = () => stop("SIGINT");
    process.on("SIGTERM", onTerm);
    process.on("SIGINT", onInt);
    // Only now: a supervisor may signal as soon as it reads this line, and a signal that comes
    // before the handlers exist kills the process without a graceful shutdown.
    process.stdout.write(listening);
  });
}
