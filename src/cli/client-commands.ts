/**
 * The kcat-like client commands: `produce`, `consume`, `topics` and `groups`. They talk to a
 * running broker over the TCP protocol (`--broker host:port`, default 127.0.0.1:9092).
 */
import {
  ClientError,
  ClientErrorCodes,
  ClusterClient,
  clientTimeoutMsDefault,
  GroupConsumer,
  IdempotentProducer,
  mayBeStored,
  producerInFlightDefault,
  type FetchResponse,
  type TcpClient,
} from "../client/client.ts";
import { partitionForKey } from "../lib/murmur2.ts";
import { EntryBatchBuilder } from "../storage/record.ts";
import { concatBytes, utf8 } from "../lib/bytes.ts";
import { producerBatchesRemembered, recordPayloadBytesMax } from "../lib/limits.ts";
import { plural } from "../lib/text.ts";
import { groupJson, topicJson } from "../transport/http/encode.ts";
import type { GroupDescription } from "../broker/types.ts";
import { UsageError, hostPort, intOption, parseCli } from "./args.ts";
import { planReset, resetOptions } from "./reset-offsets.ts";
import { onStopSignals, type StopSignal } from "./signals.ts";
import {
  isAnswerLost,
  isReconnectable,
  reconnect,
  reconnectTimeoutMsDefault,
  retryRefusals,
} from "./reconnect.ts";
import { StdoutClosedError, flushOut, writeOut } from "./stdout.ts";
import { requestJson } from "./keys.ts";
import {
  clientTlsOptions,
  connectionHelp,
  connectionOptions,
  httpAddressHint,
  readApiKey,
  type ConnectionValues,
} from "./connection.ts";

export const brokerDefault = "127.0.0.1:9092";

/** Help text of `es-broker produce`. */
export const produceHelp = `Usage: es-broker produce TOPIC [options] < lines

Appends one record per line of standard input (the value is the line's bytes without the
newline; an empty line is a record with an empty value, where HTTP NDJSON produce skips empty
lines; a line over 8 MiB fails the command, exit 1). Lines are sent in batches: when --batch-records lines (or 1 MiB) are waiting, or
--linger-ms after the first line of a batch was read, so \`tail -f log | es-broker produce t\`
sends as lines come. Exits once every record is durable. SIGINT or SIGTERM stops reading, sends
the lines already read, waits for their acknowledgements and exits 0 saying how many were
produced (an incomplete last line, without its newline, is not sent); a second signal exits at
once, with 130 (SIGINT) or 143 (SIGTERM). A batch the broker refuses ends the command (exit 1),
naming the input line and the lines produced before it (earlier batches stay stored).

When the connection to the broker closes (a restart, an upgrade), it connects again (every
0.1 s, doubling to 2 s; one line on stderr when it starts, one when connected) and sends the
batches that had not left. A batch whose acknowledgement was lost with the connection may be
stored or not: rather than risk storing it twice, the command ends there (exit 1), naming the
first line of that batch. With --producer-id such a batch is resent and stored once.

Options:
  --broker HOST:PORT[,…]   broker TCP address (default ${brokerDefault}); in a cluster any
                           broker, or several: the first that answers, then each partition's leader
${connectionHelp}
  --timeout-ms N           how long one request waits for an answer before the command fails
                           (default 30000)
  --partition N            send every record to partition N (default: a keyed line goes by its
                           key; keyless lines go round-robin by batch, each batch to the next
                           partition; with --producer-id, keyless lines go by the producer id)
  --key-separator SEP      split each line at the first SEP into key and value
  --batch-records N        records per request (default 1000)
  --linger-ms MS           longest wait for more lines before sending those read (default 100;
                           0 sends what each read from stdin brings at once)
  --producer-id ID         produce idempotently as producer ID: every batch carries a sequence
                           number, and a batch resent after a lost answer is stored only once
  --producer-epoch N       with --producer-id: the epoch (default: the broker hands out the
                           next one, so each run is a new incarnation that fences older ones and
                           starts its sequences at 0; from a broker without producer epochs, the
                           current Unix time in seconds, and a run that sent anything then exits
                           only once that second is over, so the next run here gets a higher one)
  --max-in-flight N        with --producer-id: batches of one partition sent before the first
                           is answered, 1 to 5 (default 5, the batches the broker remembers per
                           producer and partition); 1 sends one at a time
  --reconnect-timeout-ms N how long to keep connecting again after the connection closed,
                           and to keep resending a batch the broker refused without storing it
                           (storage_error from a full disk, unavailable; a stderr line at most
                           every 5 s), before the command fails (default 30000; 0: fail at
                           once); the first connect is not retried: when no --broker answers at
                           start the command fails at once (exit 1), naming each address and why
  -h, --help               show this help
`;

/** Help text of `es-broker consume`. */
export const consumeHelp = `Usage: es-broker consume TOPIC [options]

Writes each record's value and a newline to standard output. Without --follow it exits at the end
of the log (the high watermark when it started reading); with --follow it waits for new records.
TOPIC is one topic's full name (no patterns such as 'clicks*').

Options:
  --broker HOST:PORT[,…]   broker TCP address (default ${brokerDefault}); in a cluster any
                           broker, or several: the first that answers, then each partition's leader
${connectionHelp}
  --timeout-ms N           how long one request waits for an answer before the command fails
                           (default 30000)
  --from-beginning         start at each partition's log start offset
  --offset N|earliest|latest|-N
                           start at offset N (needs --partition; an offset outside [log start
                           offset, high watermark] fails, exit 1), at each partition's log
                           start (earliest, as --from-beginning) or high watermark (latest, the
                           default), or N records before it (-N: the last N records of each
                           partition read, as kcat's -o -N)
  --partition N            read only partition N (default: all, read at the same time: each
                           partition's records in offset order, partitions interleaved); a
                           partition the topic does not have fails (exit 1)
  --follow                 keep waiting for new records
  --key-separator SEP      print KEY SEP VALUE for each record (no key prints nothing before SEP)
  --max-records N          stop after N records
  --group G                consume as a member of consumer group G: read only the partitions the
                           group assigns, starting at its committed offsets, and commit after each
                           printed batch; without --follow, leave once caught up (see below)
  --session-timeout MS     with --group: drop out of the group after this long without a
                           heartbeat (default 10000)
  --reconnect-timeout-ms N how long to keep connecting again after the connection closed
                           before the command fails (default: with --follow until stopped,
                           else 30000; 0: fail at once); the first connect is not retried:
                           when no --broker answers at start the command fails at once
                           (exit 1), naming each address and why
  -h, --help               show this help

When the connection to the broker closes (a restart, an upgrade), it connects again (every
0.1 s, doubling to 2 s; one line on stderr when it starts, one when connected) and resumes at
the next offset it has not printed; with --group it joins the group again as the same member
(no rebalance) and resumes at the group's committed offsets, which cover what it printed
(records printed whose commit the lost connection cut off are printed again: at least once, as
always with a group).

Without --from-beginning or --offset it starts at the end of the log (new records only); with
--group that applies only to partitions the group has never committed, and that starting offset
is committed at once, so a member taking the partition over continues from it.

Without --follow, a --group member caught up on its own partitions waits while other members
hold partitions of TOPIC with records not consumed: a member that died keeps its partitions
until its session times out, so it waits (saying so on stderr) up to the longest session timeout
among those members for the rebalance that hands them over, and reads them; partitions still
held after that belong to live members: it leaves them to them, says so on stderr, and exits 0.

SIGINT or SIGTERM stops it: the records already received are printed (with --group, committed,
and the member leaves the group) and it exits 0; a second signal exits at once, with 130 (SIGINT)
or 143 (SIGTERM). A reader of standard output that goes away (es-broker consume t | head -1)
stops it the same way: exit 0 without a message, as kcat does (a stop the reader asked for; with
set -o pipefail a script goes on), and with --group only the records whose bytes the pipe took
are committed (a reader may still have discarded some of those it was given), then it leaves.
With --group use --max-records N, not | head -N: head discards what the pipe buffered (up to
64 KiB of records), and those are committed: no member of the group sees them again.
`;

