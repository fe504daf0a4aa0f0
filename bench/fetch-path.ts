/**
 * The fetch path's CPU per record, in one process, with no socket: `node bench/fetch-path.mjs
 * [--records 100000] [--batch 1000] [--value-bytes 256] [--rounds 5] [--fetches 300] [--only REGEX]`.
 * `--only REGEX` keeps the variants whose names match. A
 * `LocalBroker` on a temporary directory (on tmpfs where there is one) is loaded with `records` records of `value-bytes`
 * printable bytes (read back from the page cache), then each round times `fetches` fetches of
 * `batch` records, from offset 0 on and around, in each variant:
 *
 * - `read`: `broker.fetch` alone (the storage read and its CRC check), what a TCP answer costs
 *   above the socket write (its bytes are sent as they are);
 * - `read+client`: the same plus the TCP client's check of the answer (`checkFetchedRecords`):
 *   the consumer's side of a TCP fetch, without its socket read;
 * - `read+crc-each`, `read+crc-batch`: plus a check of the answer's CRCs, record by record or
 *   all together (`recordCrcsMatch`);
 * - `read+json-base64`, `read+ndjson-utf8`, `read+ndjson-base64`: plus the HTTP answer's body
 *   (`fetchJsonBytes` / `fetchNdjsonBytes`), what an HTTP answer costs above `node:http`'s write,
 *   each answer in a new buffer; `…-kept`: the same, written into kept buffers (`AnswerBuffers`,
 *   each given back at once, as the server gives it back once the answer is written).
 *
 * `--heap-objects N` keeps N small objects alive for the whole run, as a broker that has served
 * for a while holds its state, so that each mark-compact costs about what it costs there (a new
 * buffer per answer brings one every few dozen answers; docs/benchmarks.md).
 *
 * Prints, per variant, the median over the rounds of the process's CPU time (user + system,
 * `process.cpuUsage`) per record. Compare two versions of the code by running this in each
 * (docs/benchmarks.md "Small requests (issue #22)"): the figure moves far less with the machine's
 * other load than records/s do.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { LocalBroker } from "../src/broker/broker.ts";
import { checkFetchedRecords } from "../src/client/records.ts";
import { silentLogger } from "../src/lib/logger.ts";
import { systemClock } from "../src/runtime/clock.ts";
import { installFastCrc32 } from "../src/runtime/crc.ts";
import { NodeFileSystem } from "../src/runtime/node-fs.ts";
import {
  DecodeStatus,
  EntryBatchBuilder,
  RecordCursor,
  recordCrcsMatch,
} from "../src/storage/record.ts";
import {
  AnswerBuffers,
  fetchJsonBytes,
  fetchNdjsonBytes,
} from "../src/transport/http/fetch-json.ts";

/** Checks each record's CRC on its own (what every check did before `recordCrcsMatch`); the count. */
function crcEach(bytes: Uint8Array): number {
  const cursor = new RecordCursor().reset(bytes);
  let n = 0;
  for (let pos = 0; pos < bytes.length && cursor.decode(pos) === DecodeStatus.Ok; n++)
    pos += cursor.sizeBytes;
  return n;
}

/** Runs the benchmark with command-line arguments `argv`; resolves to the exit code. */
export async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      records: { type: "string", default: "100000" },
      batch: { type: "string", default: "1000" },
      "value-bytes": { type: "string", default: "256" },
      rounds: { type: "string", default: "5" },
      fetches: { type: "string", default: "300" },
      only: { type: "string" },
      "heap-objects": { type: "string", default: "0" },
    },
  });
  const records = Number(values.records);
  const batch = Number(values.batch);
  const valueBytes = Number(values["value-bytes"]);
  const rounds = Number(values.rounds);
  const fetches = Number(values.fetches);
  const held: { n: number; text: string }[] = [];
  for (let i = 0; i < Number(values["heap-objects"]); i++) held.push({ n: i, text: `o${i}` });
  const crc = installFastCrc32();
  const dir = fs.mkdtempSync(
    join(fs.existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir(), "es-fetch-path-"),
  );
  const broker = await LocalBroker.open({
    fs: new NodeFileSystem(),
    dataDir: dir,
    clock: systemClock,
    logger: silentLogger,
  });
  try {
    await broker.createTopic({ name: "f", partitions: 1 });
    const value = new Uint8Array(valueBytes);
    for (let i = 0; i < valueBytes; i++) value[i] = 0x61 + ((i * 7) % 26);
    for (let done = 0; done < records; done += 1000) {
      const b = new EntryBatchBuilder();
      for (let i = 0; i < Math.min(1000, records - done); i++) b.add(null, value);
      await broker.produce({ topic: "f", partition: 0, batch: b.build() });
    }
    let sink = 0;
    const buffers = new AnswerBuffers();
    const kept = (bytes: Uint8Array<ArrayBuffer>) => {
      sink += bytes.length;
      buffers.give(bytes);
    };
    const variants: [
      string,
      (r: Awaited<ReturnType<LocalBroker["fetch"]>>, offset: number) => void,
    ][] = [
      ["read", () => {}],
      ["read+client", (r, offset) => checkFetchedRecords(r, offset)],
      ["read+crc-each", (r) => void (sink += crcEach(r.records.bytes))],
      [
        "read+crc-batch",
        (r) => void (sink += recordCrcsMatch(r.records.bytes, 0, r.records.bytes.length) ? 1 : 0),
      ],
      ["read+json-base64", (r) => void (sink += fetchJsonBytes(r, "base64").length)],
      ["read+ndjson-utf8", (r) => void (sink += fetchNdjsonBytes(r, "utf8").bytes.length)],
      ["read+ndjson-base64", (r) => void (sink += fetchNdjsonBytes(r, "base64").bytes.length)],
      ["read+json-base64-kept", (r) => kept(fetchJsonBytes(r, "base64", Infinity, buffers))],
      ["read+ndjson-utf8-kept", (r) => kept(fetchNdjsonBytes(r, "utf8", Infinity, buffers).bytes)],
      [
        "read+ndjson-base64-kept",
        (r) => kept(fetchNdjsonBytes(r, "base64", Infinity, buffers).bytes),
      ],
    ];
    if (values.only !== undefined) {
      const only = new RegExp(values.only);
      variants.splice(0, variants.length, ...variants.filter(([name]) => only.test(name)));
    }
    const perRecord = new Map<string, number[]>(variants.map(([name]) => [name, []]));
    for (let round = 0; round < rounds + 1; round++) {
      for (const [name, work] of variants) {
        let offset = 0;
        let fetched = 0;
        const before = process.cpuUsage();
        for (let i = 0; i < fetches; i++) {
          const r = await broker.fetch({
            topic: "f",
            partition: 0,
            offset,
            maxRecords: batch,
            maxBytes: batch * (valueBytes + 64),
          });
          work(r, offset);
          fetched += r.records.count;
          offset = r.nextOffset >= records ? 0 : r.nextOffset;
        }
        const used = process.cpuUsage(before);
        // The first round warms up.
        if (round > 0) perRecord.get(name)!.push((used.user + used.system) / fetched);
      }
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    process.stdout.write(
      `fetch path, ${batch} records of ${valueBytes} B per fetch, CRC-32: ${crc}; CPU µs per record, median of ${rounds} rounds (all rounds)\n`,
    );
    for (const [name, xs] of perRecord)
      process.stdout.write(
        `${name.padEnd(20)} ${median(xs).toFixed(3)}  (${xs.map((x) => x.toFixed(3)).join(" ")})\n`,
      );
    if (sink < 0 || held.length < 0) process.stdout.write("\n");
    return 0;
  } finally {
    await broker.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
