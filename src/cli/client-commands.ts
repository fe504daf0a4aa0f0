/**
 * The kcat-like client commands: `produce`, `consume` and `topics`. They talk to a running broker
 * over the TCP protocol (`--broker host:port`, default 127.0.0.1:9092).
 */
import { parseArgs } from "node:util";
import { TcpClient } from "../client/client.ts";
import { EntryBatchBuilder } from "../storage/record.ts";
import { utf8 } from "../lib/bytes.ts";
import type { TopicDescription } from "../broker/types.ts";
import { UsageError, hostPort, intOption } from "./args.ts";

const brokerDefault = "127.0.0.1:9092";

/** Help text of `es-broker produce`. */
export const produceHelp = `Usage: es-broker produce TOPIC [options] < lines

Appends one record per line of standard input (the value is the line's bytes without the
newline; an empty line is a record with an empty value). Exits once every record is durable.

Options:
  --broker HOST:PORT       broker TCP address (default ${brokerDefault})
  --partition N            send every record to partition N (default: by key, else round-robin)
  --key-separator SEP      split each line at the first SEP into key and value
  --batch-records N        records per request (default 1000)
  -h, --help               show this help
`;

/** Help text of `es-broker consume`. */
export const consumeHelp = `Usage: es-broker consume TOPIC [options]

Writes each record's value and a newline to standard output. Without --follow it exits at the end
of the log (the high watermark when it started reading); with --follow it waits for new records.

Options:
  --broker HOST:PORT       broker TCP address (default ${brokerDefault})
  --from-beginning         start at each partition's log start offset
  --offset N               start at offset N (needs --partition)
  --partition N            read only partition N (default: all, partition by partition)
  --follow                 keep waiting for new records
  --key-separator SEP      print KEY SEP VALUE for each record (no key prints nothing before SEP)
  --max-records N          stop after N records
  -h, --help               show this help

Without --from-beginning or --offset it starts at the end of the log (new records only).
`;

/** Help text of `es-broker topics`. */
export const topicsHelp = `Usage: es-broker topics <create|list|describe|delete> [TOPIC] [options]

  create TOPIC [--partitions N] [--config key=value ...]   create a topic (default 1 partition)
  list                                                     topic names, one per line
  describe TOPIC                                           partitions, offsets and config as JSON
  delete TOPIC                                             delete a topic and its data

Options:
  --broker HOST:PORT       broker TCP address (default ${brokerDefault})
  -h, --help               show this help
`;

async function connect(broker: string | undefined): Promise<TcpClient> {
  const { host, port } = hostPort("broker", broker ?? brokerDefault);
  return TcpClient.connect({ host, port });
}