/** Help text of `es-broker groups`. */
export const groupsHelp = `Usage: es-broker groups <list|describe|reset-offsets> [GROUP] [options]

  list                     group names with their generation and member count, one per line
  describe GROUP           members, assignments, committed offsets and lag (records) as JSON
  reset-offsets GROUP (--topic TOPIC [--partition N] | --all-topics)
                (--to earliest|latest|OFFSET|-N | --shift-by ±N | --to-datetime TIME
                | --by-duration DURATION) [--dry-run | --execute]
  reset-offsets GROUP --from-file CSV [--dry-run | --execute]
                           sets the group's committed offsets (Kafka's kafka-consumer-groups
                           --reset-offsets) of TOPIC (every partition, or N), or with
                           --all-topics of every partition the group has committed:
                           earliest = each partition's log start offset, latest = its high
                           watermark (skip everything so far), OFFSET itself, or -N = N records
                           before the high watermark (as consume --offset -N); --shift-by ±N
                           moves each committed offset by N (-N goes back), not past the log
                           start or the high watermark; --to-datetime TIME: the first offset
                           whose record timestamp is at or after TIME, the high watermark if
                           none is (ISO-8601: 2026-12-03T09:30:00Z, …+01:00; no zone = local
                           time); --by-duration DURATION: the same for now minus DURATION
                           (ISO-8601: PT30M, PT1H, P1D, P1DT12H); --from-file CSV: the offsets
                           of its lines, topic,partition,offset (as Kafka's tool reads them),
                           each within the partition's log start offset … high watermark.
                           Prints the offsets it would commit; commits them only with
                           --execute (--dry-run, the default, commits nothing). The group must have no members: stop its consumers first
                           (or wait out their sessions), else the broker refuses it
                           (unknown_member); a dry run says so too.

Options:
  --broker HOST:PORT[,…]   broker TCP address (default ${brokerDefault}); in a cluster any
                           broker, or several: the first that answers, then each partition's leader
  --lag-ms                 describe: add lag_ms per partition, the age of the oldest record not
                           yet consumed (one fetch per lagging partition; a mirror's lag in time)
${connectionHelp}
  --timeout-ms N           how long one request waits for an answer before the command fails
                           (default 30000)
  -h, --help               show this help
`;

/** Default `topics alter --url`: the broker's default HTTP address. */
const topicsUrlDefault = "http://127.0.0.1:8080";

/** Help text of `es-broker topics`. */
export const topicsHelp = `Usage: es-broker topics <create|list|describe|alter|delete> [TOPIC] [options]

  create TOPIC [--partitions N] [--config key=value ...]   create a topic (default 1 partition)
  list                                                     topic names, one per line
  describe TOPIC [--json]                                  partitions, offsets and config as JSON
                                                           (--json: the same; always JSON)
  alter TOPIC --config key=value [...] [--url URL]         change config keys (the others stay);
                                                           prints the topic as describe does
  delete TOPIC                                             delete a topic and its data

  Config keys are those of POST /v1/topics in docs/http-api.md, e.g. --config retention_ms=86400000.
  In a cluster, each partition's leader, replicas and in-sync replicas: es-broker cluster status
  --topic TOPIC (describe shows offsets and config, as GET /v1/topics/TOPIC does).
  alter speaks the broker's HTTP API (PATCH /v1/topics/TOPIC), as keys --url does: --url names
  the broker's HTTP address (default ${topicsUrlDefault}, the broker's --http-port), with
  the API key and TLS options below; the TCP protocol has no call to change a config.
  Retention measures the records' own timestamps, which producers set; where producers send
  old or buffered data, add --config timestamp_type=log_append_time (the broker's clock).

Options:
  --broker HOST:PORT[,…]   broker TCP address (default ${brokerDefault}); in a cluster any
                           broker, or several: the first that answers, then each partition's leader
${connectionHelp}
  --timeout-ms N           how long one request waits for an answer before the command fails
                           (default 30000)
  --url URL                alter: the broker's HTTP address (default ${topicsUrlDefault})
  --json                   describe: print JSON (what describe always prints)
  -h, --help               show this help
`;

/** What a client command needs to reach the broker: `--broker` and the connection options. */
export type BrokerValues = ConnectionValues & { broker?: string; "timeout-ms"?: string };

/** The `--broker` list: `HOST:PORT[,HOST:PORT…]`. @throws UsageError naming a bad entry. */
function brokerList(values: BrokerValues): { host: string; port: number }[] {
  return (values.broker ?? brokerDefault)
    .split(",")
    .map((b) => b.trim())
    .filter((b) => b !== "")
    .map((b) => hostPort("broker", b));
}

/**
 * Connects (over TLS, authenticated) as the command's options say (`connection.ts`) through a
 * {@link ClusterClient}: the first `--broker` that answers, then, in a cluster, each partition's
 * leader. `client` is the broker for everything not routed by partition: any live broker, or
 * with `groups` the group coordinator (the controller in a cluster). Close with `cluster.close()`.
 */
export async function connectRouted(
  values: BrokerValues,
  groups = false,
): Promise<{ cluster: ClusterClient; client: TcpClient; routed: boolean }> {
  let toldAt = Number.NEGATIVE_INFINITY;
  const cluster = await ClusterClient.connect({
    bootstrap: brokerList(values),
    apiKey: readApiKey(values),
    tls: clientTlsOptions(values),
    timeoutMs: intOption("timeout-ms", values["timeout-ms"], clientTimeoutMsDefault, 1, 3_600_000),
    // A cluster's refusals a retry fixes (no leader yet, ISR below its minimum) and lost
    // connections to its brokers can last long: say so on stderr, at most every 5 s, rather
    // than wait in silence (newuser15 #4).
    onRetry: (err) => {
      if (!(err instanceof ClientError)) return;
      const now = performance.now();
      if (now - toldAt < 5000) return;
      toldAt = now;
      process.stderr.write(
        err.tcp === -1
          ? `es-broker: connection to a broker lost (${err.message}): reading the cluster's metadata again and retrying\n`
          : `es-broker: the broker answered ${err.code} (${err.message}): retrying\n`,
      );
    },
  });
  try {
    return {
      cluster,
      client: await (groups ? cluster.coordinator() : cluster.any()),
      routed: cluster.metadata !== null,
    };
  } catch (err) {
    await cluster.close();
    throw err;
  }
}

function indexOfBytes(haystack: Uint8Array, needle: Uint8Array, from: number, end: number): number {
  if (needle.length === 0) return -1;
  outer: for (let i = from; i + needle.length <= end; i++) {
    for (let j = 0; j < needle.length; j++) if (haystack[i + j] !== needle[j]) continue outer;
    return i;
  }
  return -1;
}

/** `es-broker produce TOPIC`. */
export async function produce(argv: string[]): Promise<number> {
  const { values, positionals } = parseCli({
    args: argv,
    options: {
      broker: { type: "string" },
      ...connectionOptions,
      "timeout-ms": { type: "string" },
      partition: { type: "string" },
      "key-separator": { type: "string" },
      "batch-records": { type: "string" },
      "linger-ms": { type: "string" },
      "producer-id": { type: "string" },
      "producer-epoch": { type: "string" },
      "max-in-flight": { type: "string" },
      "reconnect-timeout-ms": { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
    allowPositionals: true,
  });
  if (values.help) {
    process.stdout.write(produceHelp);
    return 0;
  }
  if (positionals.length !== 1) throw new UsageError("produce needs exactly one TOPIC");
  const topic = positionals[0];
  const partition = intOption("partition", values.partition, -1, 0, 4095);
  const batchRecords = intOption("batch-records", values["batch-records"], 1000, 1, 100_000);
  const lingerMs = intOption("linger-ms", values["linger-ms"], 100, 0, 3_600_000);
  const separator = values["key-separator"] === undefined ? null : utf8(values["key-separator"]);
  if (separator !== null && separator.length === 0)
    throw new UsageError("--key-separator must not be empty");
  const producerId = values["producer-id"];
  if (values["producer-epoch"] !== undefined && producerId === undefined)
    throw new UsageError("--producer-epoch needs --producer-id");
  if (values["max-in-flight"] !== undefined && producerId === undefined)
    throw new UsageError("--max-in-flight needs --producer-id");
  const maxInFlight = intOption(
    "max-in-flight",
    values["max-in-flight"],
    producerInFlightDefault,
    1,
    producerBatchesRemembered,
  );
  // Without --producer-epoch the producer asks the broker for the next epoch at its first batch
  // (docs/decisions.md §20), or takes the Unix second from a broker without producer epochs.
  const producerEpoch =
    values["producer-epoch"] === undefined
      ? undefined
      : intOption("producer-epoch", values["producer-epoch"], 0, 0, 0x7fff_ffff);
  const { cluster, client, routed } = await connectRouted(values);
  const idempotent =
    producerId === undefined
      ? null
      : new IdempotentProducer({
          connect: () => connectRouted(values).then((c) => c.client),
          router: routed ? cluster : undefined,
          producerId,
          epoch: producerEpoch,
          maxInFlight,
        });
  // Idempotent batches go to one partition each: records are grouped by the partition the
  // broker would pick (murmur2 of the key, or of the producer id for keyless records). In a
  // cluster every batch goes to its partition's leader, so the client picks as the broker would
  // (keyless batches round-robin).
  let partitionCount = 1;
  try {
    if ((idempotent !== null || routed) && partition < 0)
      partitionCount = (await client.metadata([topic]))[0].partitions.length;
  } catch (err) {
    await idempotent?.close();
    await cluster.close();
    throw err;
  }
  let roundRobin = 0;
  const idBytes = utf8(producerId ?? "");
  const inFlight: Promise<unknown>[] = [];
  /** Each partition's last batch sent, settled (never rejects): what its next batch's retries wait for. */
  const lastOnPartition = new Map<number, Promise<void>>();
  // Each batch keeps the input line numbers of its records, so a failure names the line, and the
  // produced lines (acknowledged batches) can be told apart from those that were not.
  const builders = new Map<number, { b: EntryBatchBuilder; lines: number[] }>();
  const produced = new ProducedLines();
  let buffered = 0;
  let bufferedBytes = 0;
  let total = 0;
  // Plain produce to one broker: the connection batches go out on, replaced by a new one when
  // it is lost (`reconnect.ts`) before the next batch is sent. Only batches that never left go
  // on the new one: a batch whose answer was lost may be stored, and the command ends on it
  // (`ProducedLines.explain`); --producer-id resends such a batch without a duplicate.
  let connection = { cluster, client };
  const reconnectTimeoutMs = reconnectTimeout(values, false);
  const ensureConnected = async (lines: number[]) => {
    if (idempotent !== null || routed || !connection.client.closed) return;
    // The answers of batches sent on the lost connection decide first: one that never came ends
    // the command here, before anything after it is sent.
    for (const outcome of await Promise.allSettled(inFlight))
      if (outcome.status === "rejected") throw outcome.reason;
    const lost = ClientError.connectionClosed("Connection to the broker closed");
    if (reconnectTimeoutMs === 0) throw new FailedBatch(lost, lines, false);
    await connection.cluster.close();
    let next: Awaited<ReturnType<typeof connectRouted>> | null;
    try {
      // A stop signal does not end the retries: the lines read are still to be sent (a second
      // signal exits at once, `signals.ts`).
      next = await reconnect(() => connectRouted(values), {
        cause: lost,
        timeoutMs: reconnectTimeoutMs,
        stopped: () => false,
      });
    } catch (err) {
      throw new FailedBatch(err, lines, false);
    }
    if (next === null) throw new FailedBatch(lost, lines, false);
    connection = { cluster: next.cluster, client: next.client };
  };
  const sendOne = async (p: number, { b, lines }: { b: EntryBatchBuilder; lines: number[] }) => {
    await ensureConnected(lines);
    const batch = b.build();
    total += batch.count;
    const target = p >= 0 || !routed ? p : roundRobin++ % partitionCount;
    // A refusal that stored nothing (a full disk's storage_error, ...) is retried, the same batch
    // to the same partition, until --reconnect-timeout-ms; the idempotent producer retries its own.
    // A retry waits until the batch before it on that partition is settled, so refused batches
    // go again in the order their lines were read (a later batch's retry never overtakes).
    const before = lastOnPartition.get(target) ?? Promise.resolve();
    let attempts = 0;
    const produceNow = () =>
      routed
        ? cluster.produce(topic, batch, { partition: target })
        : connection.client.produce(topic, batch, { partition: target });
    const request =
      idempotent !== null
        ? idempotent.send(topic, batch, { partition: p })
        : retryRefusals(() => (attempts++ === 0 ? produceNow() : before.then(produceNow)), {
            what: `the batch of ${lines.length === 1 ? `line ${lines[0]}` : `lines ${lines[0]}–${lines[lines.length - 1]}`}`,
            timeoutMs: reconnectTimeoutMs,
          });
    const sent = (request as Promise<unknown>).then(
      () => produced.add(lines),
      (err: unknown) => Promise.reject(new FailedBatch(err, lines)),
    );
    sent.catch(() => {}); // awaited below; this only keeps an early rejection from counting as unhandled
    lastOnPartition.set(
      target,
      sent.then(
        () => {},
        () => {},
      ),
    );
    inFlight.push(sent);
    if (inFlight.length >= 8) await inFlight.shift();
  };
  // Sends run one after another (the linger timer and the read loop both start them), so each
  // partition's batches go out in the order their lines were read.
  let sending: Promise<void> = Promise.resolve();
  let linger: ReturnType<typeof setTimeout> | null = null;
  // A send the linger timer started that fails ends the read loop at once (stdin may stay quiet for long).
  let onLingerFailure: (err: unknown) => void = () => {};
  const lingerFailure = new Promise<never>((_, reject) => (onLingerFailure = reject));
  lingerFailure.catch(() => {});
  const send = (): Promise<void> => {
    if (linger !== null) clearTimeout(linger);
    linger = null;
    const all = [...builders];
    builders.clear();
    buffered = 0;
    bufferedBytes = 0;
    sending = sending.then(async () => {
      for (const [p, entry] of all) if (entry.b.count > 0) await sendOne(p, entry);
    });
    return sending;
  };
  const armLinger = () => {
    if (buffered === 0 || linger !== null) return;
    linger = setTimeout(() => {
      linger = null;
      send().catch(onLingerFailure);
    }, lingerMs);
  };
  const builderFor = (key: Uint8Array | null): { b: EntryBatchBuilder; lines: number[] } => {
    const p =
      partition >= 0 || (idempotent === null && (!routed || key === null))
        ? partition
        : partitionForKey(key ?? idBytes, partitionCount);
    let b = builders.get(p);
    if (b === undefined) {
      b = { b: new EntryBatchBuilder(64 * 1024), lines: [] };
      builders.set(p, b);
    }
    return b;
  };
  let lines = 0;
  // A line longer than any record can be is refused as soon as it is seen (even before its
  // newline arrives), naming the line rather than the record's place in some batch.
  const tooLong = (what: string) =>
    new Error(
      `line ${lines + 1} of standard input is ${what}, over the limit of ${recordPayloadBytesMax} bytes (8 MiB) for one record's key and value`,
    );
  const checkPartialLine = (length: number) => {
    if (length > recordPayloadBytesMax + (separator?.length ?? 0))
      throw tooLong(`at least ${length} bytes`);
  };
  const addLine = (line: Uint8Array) => {
    const at = separator === null ? -1 : indexOfBytes(line, separator, 0, line.length);
    const payload = at < 0 ? line.length : line.length - separator!.length;
    if (payload > recordPayloadBytesMax) throw tooLong(`${payload} bytes of key and value`);
    lines++;
    buffered++;
    bufferedBytes += line.length + 16;
    if (at < 0) {
      const to = builderFor(null);
      to.b.add(null, line);
      to.lines.push(lines);
    } else {
      const key = line.subarray(0, at);
      const to = builderFor(key);
      to.b.add(key, line.subarray(at + separator!.length));
      to.lines.push(lines);
    }
  };
  // SIGINT / SIGTERM: stop reading, send what was read, wait for the acks (`signals.ts`).
  let interrupted: StopSignal | null = null;
  let onInterrupt: () => void = () => {};
  const interruption = new Promise<null>((resolve) => (onInterrupt = () => resolve(null)));
  const signals = onStopSignals((signal) => {
    interrupted = signal;
    onInterrupt();
  });
  const summary = () =>
    `produced ${plural(total, "record")} to "${topic}"${idempotent !== null ? ` as producer "${producerId}" (epoch ${idempotent.epoch}${idempotent.epochSource === "broker" ? ", handed out by the broker" : ""})` : ""}`;
  try {
    // The start of a line not yet ended, chunk by chunk: joined once, when its newline comes, and
    // only each new chunk searched for one (a long line read in 64 KiB chunks stays linear).
    let carry: Uint8Array[] = [];
    let carryBytes = 0;
    const chunks = (process.stdin as AsyncIterable<Uint8Array>)[Symbol.asyncIterator]();
    while (interrupted === null) {
      const next = chunks.next();
      next.catch(() => {}); // left pending when a signal wins the race
      const read = await Promise.race([next, interruption, lingerFailure]);
      if (read === null || read.done === true) break;
      const chunk = read.value;
      let start = 0;
      for (;;) {
        const nl = chunk.indexOf(0x0a, start);
        if (nl < 0) break;
        const end = chunk.slice(start, nl);
        addLine(carryBytes > 0 ? concatBytes([...carry, end]) : end);
        carry = [];
        carryBytes = 0;
        start = nl + 1;
        if (buffered >= batchRecords || bufferedBytes >= 1024 * 1024) await send();
      }
      if (start < chunk.length) {
        carry.push(chunk.slice(start));
        carryBytes += chunk.length - start;
      }
      checkPartialLine(carryBytes);
      if (lingerMs === 0) await send();
      else armLinger();
    }
    if (interrupted !== null) {
      process.stdin.destroy();
      if (carryBytes > 0)
        process.stderr.write(
          `es-broker: ${interrupted}: not sending an incomplete last line (${carryBytes} bytes without a newline)\n`,
        );
    } else if (carryBytes > 0) addLine(concatBytes(carry));
    await send();
    await Promise.all(inFlight);
    process.stderr.write(
      `es-broker: ${interrupted !== null ? `${interrupted}: stopped reading; ` : ""}${summary()}\n`,
    );
    return 0;
  } catch (err) {
    if (!(err instanceof FailedBatch)) throw err;
    // Batches sent with the failing one may still be stored: their answers decide what was
    // produced, and those that failed uncertainly are named as maybe stored (attack15b F1).
    const others = (await Promise.allSettled(inFlight)).flatMap((o) =>
      o.status === "rejected" && o.reason instanceof FailedBatch && o.reason !== err
        ? [o.reason]
        : [],
    );
    throw produced.explain(err, others);
  } finally {
    if (linger !== null) clearTimeout(linger);
    signals.dispose();
    await idempotent?.close();
    await connection.cluster.close();
    // A clock epoch (a broker without producer epochs) is the second the run started in. A second
    // run of the same id within it would share the epoch and restart at sequence 0, so the broker
    // would take its batches for resends of this run's: an identical one silently not stored
    // again, another refused as duplicate_sequence. Ending only after that second gives the next
    // run here a higher epoch. An epoch the broker handed out needs no wait: the next run's is
    // higher whatever the clock says.
    if (idempotent !== null && idempotent.epochSource === "clock" && total > 0) {
      const wait = (idempotent.epoch + 1) * 1000 - Date.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    }
    // Deno keeps the process alive for the stdin read that the signal interrupted (destroy() does
    // not cancel it): exit once the exit code is set, if nothing else ends the process first.
    if (interrupted !== null) setTimeout(() => process.exit(), 100).unref?.();
  }
}

/** A produce request of `es-broker produce` that failed, with the input lines of its records. */
export class FailedBatch extends Error {
  /**
   * @param sent false for a batch that never left (no connection to send it on): nothing of it
   *   can be stored.
   */
  constructor(
    readonly error: unknown,
    readonly lines: number[],
    readonly sent = true,
  ) {
    super("a batch failed");
  }
}

/** Most ranges of produced lines kept for the failure message (keyed lines scatter over many). */
const producedRangesMax = 64;

/** Input lines of `es-broker produce` whose batches the broker acknowledged, as merged ranges. */
export class ProducedLines {
  count = 0;
  /** Sorted, disjoint, non-adjacent [first, last] line ranges; null once over producedRangesMax. */
  #ranges: [number, number][] | null = [];

  /** Records the input lines of an acknowledged batch (1-based line numbers). */
  add(lines: number[]): void {
    this.count += lines.length;
    for (const line of lines) {
      const ranges = this.#ranges;
      if (ranges === null) return;
      const last = ranges.at(-1);
      if (last !== undefined && line === last[1] + 1) last[1] = line;
      else if (last === undefined || line > last[1]) ranges.push([line, line]);
      else this.#insert(ranges, line);
      if (ranges.length > producedRangesMax) this.#ranges = null;
    }
  }

  #insert(ranges: [number, number][], line: number): void {
    let i = ranges.findIndex((r) => r[1] + 1 >= line);
    const r = ranges[i];
    if (line >= r[0] - 1 && line <= r[1] + 1) {
      r[0] = Math.min(r[0], line);
      r[1] = Math.max(r[1], line);
      const next = ranges[i + 1];
      if (next !== undefined && next[0] === r[1] + 1) {
        r[1] = next[1];
        ranges.splice(i + 1, 1);
      }
      const prev = ranges[i - 1];
      if (prev !== undefined && prev[1] + 1 === r[0]) {
        prev[1] = r[1];
        ranges.splice(i, 1);
      }
      return;
    }
    if (i < 0) i = ranges.length;
    ranges.splice(i, 0, [line, line]);
  }

  /**
   * The error `es-broker produce` ends with when a batch failed: the broker's error, naming the
   * input line (the failing record's, or the batch's lines), then what was produced before it,
   * and the lines of `others` (batches in flight that failed too) that may be stored as well.
   */
  explain(failed: FailedBatch, others: readonly FailedBatch[] = []): Error {
    const err = failed.error;
    const lines = failed.lines;
    const index = err instanceof ClientError ? err.details?.record_index : undefined;
    const line = typeof index === "number" ? lines[index] : undefined;
    const span = (a: number, b: number) => (a === b ? `line ${a}` : `lines ${a}–${b}`);
    // Nothing produced and no line to name (e.g. topic_not_found): the broker's error says it all.
    if (line === undefined && this.count === 0 && err instanceof Error) return err;
    const batchSpan = span(lines[0], lines[lines.length - 1]);
    const were = this.count === 1 ? "was" : "were";
    let message = err instanceof Error ? err.message : String(err);
    let where: string;
    if (line !== undefined) {
      where = `line ${line} of standard input`;
      // The broker counts records within its request (this batch) and speaks of that request only.
      message = message
        .replace(`record ${index} `, "the line's ")
        .replace(/; nothing was appended$/, `; nothing of its batch (${batchSpan}) was appended`);
    } else where = `the batch of ${batchSpan} of standard input`;
    const lost = failed.sent && isAnswerLost(err);
    // Refused after the leader appended it (cluster mode): as uncertain as a lost answer.
    const appended = failed.sent && !lost && mayBeStored(err);
    const uncertain = lost || appended;
    const ranges = this.#ranges;
    let before: string;
    if (this.count === 0) before = "no records were produced";
    else if (ranges !== null && ranges.length === 1 && ranges[0][0] === 1)
      before = `${plural(this.count, "record")} (${span(1, ranges[0][1])}) ${were} produced before it, none from line ${ranges[0][1] + 1} on`;
    else
      before = `${plural(this.count, "record")} ${were} produced${
        ranges === null
          ? ""
          : ` (${ranges.map(([a, b]) => span(a, b).replace(/^lines? /, "")).join(", ")} of the input)`
      }, no other lines`;
    if (uncertain) {
      // The answer was lost: the batch may be stored. Resending it could store it twice, so the
      // command ends here, naming the first line a resend must start from.
      const first = lines[0];
      where = `line ${first} of standard input`;
      const what = appended
        ? `its batch (${batchSpan}) was refused after the leader had appended it (${message})`
        : `the acknowledgement of its batch (${batchSpan}) was lost (${message})`;
      message = `${what}: that batch may or may not be stored, so it is not sent again; check the topic before sending from line ${first} again (produce --producer-id resends without duplicates), and the rest of standard input was not read`;
      before = before.replace(/, none from line \d+ on$/, "");
    } else if (!failed.sent) message += ` (the batch of ${batchSpan} was not sent)`;
    // Other batches in flight that failed after they were sent may be stored as well.
    const maybe = others
      .filter((o) => o.sent && (isAnswerLost(o.error) || mayBeStored(o.error)))
      .flatMap((o) => o.lines)
      .sort((a, b) => a - b);
    if (maybe.length > 0) {
      const ranges: [number, number][] = [];
      for (const line of maybe) {
        const last = ranges.at(-1);
        if (last !== undefined && line === last[1] + 1) last[1] = line;
        else ranges.push([line, line]);
      }
      before += `; ${plural(maybe.length, "line")} of other batches in flight (${ranges.map(([a, b]) => span(a, b).replace(/^lines? /, "")).join(", ")}) failed the same way and may be stored too`;
    }
    message = `${where}: ${message}; ${before}`;
    return err instanceof ClientError
      ? new ClientError(err.code, err.tcp, err.retriable, message, {
          cause: err,
          details: err.details,
        })
      : new Error(message, { cause: err });
  }
}

/** Partitions `consume` reads at once without --follow (with --follow: all of them). */
const consumeReadersMax = 8;
/** Bytes of fetch answers `consume` may hold, over the partitions it reads at once (two each). */
const consumeBytesBudget = 32 * 1024 * 1024;
/** Bounds of one `consume` fetch's max_bytes, whatever the partition count. */
const consumeFetchBytesMin = 64 * 1024;
const consumeFetchBytesMax = 2 * 1024 * 1024;
/** max_records of one `consume` fetch: max_bytes bounds an answer first for records over ~100 B. */
const consumeFetchRecordsMax = 20_000;

/**
 * The lines `consume` prints for the records of one fetch answer, in one buffer (one write to
 * stdout per answer, not four per record): `[KEY SEP] VALUE \n` per record, records at or past
 * `stopAt` (when not null) left out, at most `limit` records.
 */
function encodeRecords(
  r: FetchResponse,
  separator: Uint8Array | null,
  stopAt: number | null,
  limit: number,
): { bytes: Uint8Array; count: number } {
  const end = stopAt ?? Number.MAX_SAFE_INTEGER;
  const sep = separator?.length ?? 0;
  let size = 0;
  let count = 0;
  for (const c = r.cursor(); count < limit && c.next() && c.offset < end; count++)
    size += (separator !== null && c.keyLength > 0 ? c.keyLength : 0) + sep + c.valueLength + 1;
  const bytes = new Uint8Array(size);
  let at = 0;
  let n = 0;
  for (const c = r.cursor(); n < count && c.next(); n++) {
    if (separator !== null) {
      const key = c.key();
      if (key !== null) {
        bytes.set(key, at);
        at += key.length;
      }
      bytes.set(separator, at);
      at += sep;
    }
    bytes.set(c.value(), at);
    at += c.valueLength;
    bytes[at++] = 0x0a;
  }
  return { bytes, count };
}

/** One connection of `consume`: its client, and where records come from (leaders in a cluster). */
interface ConsumeSession {
  cluster: ClusterClient;
  client: TcpClient;
  data: Pick<TcpClient, "fetch" | "listOffsets">;
}

/** Connects `consume` (`connectRouted`). @throws ClientError as {@link connectRouted}. */
async function consumeSession(values: BrokerValues): Promise<ConsumeSession> {
  const { cluster, client, routed } = await connectRouted(values);
  return { cluster, client, data: routed ? cluster : client };
}

/**
 * `--reconnect-timeout-ms` in ms: the value given (0: do not reconnect), else none (null: until
 * stopped) for a command that runs until stopped (`consume --follow`) and
 * {@link reconnectTimeoutMsDefault} for the others.
 * @throws UsageError for a value that is not an integer from 0 to 2^31 − 1.
 */
function reconnectTimeout(
  values: { "reconnect-timeout-ms"?: string },
  untilStopped: boolean,
): number | null {
  if (values["reconnect-timeout-ms"] === undefined)
    return untilStopped ? null : reconnectTimeoutMsDefault;
  return intOption("reconnect-timeout-ms", values["reconnect-timeout-ms"], 0, 0, 0x7fff_ffff);
}

/**
 * Where `consume --offset` starts: an offset (a number, one partition), `"earliest"` (each
 * partition's log start offset), `"latest"` (its high watermark), `{ last: N }` for `-N` (N
 * records before the high watermark, not before the log start: kcat's `-o -N`), or null when
 * not given.
 * @throws UsageError for anything else.
 */
function consumeStart(
  value: string | undefined,
): number | "earliest" | "latest" | { last: number } | null {
  if (value === undefined) return null;
  if (value === "earliest" || value === "latest") return value;
  const m = /^(-?)(\d+)$/.exec(value);
  const n = m === null ? Number.NaN : Number(m[2]);
  if (m === null || !Number.isSafeInteger(n) || (m[1] === "-" && n === 0))
    throw new UsageError(
      `--offset must be an offset (an integer from 0), earliest, latest or -N (the last N records of each partition, N from 1), got ${JSON.stringify(value)}`,
    );
  return m[1] === "-" ? { last: n } : n;
}

/** `es-broker consume TOPIC`. */
export async function consume(argv: string[]): Promise<number> {
  const { values, positionals } = parseCli({
    args: argv,
    options: {
      broker: { type: "string" },
      ...connectionOptions,
      "timeout-ms": { type: "string" },
      "from-beginning": { type: "boolean", default: false },
      offset: { type: "string" },
      partition: { type: "string" },
      follow: { type: "boolean", default: false },
      "key-separator": { type: "string" },
      "max-records": { type: "string" },
      group: { type: "string" },
      "session-timeout": { type: "string" },
      "reconnect-timeout-ms": { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
    allowPositionals: true,
  });
  if (values.help) {
    process.stdout.write(consumeHelp);
    return 0;
  }
  if (values.group !== undefined) {
    if (values.partition !== undefined || values.offset !== undefined)
      throw new UsageError(
        "--group assigns partitions and offsets itself: not with --partition or --offset",
      );
    if (positionals.length !== 1) throw new UsageError("consume needs exactly one TOPIC");
    return consumeGroup({
      topic: positionals[0],
      group: values.group,
      connection: values,
      fromBeginning: values["from-beginning"] === true,
      follow: values.follow === true,
      separator: values["key-separator"] === undefined ? null : utf8(values["key-separator"]),
      maxRecords: intOption(
        "max-records",
        values["max-records"],
        Number.MAX_SAFE_INTEGER,
        1,
        Number.MAX_SAFE_INTEGER,
      ),
      sessionTimeoutMs: intOption(
        "session-timeout",
        values["session-timeout"],
        10_000,
        100,
        3_600_000,
      ),
      reconnectTimeoutMs: reconnectTimeout(values, values.follow === true),
    });
  }
  if (positionals.length !== 1) throw new UsageError("consume needs exactly one TOPIC");
  const topic = positionals[0];
  const onlyPartition = intOption("partition", values.partition, -1, 0, 4095);
  const start = consumeStart(values.offset);
  const startOffset = typeof start === "number" ? start : -1;
  if (startOffset >= 0 && onlyPartition < 0)
    throw new UsageError(
      "--offset N needs --partition (earliest, latest and -N apply to each partition)",
    );
  if (values.offset !== undefined && values["from-beginning"])
    throw new UsageError("give --offset or --from-beginning, not both");
  const maxRecords = intOption(
    "max-records",
    values["max-records"],
    Number.MAX_SAFE_INTEGER,
    1,
    Number.MAX_SAFE_INTEGER,
  );
  const separator = values["key-separator"] === undefined ? null : utf8(values["key-separator"]);
  const reconnectTimeoutMs = reconnectTimeout(values, values.follow === true);
  // Records come from each partition's leader in a cluster (`data`), else from the one broker.
  // A lost connection is replaced by a new one (`reconnect.ts`): `session` is the current one.
  let session = await consumeSession(values);
  // SIGINT / SIGTERM (`signals.ts`): closing the connections ends the long-polls; the batches
  // already received are printed, then the command exits 0.
  const signals = onStopSignals(() => void session.cluster.close());
  const stopped = (err: unknown) =>
    signals.received !== null &&
    err instanceof ClientError &&
    err.code === ClientErrorCodes.connectionClosed;
  let printed = 0;
  try {
    const [description] = await session.client.metadata([topic]);
    const partitions =
      onlyPartition >= 0 ? [onlyPartition] : description.partitions.map((p) => p.partition);
    // The topic's state, not the command line, is what is wrong: a failure (exit 1), not usage.
    if (onlyPartition >= description.partitions.length)
      throw new Error(
        `Cannot consume partition ${onlyPartition} of topic "${topic}": it has ${plural(description.partitions.length, "partition")} (0 to ${description.partitions.length - 1})`,
      );
    if (startOffset >= 0) {
      // Checked here, so that with or without --follow an offset outside the log fails the same way.
      const { logStartOffset, highWatermark } = await session.data.listOffsets({
        topic,
        partition: onlyPartition,
      });
      if (startOffset > highWatermark || startOffset < logStartOffset) {
        const where =
          startOffset > highWatermark
            ? `past the high watermark ${highWatermark}`
            : `before the log start offset ${logStartOffset}`;
        throw new Error(
          `Cannot consume partition ${onlyPartition} of topic "${topic}" from offset ${startOffset}: it is ${where} (give an offset from ${logStartOffset} to ${highWatermark})`,
        );
      }
    }
    // Every partition is read at once (up to `consumeReadersMax` without --follow), each one fetch
    // ahead, in large answers: a round trip per 1 000 records, one partition after another, was
    // most of the wall time on a loaded machine (docs/benchmarks.md "The CLI consumer and the
    // client reader against kcat (2026-12-02, 11:58–12:01 UTC)").
    const concurrent = values.follow
      ? partitions.length
      : Math.min(consumeReadersMax, partitions.length);
    const maxBytes = Math.max(
      consumeFetchBytesMin,
      Math.min(consumeFetchBytesMax, Math.floor(consumeBytesBudget / concurrent)),
    );
    const fetchRecords = Math.min(consumeFetchRecordsMax, maxRecords);
    // Per partition, the next offset not printed and (without --follow) where reading ends: kept
    // over a reconnect, so a new connection resumes where the printing stopped.
    const positions = new Map<number, { offset: number; stopAt: number | null }>();
    const readAll = async (current: ConsumeSession) => {
      const data = current.data;
      let finished = false;
      const readPartition = async (partition: number) => {
        let position = positions.get(partition);
        if (position === undefined) {
          const info = await data.listOffsets({ topic, partition });
          position = {
            offset:
              typeof start === "number"
                ? start
                : start === "earliest" || values["from-beginning"]
                  ? info.logStartOffset
                  : start === "latest" || start === null
                    ? info.highWatermark
                    : Math.max(info.logStartOffset, info.highWatermark - start.last),
            // Without --follow: up to the high watermark when it started reading.
            stopAt: values.follow ? null : info.highWatermark,
          };
          positions.set(partition, position);
        }
        const { stopAt } = position;
        let offset = position.offset;
        const more = (at: number) =>
          !finished &&
          printed < maxRecords &&
          signals.received === null &&
          (stopAt === null || at < stopAt);
        const issue = (at: number) => {
          const answer = data.fetch({
            topic,
            partition,
            offset: at,
            maxRecords: stopAt === null ? fetchRecords : Math.min(fetchRecords, stopAt - at),
            maxBytes,
            waitMs: stopAt === null ? 30_000 : 0,
          });
          // Left pending when the read stops early (a signal, --max-records, another's failure).
          answer.catch(() => {});
          return answer;
        };
        let pending = more(offset) ? issue(offset) : null;
        while (pending !== null) {
          let r: FetchResponse;
          try {
            r = await pending;
          } catch (err) {
            if (stopped(err)) return;
            throw err;
          }
          const empty = r.recordCount === 0 && r.nextOffset <= offset;
          offset = r.nextOffset;
          // The next fetch goes out before these records are printed.
          pending = more(offset) && !(stopAt !== null && empty) ? issue(offset) : null;
          const chunk = encodeRecords(r, separator, stopAt, maxRecords - printed);
          if (chunk.count > 0) {
            printed += chunk.count;
            await writeOut(chunk.bytes);
          }
          position.offset = offset;
        }
      };
      // The first failure stops the other readers (closing the connection ends their
      // long-polls), and is thrown only once they have all ended: none may print after a new
      // connection has started reading from the positions.
      let failure: { error: unknown } | null = null;
      const settle = async (reading: Promise<void>) => {
        try {
          await reading;
        } catch (error) {
          if (failure !== null) return;
          failure = { error };
          finished = true;
          await current.cluster.close();
        }
      };
      try {
        if (values.follow) {
          await Promise.all(partitions.map((p) => settle(readPartition(p))));
        } else {
          const queue = [...partitions];
          const worker = async () => {
            for (let p = queue.shift(); p !== undefined; p = queue.shift()) await readPartition(p);
          };
          await Promise.all(Array.from({ length: concurrent }, () => settle(worker())));
        }
      } finally {
        finished = true;
      }
      if (failure !== null) throw (failure as { error: unknown }).error;
    };
    for (;;) {
      try {
        await readAll(session);
        break;
      } catch (err) {
        if (stopped(err) || !isReconnectable(err) || reconnectTimeoutMs === 0) throw err;
        await session.cluster.close();
        const next = await reconnect(() => consumeSession(values), {
          cause: err,
          timeoutMs: reconnectTimeoutMs,
          stopped: () => signals.received !== null,
        });
        if (next === null) break;
        session = next;
        if (signals.received !== null) break;
      }
    }
    await flushOut();
    return 0;
  } catch (err) {
    if (!stopped(err)) throw err;
    await flushOut();
    return 0;
  } finally {
    signals.dispose();
    await session.cluster.close();
  }
}

/**
 * `es-broker consume TOPIC --group G`: prints the records of the partitions the group assigns,
 * committing after each printed batch (only once stdout has taken it), so a member that dies
 * loses nothing: the next owner starts at the last commit. SIGINT / SIGTERM commit and leave.
 */
async function consumeGroup(options: {
  topic: string;
  group: string;
  connection: BrokerValues;
  fromBeginning: boolean;
  follow: boolean;
  separator: Uint8Array | null;
  maxRecords: number;
  sessionTimeoutMs: number;
  /** How long to keep reconnecting after a lost connection, in ms (null: until stopped). */
  reconnectTimeoutMs: number | null;
}): Promise<number> {
  const newline = new Uint8Array([0x0a]);
  // SIGINT / SIGTERM (`signals.ts`): finish the batch in hand, commit it, leave the group, exit 0.
  const signals = onStopSignals(() => {});
  let cluster: ClusterClient | null = null;
  let consumer: GroupConsumer | null = null;
  // A member: connected to the group's coordinator and joined. After a lost connection the
  // command joins again through a new connection (`reconnect.ts`): the group's committed offsets,
  // which cover every record printed, say where each partition resumes.
  const join = async (memberId?: string) => {
    const connected = await connectRouted(options.connection, true);
    try {
      const member = await GroupConsumer.join({
        client: connected.client,
        router: connected.routed ? connected.cluster : undefined,
        group: options.group,
        topics: [options.topic],
        sessionTimeoutMs: options.sessionTimeoutMs,
        startFrom: options.fromBeginning ? "earliest" : "latest",
        memberId,
      });
      return { ...connected, member };
    } catch (err) {
      await connected.cluster.close();
      throw err;
    }
  };
  try {
    let joined = await join();
    cluster = joined.cluster;
    consumer = joined.member;
    let client = joined.client;
    let data: Pick<TcpClient, "listOffsets"> = joined.routed ? joined.cluster : joined.client;
    let printed = 0;
    // Set once caught up while other members hold partitions with records not consumed.
    let waitUntil: number | null = null;
    while (signals.received === null && printed < options.maxRecords) {
      try {
        const batches = await consumer.poll({ waitMs: 500 });
        // Per partition, the offset after the last record whose bytes stdout took (a write's
        // callback): when the reader goes away mid-batch (EPIPE) only those are committed.
        const upTo = new Map<string, number>();
        try {
          for (const batch of batches) {
            const key = GroupConsumer.partitionKey(batch);
            for (const record of batch.records) {
              if (printed >= options.maxRecords) break;
              if (options.separator !== null) {
                if (record.key !== null) await writeOut(record.key);
                await writeOut(options.separator);
              }
              await writeOut(record.value);
              await writeOut(newline, () => upTo.set(key, record.offset + 1));
              printed++;
            }
          }
          await flushOut();
        } catch (err) {
          if (!(err instanceof StdoutClosedError)) throw err;
          if (upTo.size > 0) await consumer.commit(upTo);
          throw err;
        }
        if (upTo.size > 0) await consumer.commit(upTo);
        if (!options.follow && batches.length === 0) {
          let caughtUp = true;
          for (const tp of consumer.assignments) {
            const position = consumer.position(tp);
            const { highWatermark } = await data.listOffsets(tp);
            if (position === undefined || position < highWatermark) caughtUp = false;
          }
          if (!caughtUp) continue;
          // Caught up on its own partitions. Records of the topic still unread in partitions other
          // members hold may belong to a member that died (its partitions move only when its
          // session ends): wait for that rebalance, as Kafka's consumer does, up to the longest
          // session timeout among them, then leave them to their (live) owners, saying so.
          const held = await heldElsewhere(client, options.group, options.topic, consumer.memberId);
          // A rebalance this member has not joined yet (its next heartbeat hears of it) may give it
          // more partitions: poll on.
          if (held.generation !== consumer.generation) continue;
          if (held.partitions.length === 0) break;
          const now = Date.now();
          const list = `${plural(held.partitions.length, "partition")} ${held.partitions.join(", ")}`;
          if (waitUntil === null) {
            waitUntil = now + held.sessionTimeoutMs + 1000;
            process.stderr.write(
              `es-broker: waiting up to ${waitUntil - now} ms for ${list} of "${options.topic}" (${held.lag} records not consumed), held by ${plural(held.members.length, "other member")} of group "${options.group}" (${held.members.join(", ")}): a member that died hands its partitions over when its session times out\n`,
            );
          } else if (now >= waitUntil) {
            process.stderr.write(
              `es-broker: leaving ${list} of "${options.topic}" (${held.lag} records not consumed) to ${plural(held.members.length, "member")} still in group "${options.group}" (${held.members.join(", ")}): they heartbeat, so they are alive and consume them\n`,
            );
            break;
          }
        }
      } catch (err) {
        if (!isReconnectable(err) || options.reconnectTimeoutMs === 0) throw err;
        // The same member joins again: the group (its members are kept over a broker restart)
        // leaves it its partitions, with no rebalance and no wait for its session to time out.
        const memberId = consumer.memberId;
        await consumer.close({ leave: false });
        await cluster.close();
        const next = await reconnect(() => join(memberId), {
          cause: err,
          timeoutMs: options.reconnectTimeoutMs,
          stopped: () => signals.received !== null,
          abandon: (late) =>
            void late.member
              .close({ leave: false })
              .finally(() => late.cluster.close())
              .catch(() => {}),
        });
        if (next === null) break;
        joined = next;
        cluster = joined.cluster;
        consumer = joined.member;
        client = joined.client;
        data = joined.routed ? joined.cluster : joined.client;
        waitUntil = null;
      }
    }
    return 0;
  } finally {
    signals.dispose();
    await consumer?.close();
    await cluster?.close();
  }
}

/**
 * The partitions of `topic` that members of `group` other than `memberId` hold with records not
 * yet consumed (lag > 0, or never committed with records in the partition), those members, the
 * records not consumed, the longest session timeout among those members (ms), and the group's
 * generation the description is of.
 */
async function heldElsewhere(
  client: TcpClient,
  group: string,
  topic: string,
  memberId: string,
): Promise<{
  generation: number;
  partitions: number[];
  members: string[];
  lag: number;
  sessionTimeoutMs: number;
}> {
  const g = await client.describeGroup(group);
  const partitions: number[] = [];
  const members = new Set<string>();
  let lag = 0;
  for (const o of g.offsets) {
    if (o.topic !== topic || o.owner === null || o.owner === memberId) continue;
    const behind = o.lag ?? (o.committed === null ? (o.highWatermark ?? 0) : 0);
    if (behind <= 0) continue;
    partitions.push(o.partition);
    members.add(o.owner);
    lag += behind;
  }
  const sessionTimeoutMs = Math.max(
    0,
    ...g.members.filter((m) => members.has(m.memberId)).map((m) => m.sessionTimeoutMs),
  );
  return { generation: g.generation, partitions, members: [...members], lag, sessionTimeoutMs };
}

/**
 * Per partition of `g`, how old the oldest record not yet consumed is (ms since its timestamp; 0
 * when caught up, null when unknown): one fetch of the record at the committed offset. A mirror's
 * lag in seconds (docs/edge.md) is this for its group `mirror.<name>`.
 */
async function lagMs(client: TcpClient, g: GroupDescription): Promise<(number | null)[]> {
  const now = Date.now();
  return await Promise.all(
    g.offsets.map(async (o) => {
      if (o.committed === null || o.lag === null) return null;
      if (o.lag === 0) return 0;
      try {
        const r = await client.fetch({
          topic: o.topic,
          partition: o.partition,
          offset: o.committed,
          maxRecords: 1,
        });
        const first = r.records[0];
        return first === undefined ? null : Math.max(0, now - first.timestampMs);
      } catch {
        return null;
      }
    }),
  );
}

/** `es-broker groups list|describe`. */
export async function groups(argv: string[]): Promise<number> {
  const { values, positionals } = parseCli({
    args: argv,
    options: {
      broker: { type: "string" },
      "lag-ms": { type: "boolean", default: false },
      topic: { type: "string" },
      partition: { type: "string" },
      "all-topics": { type: "boolean" },
      to: { type: "string" },
      "shift-by": { type: "string" },
      "to-datetime": { type: "string" },
      "by-duration": { type: "string" },
      "from-file": { type: "string" },
      execute: { type: "boolean", default: false },
      "dry-run": { type: "boolean", default: false },
      ...connectionOptions,
      "timeout-ms": { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
    allowPositionals: true,
  });
  const [action, name, ...rest] = positionals;
  // Before --help: `groups nonsense --help` is a usage error, not the help of a command.
  if (action !== undefined && !["list", "describe", "reset-offsets"].includes(action))
    throw new UsageError(
      `unknown groups action ${JSON.stringify(action)} (list, describe, reset-offsets)`,
    );
  if (values.help || positionals.length === 0) {
    process.stdout.write(groupsHelp);
    return values.help ? 0 : 2;
  }
  if (rest.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(rest[0])}`);
  if (action !== "list" && name === undefined)
    throw new UsageError(`groups ${action} needs a GROUP`);
  if (values.execute && values["dry-run"])
    throw new UsageError("give --dry-run (print the offsets) or --execute (commit them), not both");
  const reset = action === "reset-offsets" ? resetOptions(values, Date.now()) : null;
  const { cluster, client } = await connectRouted(values, true);
  try {
    if (reset !== null) {
      // Each partition's bounds from its leader (any broker's would be 0 in a cluster).
      const offsets = await planReset(
        { coordinator: client, data: cluster },
        name!,
        reset.scope,
        reset.to,
      );
      if (values.execute) await commitReset(client, name!, offsets);
      for (const o of offsets)
        process.stdout.write(`${name}\t${o.topic}\t${o.partition}\t${o.offset}\n`);
      if (!values.execute) {
        process.stderr.write(
          "es-broker: dry run: nothing was committed; add --execute to commit these offsets\n",
        );
        // Said in the dry run too, not only when --execute is refused.
        const members = await client
          .describeGroup(name!)
          .then((g) => g.members.length)
          .catch(() => 0);
        if (members > 0)
          process.stderr.write(
            `es-broker: group ${JSON.stringify(name)} has ${plural(members, "live member")}: --execute is refused until its consumers stop (or their sessions expire)\n`,
          );
      }
      return 0;
    }
    if (action === "list") {
      for (const g of await client.listGroups())
        process.stdout.write(
          `${g.group}\tgeneration ${g.generation}\t${plural(g.members.length, "member")}\n`,
        );
    } else {
      const g = await client.describeGroup(name!);
      const json = groupJson(g);
      if (values["lag-ms"]) {
        const lags = await lagMs(client, g);
        json.offsets = (json.offsets as Record<string, unknown>[]).map((o, i) => ({
          ...o,
          lag_ms: lags[i],
        }));
      }
      process.stdout.write(`${jsonText(json)}\n`);
    }
    return 0;
  } finally {
    await cluster.close();
  }
}

/**
 * Commits the reset offsets. The broker refuses a commit without a member while the group has
 * members (`unknown_member`); the refusal is re-thrown saying the fix, as Kafka's tool does.
 * @throws ClientError `unknown_member` naming the live members, or as `TcpClient.commitOffsets`.
 */
async function commitReset(
  client: TcpClient,
  group: string,
  offsets: { topic: string; partition: number; offset: number }[],
): Promise<void> {
  try {
    await client.commitOffsets({ group, offsets });
  } catch (err) {
    if (!(err instanceof ClientError) || err.code !== "unknown_member") throw err;
    const members = await client
      .describeGroup(group)
      .then((g) => g.members.length)
      .catch(() => null);
    throw new ClientError(
      err.code,
      err.tcp,
      err.retriable,
      `group ${JSON.stringify(group)} has ${members === null ? "live members" : plural(members, "live member")}: stop its consumers first, or wait out their sessions (reset-offsets works on an inactive group, as Kafka's kafka-consumer-groups does); nothing was committed`,
      { cause: err, details: err.details },
    );
  }
}

/** A topic or group as `topics` / `groups describe` print it: the HTTP API's JSON, indented. */
function jsonText(value: unknown): string {
  return JSON.stringify(value, null, 2);
}

/**
 * A `--config key=value` value as the JSON of `POST /v1/topics` takes it: an integer as a number,
 * `true` / `false` as booleans (`mirror_hold_retention`), `null` as null (removes an optional key),
 * anything else as the string itself (docs/http-api.md "`POST /v1/topics` — create a topic").
 */
export function configValue(raw: string): unknown {
  if (/^-?\d+$/.test(raw)) return Number(raw);
  if (raw === "true") return true;
  if (raw === "false") return false;
  if (raw === "null") return null;
  return raw;
}

/** `es-broker topics create|list|describe|delete`. */
export async function topics(argv: string[]): Promise<number> {
  const { values, positionals } = parseCli({
    args: argv,
    options: {
      broker: { type: "string" },
      ...connectionOptions,
      "timeout-ms": { type: "string" },
      partitions: { type: "string" },
      config: { type: "string", multiple: true },
      json: { type: "boolean", default: false },
      url: { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
    allowPositionals: true,
  });
  const [action, name, ...rest] = positionals;
  // Before --help: `topics nonsense --help` is a usage error, not the help of a command.
  if (action !== undefined && !["create", "list", "describe", "alter", "delete"].includes(action))
    throw new UsageError(
      `unknown topics action ${JSON.stringify(action)} (create, list, describe, alter, delete)`,
    );
  if (values.help || positionals.length === 0) {
    process.stdout.write(topicsHelp);
    return values.help ? 0 : 2;
  }
  if (rest.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(rest[0])}`);
  const needName = () => {
    if (name === undefined) throw new UsageError(`topics ${action} needs a TOPIC`);
    return name;
  };
  const config: Record<string, unknown> = {};
  for (const pair of values.config ?? []) {
    const eq = pair.indexOf("=");
    if (eq <= 0) throw new UsageError(`--config must be key=value, got ${JSON.stringify(pair)}`);
    config[pair.slice(0, eq)] = configValue(pair.slice(eq + 1));
  }
  const topicName = action === "list" ? "" : needName();
  if (values.json && action !== "describe")
    throw new UsageError("--json goes with topics describe (the other actions print one format)");
  if (values.url !== undefined && action !== "alter")
    throw new UsageError("--url goes with topics alter (the other actions take --broker)");
  if (action === "alter") return await alterTopic(topicName, config, values);
  const partitions = intOption("partitions", values.partitions, 1, 1, 4096);
  const { cluster, client } = await connectRouted(values);
  try {
    switch (action) {
      case "create": {
        const t = await client.createTopic({ name: topicName, partitions, config });
        process.stdout.write(`${jsonText(topicJson(t))}\n`);
        const rf = t.config.replication_factor;
        const minIsr = t.config.min_insync_replicas;
        // Said once, at creation: with no spare replica every restart refuses writes.
        if (typeof rf === "number" && typeof minIsr === "number" && rf > 1 && minIsr >= rf)
          process.stderr.write(
            `es-broker: note: topic "${topicName}" has min_insync_replicas ${minIsr} with replication_factor ${rf}: while any one replica restarts (each step of a rolling restart) its partitions refuse writes (not_enough_replicas); replication_factor ${minIsr + 1} keeps them writable\n`,
          );
        return 0;
      }
      case "list": {
        for (const t of await client.metadata([])) process.stdout.write(`${t.name}\n`);
        return 0;
      }
      case "describe": {
        const [t] = await client.metadata([topicName]);
        process.stdout.write(`${jsonText(topicJson(t))}\n`);
        return 0;
      }
      default: {
        await client.deleteTopic(topicName);
        process.stdout.write(`deleted topic "${topicName}"\n`);
        return 0;
      }
    }
  } finally {
    await cluster.close();
  }
}

/**
 * `es-broker topics alter TOPIC --config k=v …`: `PATCH /v1/topics/TOPIC` on the broker's HTTP
 * port (`--url`; docs/http-api.md), with the API key and TLS options; prints the topic's JSON.
 * @throws UsageError without `--config`, with `--broker` or `--partitions` (which alter does not
 *   take), or for a bad `--url`; Error `code: message` for the broker's refusal.
 */
async function alterTopic(
  topic: string,
  config: Record<string, unknown>,
  values: ConnectionValues & { url?: string; broker?: string; partitions?: string },
): Promise<number> {
  if (Object.keys(config).length === 0)
    throw new UsageError("topics alter needs at least one --config key=value");
  if (values.partitions !== undefined)
    throw new UsageError("topics alter changes config only: the partition count stays");
  if (values.broker !== undefined)
    throw new UsageError(
      `topics alter speaks the broker's HTTP API: give --url ${httpAddressHint(values, values.broker)} instead of --broker ${values.broker}`,
    );
  let base: URL;
  try {
    base = new URL(values.url ?? topicsUrlDefault);
  } catch {
    throw new UsageError(`--url must be a URL, got ${JSON.stringify(values.url)}`);
  }
  if (base.protocol !== "http:" && base.protocol !== "https:")
    throw new UsageError(`--url must be http:// or https://, got ${JSON.stringify(values.url)}`);
  const tls = clientTlsOptions(values) ?? {};
  if (base.protocol === "http:" && Object.keys(tls).length > 0)
    throw new UsageError("TLS options need an https:// --url");
  const answer = await requestJson(base, {
    method: "PATCH",
    path: `/v1/topics/${encodeURIComponent(topic)}`,
    body: { config },
    key: readApiKey(values),
    tls,
  });
  process.stdout.write(`${jsonText(answer)}\n`);
  return 0;
}