/** Writes to stdout, waiting when its buffer is full. */
async function writeOut(chunk: Uint8Array | string): Promise<void> {
  if (!process.stdout.write(chunk)) await new Promise<void>((resolve) => process.stdout.once("drain", () => resolve()));
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
  const { values, positionals } = parseArgs({
    args: argv,
    options: {
      broker: { type: "string" },
      partition: { type: "string" },
      "key-separator": { type: "string" },
      "batch-records": { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
    allowPositionals: true,
  });
  if (values.help) return void process.stdout.write(produceHelp), 0;
  if (positionals.length !== 1) throw new UsageError("produce needs exactly one TOPIC");
  const topic = positionals[0];
  const partition = intOption("partition", values.partition, -1, 0, 4095);
  const batchRecords = intOption("batch-records", values["batch-records"], 1000, 1, 100_000);
  const separator = values["key-separator"] === undefined ? null : utf8(values["key-separator"]);
  if (separator !== null && separator.length === 0) throw new UsageError("--key-separator must not be empty");
  const client = await connect(values.broker);
  const inFlight: Promise<unknown>[] = [];
  let builder = new EntryBatchBuilder(64 * 1024);
  let total = 0;
  const send = async () => {
    if (builder.count === 0) return;
    const batch = builder.build();
    total += batch.count;
    builder = new EntryBatchBuilder(64 * 1024);
    inFlight.push(client.produce(topic, batch, { partition }));
    if (inFlight.length >= 8) await inFlight.shift();
  };
  const addLine = (line: Uint8Array) => {
    if (separator === null) {
      builder.add(null, line);
      return;
    }
    const at = indexOfBytes(line, separator, 0, line.length);
    if (at < 0) builder.add(null, line);
    else builder.add(line.subarray(0, at), line.subarray(at + separator.length));
  };
  try {
    let carry = new Uint8Array(0);
    for await (const chunk of process.stdin as AsyncIterable<Uint8Array>) {
      let data = chunk;
      if (carry.length > 0) {
        data = new Uint8Array(carry.length + chunk.length);
        data.set(carry);
        data.set(chunk, carry.length);
      }
      let start = 0;
      for (;;) {
        const nl = data.indexOf(0x0a, start);
        if (nl < 0) break;
        addLine(data.slice(start, nl));
        start = nl + 1;
        if (builder.count >= batchRecords || builder.sizeBytes >= 1024 * 1024) await send();
      }
      carry = data.slice(start);
    }
    if (carry.length > 0) addLine(carry);
    await send();
    await Promise.all(inFlight);
    process.stderr.write(`es-broker: produced ${total} records to "${topic}"\n`);
    return 0;
  } finally {
    await client.close();
  }
}

/** `es-broker consume TOPIC`. */
export async function consume(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    options: {
      broker: { type: "string" },
      "from-beginning": { type: "boolean", default: false },
      offset: { type: "string" },
      partition: { type: "string" },
      follow: { type: "boolean", default: false },
      "key-separator": { type: "string" },
      "max-records": { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
    allowPositionals: true,
  });
  if (values.help) return void process.stdout.write(consumeHelp), 0;
  if (positionals.length !== 1) throw new UsageError("consume needs exactly one TOPIC");
  const topic = positionals[0];
  const onlyPartition = intOption("partition", values.partition, -1, 0, 4095);
  const startOffset = intOption("offset", values.offset, -1, 0, Number.MAX_SAFE_INTEGER);
  if (startOffset >= 0 && onlyPartition < 0) throw new UsageError("--offset needs --partition");
  if (startOffset >= 0 && values["from-beginning"]) throw new UsageError("give --offset or --from-beginning, not both");
  const maxRecords = intOption("max-records", values["max-records"], Number.MAX_SAFE_INTEGER, 1, Number.MAX_SAFE_INTEGER);
  const separator = values["key-separator"] === undefined ? null : utf8(values["key-separator"]);
  const newline = new Uint8Array([0x0a]);
  const client = await connect(values.broker);
  let printed = 0;
  try {
    const [description] = await client.metadata([topic]);
    const partitions = onlyPartition >= 0 ? [onlyPartition] : description.partitions.map((p) => p.partition);
    if (onlyPartition >= description.partitions.length) throw new UsageError(`topic "${topic}" has no partition ${onlyPartition}`);
    const print = async (key: Uint8Array | null, value: Uint8Array) => {
      if (separator !== null) {
        if (key !== null) await writeOut(key);
        await writeOut(separator);
      }
      await writeOut(value);
      await writeOut(newline);
    };
    const readPartition = async (partition: number, stopAt: number | null) => {
      const info = description.partitions[partition];
      let offset = startOffset >= 0 ? startOffset : values["from-beginning"] ? info.logStartOffset : info.highWatermark;
      for (;;) {
        if (printed >= maxRecords) return;
        if (stopAt !== null && offset >= stopAt) return;
        const r = await client.fetch({ topic, partition, offset, maxRecords: 1000, waitMs: stopAt === null ? 30_000 : 0 });
        for (const record of r.records) {
          if (stopAt !== null && record.offset >= stopAt) return;
          if (printed >= maxRecords) return;
          await print(record.key, record.value);
          printed++;
        }
        if (stopAt !== null && r.records.length === 0 && r.nextOffset <= offset) return;
        offset = r.nextOffset;
      }
    };
    if (values.follow) {
      await Promise.all(partitions.map((p) => readPartition(p, null)));
    } else {
      for (const p of partitions) {
        const { highWatermark } = await client.listOffsets({ topic, partition: p });
        await readPartition(p, highWatermark);
      }
    }
    return 0;
  } finally {
    await client.close();
  }
}

function describeText(t: TopicDescription): string {
  return JSON.stringify(
    {
      name: t.name,
      partitions: t.partitions.map((p) => ({
        partition: p.partition,
        log_start_offset: p.logStartOffset,
        high_watermark: p.highWatermark,
        size_bytes: p.sizeBytes,
        segments: p.segmentCount,
        fenced: p.fenced,
      })),
      config: t.config,
    },
    null,
    2,
  );
}

/** `es-broker topics create|list|describe|delete`. */
export async function topics(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    options: {
      broker: { type: "string" },
      partitions: { type: "string" },
      config: { type: "string", multiple: true },
      help: { type: "boolean", short: "h", default: false },
    },
    allowPositionals: true,
  });
  if (values.help || positionals.length === 0) {
    process.stdout.write(topicsHelp);
    return values.help ? 0 : 2;
  }
  const [action, name, ...rest] = positionals;
  if (rest.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(rest[0])}`);
  const needName = () => {
    if (name === undefined) throw new UsageError(`topics ${action} needs a TOPIC`);
    return name;
  };
  const config: Record<string, unknown> = {};
  for (const pair of values.config ?? []) {
    const eq = pair.indexOf("=");
    if (eq <= 0) throw new UsageError(`--config must be key=value, got ${JSON.stringify(pair)}`);
    const raw = pair.slice(eq + 1);
    config[pair.slice(0, eq)] = /^-?\d+$/.test(raw) ? Number(raw) : raw;
  }
  if (!["create", "list", "describe", "delete"].includes(action)) throw new UsageError(`unknown topics action ${JSON.stringify(action)} (create, list, describe, delete)`);
  const topicName = action === "list" ? "" : needName();
  const partitions = intOption("partitions", values.partitions, 1, 1, 4096);
  const client = await connect(values.broker);
  try {
    switch (action) {
      case "create": {
        const t = await client.createTopic({ name: topicName, partitions, config });
        process.stdout.write(describeText(t) + "\n");
        return 0;
      }
      case "list": {
        for (const t of await client.metadata([])) process.stdout.write(`${t.name}\n`);
        return 0;
      }
      case "describe": {
        const [t] = await client.metadata([topicName]);
        process.stdout.write(describeText(t) + "\n");
        return 0;
      }
      default: {
        await client.deleteTopic(topicName);
        process.stdout.write(`deleted topic "${topicName}"\n`);
        return 0;
      }
    }
  } finally {
    await client.close();
  }
}
